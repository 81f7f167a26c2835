#!/usr/bin/env bash
# Install the edgefuse bundle @@BUNDLE_ID@@ on an Ascend board (or into a root file system).
# Written by `edgefuse build`; needs bash, coreutils (sha256sum), tar and gzip, not edgefuse.
#
#   bash install.sh [ARCHIVE.tar.gz | BUNDLE_DIR]   verify, install beside the old version, switch
#   bash install.sh --rollback                      switch back to the previous version
#   bash install.sh --verify-only [ARCHIVE | DIR]   only the checks
# Options: --root DIR (install into a root file system, e.g. a card image's rootfs; default /),
#   --offline (no systemctl, no Python: what the card maker's hook uses), --finish (the deferred
#   part on the board: Python environment, service start), --no-python, --expect-sha256 HEX (the
#   archive's published digest).
#
# Every check runs before anything is written: an archive is refused if it is truncated or holds
# absolute paths, '..', links that leave the bundle, device files or names outside the bundle's
# folder; every file must match MANIFEST.json (and MANIFEST.json its own digest), no file may be
# unlisted. Versions live in PREFIX/releases/<id>; PREFIX/current and PREFIX/previous are
# symlinks switched with a rename, so a reader sees the old or the new version, never a mix.
set -euo pipefail
umask 022

BUNDLE_ID=@@BUNDLE_ID@@
PREFIX=@@PREFIX@@
SERVICE=@@SERVICE@@
SERVICE_USER=@@SERVICE_USER@@
SERVICE_GROUP=@@SERVICE_GROUP@@
OPP_VENDOR=@@OPP_VENDOR@@
ZEROS=0000000000000000000000000000000000000000000000000000000000000000
NAME_CHARS='A-Za-z0-9._/+@-'

ROOT=${EDGEFUSE_ROOT:-/}
MODE=install
OFFLINE=0
PYTHON=1
EXPECT_SHA=
SOURCE=
SCRATCH=

die() { echo "install.sh: error: $*" >&2; exit 2; }
note() { echo "install.sh: $*" >&2; }
cleanup() { if [ -n "$SCRATCH" ]; then rm -rf "$SCRATCH"; fi; }
trap cleanup EXIT

while [ $# -gt 0 ]; do
  case "$1" in
    --root) [ $# -ge 2 ] || die "--root needs a folder"; ROOT=$2; shift 2 ;;
    --root=*) ROOT=${1#--root=}; shift ;;
    --rollback) MODE=rollback; shift ;;
    --verify-only) MODE=verify; shift ;;
    --finish) MODE=finish; shift ;;
    --offline) OFFLINE=1; PYTHON=0; shift ;;
    --no-python) PYTHON=0; shift ;;
    --expect-sha256) [ $# -ge 2 ] || die "--expect-sha256 needs a digest"; EXPECT_SHA=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$SOURCE" ] || die "give one archive or folder, not '$SOURCE' and '$1'"; SOURCE=$1; shift ;;
  esac
done
[ -d "$ROOT" ] || die "--root '$ROOT' is not a folder"
ROOT=$(cd "$ROOT" && pwd)
[ "$ROOT" = / ] && ROOT=
DEST="$ROOT$PREFIX"
LIVE=0
if [ -z "$ROOT" ] && [ "$OFFLINE" = 0 ] && command -v systemctl >/dev/null 2>&1 \
    && [ -d /run/systemd/system ]; then
  LIVE=1
fi

# ---- archive checks ------------------------------------------------------------------------------

# inside BASE TARGET: does the link TARGET, written in folder BASE of the archive, stay in the top?
inside() {
  local path="$1/$2" part out=()
  case "$2" in /*) return 1 ;; esac
  local IFS=/
  for part in $path; do
    case "$part" in
      ''|.) ;;
      ..) [ ${#out[@]} -gt 1 ] || return 1; unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  [ ${#out[@]} -ge 1 ] && [ "${out[0]}" = "$BUNDLE_ID" ]
}

check_archive() {
  local archive=$1 names listing line kind name target rest
  [ -f "$archive" ] || die "'$archive' is not a file"
  if [ -n "$EXPECT_SHA" ]; then
    [ "$(sha256sum "$archive" | cut -d' ' -f1)" = "$EXPECT_SHA" ] \
      || die "'$archive' does not have the sha256 given with --expect-sha256"
  fi
  gzip -t "$archive" 2>/dev/null \
    || die "'$archive' is truncated or not a gzip file (copy it again; nothing was installed)"
  names=$(tar -tzf "$archive" 2>/dev/null) \
    || die "'$archive' is truncated or not a tar archive (copy it again; nothing was installed)"
  while IFS= read -r name; do
    case "$name" in
      /*) die "unsafe archive: member '$name' has an absolute path" ;;
    esac
    case "/$name/" in
      */../*) die "unsafe archive: member '$name' climbs out with '..'" ;;
    esac
    if printf '%s' "$name" | LC_ALL=C grep -q "[^$NAME_CHARS]"; then
      die "unsafe archive: member '$name' has characters a bundle never uses"
    fi
    case "$name" in
      "$BUNDLE_ID"|"$BUNDLE_ID"/*) ;;
      *) die "unsafe archive: member '$name' is outside the bundle's folder '$BUNDLE_ID/'" ;;
    esac
  done <<< "$names"
  listing=$(LC_ALL=C tar -tvzf "$archive" 2>/dev/null) || die "'$archive' cannot be listed"
  while IFS= read -r line; do
    kind=${line:0:1}
    case "$kind" in
      -|d) ;;
      l|h)
        # permissions owner size date time NAME (-> TARGET | link to TARGET)
        rest=$(printf '%s\n' "$line" | awk '{for (i = 6; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "")}')
        if [ "$kind" = l ]; then name=${rest%% -> *}; target=${rest#* -> }
        else name=${rest%% link to *}; target=${rest#* link to }; fi
        if [ "$kind" = l ]; then
          inside "$(dirname "$name")" "$target" \
            || die "unsafe archive: symlink '$name' -> '$target' points outside the bundle"
        else
          inside . "$target" \
            || die "unsafe archive: hard link '$name' -> '$target' points outside the bundle"
        fi ;;
      *) die "unsafe archive: '$line' is a device, fifo or other special file" ;;
    esac
  done <<< "$listing"
}

# ---- bundle checks -------------------------------------------------------------------------------

manifest_files() {  # "sha256  path" lines from MANIFEST.json's "files" block
  sed -n '/^  "files": {$/,/^  }/p' "$1/MANIFEST.json" \
    | sed -n 's/^    "\([^"]*\)": "\([0-9a-f]\{64\}\)",\{0,1\}$/\2  \1/p'
}

manifest_digest() {
  sed -n 's/^  "manifest_sha256": "\([0-9a-f]\{64\}\)",$/\1/p' "$1/MANIFEST.json"
}

verify_tree() {
  local dir=$1 expected actual listed found bad
  [ -f "$dir/MANIFEST.json" ] || die "'$dir' has no MANIFEST.json: not an edgefuse bundle"
  expected=$(manifest_digest "$dir")
  [ -n "$expected" ] || die "$dir/MANIFEST.json carries no manifest_sha256: damaged or not a bundle"
  actual=$(sed "s/^  \"manifest_sha256\": \"[0-9a-f]\{64\}\",\$/  \"manifest_sha256\": \"$ZEROS\",/" \
    "$dir/MANIFEST.json" | sha256sum | cut -d' ' -f1)
  [ "$actual" = "$expected" ] || die "$dir/MANIFEST.json was modified (its digest does not match)"
  # .venv: the Python environment install.sh adds to an installed release
  bad=$(find "$dir" -path "$dir/.venv" -prune -o ! -type f ! -type d -print | head -n 1)
  [ -z "$bad" ] || die "'$bad' is a link or special file; a bundle holds only files and folders"
  listed=$(manifest_files "$dir" | cut -c67- | LC_ALL=C sort)
  found=$(cd "$dir" && find . -path ./.venv -prune -o -type f ! -path ./MANIFEST.json -print \
    | sed 's|^\./||' | LC_ALL=C sort)
  if [ "$listed" != "$found" ]; then
    bad=$(LC_ALL=C comm -3 <(printf '%s\n' "$listed") <(printf '%s\n' "$found") | head -n 3 | tr -d '\t')
    die "the files of '$dir' differ from MANIFEST.json's list (missing or unlisted: $bad)"
  fi
  if ! bad=$(cd "$dir" && manifest_files . | sha256sum -c --quiet --strict 2>&1); then
    die "a file does not match MANIFEST.json (tampered or damaged; nothing was installed):
$(printf '%s\n' "$bad" | grep -v '^sha256sum: WARNING' | head -n 5)"
  fi
}

# ---- install ---------------------------------------------------------------------------------------

switch_link() {  # switch_link NAME TARGET: rename a new symlink over NAME (atomic)
  ln -sfn "$2" "$DEST/.$1.new"
  mv -Tf "$DEST/.$1.new" "$DEST/$1"
}

install_service_files() {
  [ -n "$SERVICE" ] || return 0
  local units="$ROOT/etc/systemd/system"
  mkdir -p "$units/multi-user.target.wants"
  cp "$DEST/current/systemd/$SERVICE.service" "$units/.$SERVICE.service.new"
  mv -f "$units/.$SERVICE.service.new" "$units/$SERVICE.service"
  # what `systemctl enable` does, without a running systemd
  ln -sfn "/etc/systemd/system/$SERVICE.service" "$units/multi-user.target.wants/$SERVICE.service"
}

python_env() {
  [ "$PYTHON" = 1 ] || return 0
  local release venv wheel
  release=$(readlink -f "$DEST/current")
  venv="$release/.venv"
  [ -x "$venv/bin/edgefuse" ] && return 0
  command -v python3 >/dev/null 2>&1 || die "python3 is needed to install the edgefuse wheel"
  wheel=$(ls "$release"/app/edgefuse-*.whl)
  note "installing $(basename "$wheel") into $venv"
  rm -rf "$venv.new"
  python3 -m venv --system-site-packages "$venv.new"
  # --system-site-packages: the board's numpy/opencv/onnxruntime serve when installed; pip
  # fetches the rest (set PIP_INDEX_URL / PIP_FIND_LINKS for an offline mirror)
  "$venv.new/bin/pip" install "$wheel"
  mv -T "$venv.new" "$venv"
}

ensure_user() {
  [ -n "$SERVICE" ] && [ -z "$ROOT" ] || return 0
  id -u "$SERVICE_USER" >/dev/null 2>&1 && return 0
  note "creating the service user $SERVICE_USER"
  getent group "$SERVICE_GROUP" >/dev/null 2>&1 || groupadd --system "$SERVICE_GROUP"
  useradd --system --gid "$SERVICE_GROUP" --home-dir /nonexistent --shell /usr/sbin/nologin \
    "$SERVICE_USER"
}

opp_package() {  # build and install the custom-op package where the board has the CANN toolkit
  [ -n "$OPP_VENDOR" ] && [ -d "$DEST/current/opp" ] || return 0
  [ -d "$DEST/opp/vendors/$OPP_VENDOR" ] && return 0
  if [ -z "${ASCEND_HOME_PATH:-}" ] || ! command -v cmake >/dev/null 2>&1; then
    note "the models need edgefuse's custom-op package; with the CANN toolkit set up, run:"
    note "  cp -R $DEST/current/opp /tmp/opp && cd /tmp/opp && bash build.sh && bash install.sh $DEST/opp"
    return 0
  fi
  local work
  work=$(mktemp -d "${TMPDIR:-/tmp}/edgefuse-opp.XXXXXX")
  cp -R "$DEST/current/opp/." "$work/"
  (cd "$work" && bash build.sh && bash install.sh "$DEST/opp")
  rm -rf "$work"
}

start_service() {
  [ -n "$SERVICE" ] && [ "$LIVE" = 1 ] || return 0
  systemctl daemon-reload
  systemctl enable "$SERVICE.service"
  systemctl restart --no-block "$SERVICE.service"
  note "started $SERVICE.service (journalctl -u $SERVICE -f)"
}

install_bundle() {
  local src=$1 digest release old
  digest=$(manifest_digest "$src")
  release="$BUNDLE_ID-${digest:0:12}"
  mkdir -p "$DEST/releases"
  if [ -d "$DEST/releases/$release" ]; then
    verify_tree "$DEST/releases/$release"
  else
    rm -rf "$DEST/releases/.$release.new"
    mkdir -p "$DEST/releases/.$release.new"
    cp -R "$src/." "$DEST/releases/.$release.new/"
    verify_tree "$DEST/releases/.$release.new"
    mv -T "$DEST/releases/.$release.new" "$DEST/releases/$release"
  fi
  old=$(readlink "$DEST/current" 2>/dev/null || true)
  if [ "$old" != "releases/$release" ]; then
    switch_link current "releases/$release"
    if [ -n "$old" ]; then switch_link previous "$old"; fi
  fi
  # keep the current version and one to roll back to
  local keep_prev entry
  keep_prev=$(readlink "$DEST/previous" 2>/dev/null || true)
  for entry in "$DEST"/releases/*; do
    [ -e "$entry" ] || continue
    case "releases/$(basename "$entry")" in
      "releases/$release"|"$keep_prev") ;;
      *) rm -rf "$entry" ;;
    esac
  done
  install_service_files
  note "installed $BUNDLE_ID as $DEST/current -> releases/$release"
}

rollback() {
  local cur prev
  cur=$(readlink "$DEST/current" 2>/dev/null || true)
  prev=$(readlink "$DEST/previous" 2>/dev/null || true)
  [ -n "$prev" ] && [ -d "$DEST/$prev" ] || die "no previous version to roll back to in $DEST"
  verify_tree "$DEST/$prev"
  switch_link current "$prev"
  switch_link previous "$cur"
  install_service_files
  note "rolled back: $DEST/current -> $prev"
}

SRC=
source_tree() {  # SRC: the bundle folder to install: the given one, an extracted archive, or ours
  SRC=${SOURCE:-$(cd "$(dirname "$0")" && pwd)}
  if [ -f "$SRC" ]; then
    check_archive "$SRC"
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/edgefuse-bundle.XXXXXX")
    tar -xzf "$SRC" -C "$SCRATCH" --no-same-owner --no-same-permissions
    SRC="$SCRATCH/$BUNDLE_ID"
  fi
  [ -d "$SRC" ] || die "'$SRC' is neither a bundle archive nor a bundle folder"
  verify_tree "$SRC"
}

case "$MODE" in
  verify) source_tree; note "${SOURCE:-$SRC}: every file matches MANIFEST.json" ;;
  rollback) rollback; python_env; start_service ;;
  finish)
    [ -L "$DEST/current" ] || die "nothing installed in $DEST to finish"
    verify_tree "$(readlink -f "$DEST/current")"
    ensure_user; python_env; opp_package; start_service ;;
  install)
    source_tree
    install_bundle "$SRC"
    if [ "$OFFLINE" = 0 ]; then ensure_user; python_env; opp_package; start_service; fi ;;
esac
