#!/usr/bin/env bash
# Install the edgefuse bundle @@BUNDLE_ID@@ on an Ascend board (or into a root file system).
# Written by `edgefuse build`; needs bash, coreutils (sha256sum), tar, gzip and, for signed
# bundles, openssl (1.1.1 or later: Ed25519), not edgefuse.
#
#   bash install.sh [ARCHIVE.tar.gz | BUNDLE_DIR]   verify, install beside the old version, switch
#   bash install.sh --rollback                      switch back to the previous version
#   bash install.sh --verify-only [ARCHIVE | DIR]   only the checks
# Options: --root DIR (install into a root file system, e.g. a card image's rootfs; implies
#   --offline: the board's own Python builds the environment at first boot, from the bundle's
#   hash-pinned wheels, never an index), --offline (no
#   systemctl, no Python: what the card maker's hook uses), --finish (the deferred part on the
#   board: Python environment, service start), --no-python, --expect-sha256 HEX (the archive's
#   published digest), --key PUB.pem (a trusted signing key, besides ROOT/etc/edgefuse/keys/*.pem),
#   --allow-downgrade (install a release that is not newer: see below), --health-cmd CMD (must
#   succeed after the switch, else the old version comes back; EDGEFUSE_CURRENT names the new
#   release; give curl a --max-time), --health-timeout SECONDS (default 60: the first pass must come within it), --health-check-timeout SECONDS (default 30:
#   one run of CMD is killed after it, and never runs past --health-timeout), --health-passes N
#   and --health-window SECONDS (default 3 over 15: a release is good, and older ones are removed,
#   only after N passing checks in a row over the window; one failure in it rolls back; also
#   EDGEFUSE_HEALTH_PASSES, EDGEFUSE_HEALTH_WINDOW, EDGEFUSE_HEALTH_CHECK_TIMEOUT).
#
# Every check runs before anything is written: an archive is refused if it is truncated, holds
# more than 10000 members or one twice, would unpack to more than 100 times its size + 64 MiB
# (8 GiB at most), or holds absolute paths, '..', any link, device files or names outside one
# folder; then its MANIFEST.json alone is extracted and checked (below), its id must be that
# folder's name and every member a file it lists or a folder of one, before anything else is
# extracted. MANIFEST.json must match its own digest and name exactly this bundle; every file
# must match MANIFEST.json, no file may be unlisted. Where the device trusts signing keys,
# MANIFEST.json must carry a valid Ed25519 signature by one of them. A lower build number than the
# installed one is refused, and for the same build a lower version (PEP 440 order: 2.0.0rc1 <
# 2.0.0 < 2.0.0.post1) or the same version with other content. An installer of another
# version hands a checked bundle to that bundle's own install.sh, so upgrading with the installer
# already on the board (PREFIX/current/install.sh) keeps the check in trusted hands.
#
# Versions live in PREFIX/releases/<id>; each is prepared whole (files, Python environment .venv,
# custom-op package .opp where the models need one and the board has the CANN toolkit; both
# recorded in PREFIX/{venv,opp}-digests/<id>.sha256) and flushed to disk before PREFIX/current
# switches to it with one rename; PREFIX/previous is set to the old version before that switch,
# and older versions are removed only once the new one passed its health checks. SIGTERM, SIGHUP
# (an ssh drop) or SIGINT after the switch and before that verdict puts the old version back,
# then exits non-zero.
#
# One installer at a time per prefix: PREFIX/.lock (flock), held from the checks to the end (a
# first install holds the root folder until it makes PREFIX: nothing is written before the
# checks); a second one is refused, naming the holder's pid. The Python environment is built by
# root in a folder only root can write, then every file in it must be one the locked wheels'
# RECORD lists (with its digest) or one the venv made itself. With --root, PREFIX,
# /etc/edgefuse/keys and /etc/systemd/system are resolved as chroot(ROOT) would: an absolute link
# inside the root file system leads into it, never to the host; in PREFIX, releases/,
# venv-digests/ and opp-digests/ must be folders, current and previous links to releases/NAME.
set -euo pipefail
umask 022
INSTALLER_MARK='# edgefuse-installer: 2 (signatures, device check, health rollback)'
# edgefuse-installer: 2 (signatures, device check, health rollback)

BUNDLE_ID=@@BUNDLE_ID@@
BUNDLE_NAME=@@BUNDLE_NAME@@
PREFIX=@@PREFIX@@
SERVICE=@@SERVICE@@
SERVICE_USER=@@SERVICE_USER@@
SERVICE_GROUP=@@SERVICE_GROUP@@
OPP_VENDOR=@@OPP_VENDOR@@
PYTHON_VERSION=@@PYTHON_VERSION@@  # the board Python the bundle's wheels were resolved for
CANN_HOME=@@CANN_HOME@@  # the spec's target.cann_home: where CANN's pyACL is looked for first
CANN_PTH=edgefuse-cann.pth  # in the environment's site-packages: CANN's Python folders, nothing else
LOCK=requirements.lock  # name==version --hash=sha256:... of every wheel in wheels/
ZEROS=0000000000000000000000000000000000000000000000000000000000000000
NAME_CHARS='A-Za-z0-9._/+@-'
SIG=MANIFEST.sig
MAX_MEMBERS=10000  # files and folders in an archive: a bundle holds a few hundred
MAX_MANIFEST=8388608  # bytes of MANIFEST.json or MANIFEST.sig, read before anything else

ROOT=${EDGEFUSE_ROOT:-/}
MODE=install
OFFLINE=0
PYTHON=1
EXPECT_SHA=
SOURCE=
SCRATCH=
KEYS=()
ALLOW_DOWNGRADE=0
HEALTH_CMD=${EDGEFUSE_HEALTH_CMD:-}
HEALTH_TIMEOUT=60
HEALTH_CHECK_TIMEOUT=${EDGEFUSE_HEALTH_CHECK_TIMEOUT:-30}
HEALTH_PASSES=${EDGEFUSE_HEALTH_PASSES:-3}
HEALTH_WINDOW=${EDGEFUSE_HEALTH_WINDOW:-15}
HEALTH_INTERVAL=2
PASS_ON=()  # the options a handed-over install.sh gets again

die() { echo "install.sh: error: $*" >&2; exit 2; }
fail() { echo "install.sh: error: $*" >&2; exit 1; }
note() { echo "install.sh: $*" >&2; }
cleanup() { if [ -n "$SCRATCH" ]; then rm -rf "$SCRATCH"; fi; }
trap cleanup EXIT

ROOT_GIVEN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) [ $# -ge 2 ] || die "--root needs a folder"; ROOT=$2; ROOT_GIVEN=1; shift 2 ;;
    --root=*) ROOT=${1#--root=}; ROOT_GIVEN=1; shift ;;
    --rollback) MODE=rollback; shift ;;
    --verify-only) MODE=verify; shift ;;
    --finish) MODE=finish; shift ;;
    --offline) OFFLINE=1; PYTHON=0; PASS_ON+=("$1"); shift ;;
    --no-python) PYTHON=0; PASS_ON+=("$1"); shift ;;
    --expect-sha256) [ $# -ge 2 ] || die "--expect-sha256 needs a digest"; EXPECT_SHA=$2; shift 2 ;;
    --key) [ $# -ge 2 ] || die "--key needs a public key file"; KEYS+=("$2"); PASS_ON+=("$1" "$2"); shift 2 ;;
    --allow-downgrade) ALLOW_DOWNGRADE=1; PASS_ON+=("$1"); shift ;;
    --health-cmd) [ $# -ge 2 ] || die "--health-cmd needs a command"; HEALTH_CMD=$2; shift 2 ;;
    --health-timeout) [ $# -ge 2 ] || die "--health-timeout needs seconds"; HEALTH_TIMEOUT=$2; PASS_ON+=("$1" "$2"); shift 2 ;;
    --health-check-timeout) [ $# -ge 2 ] || die "$1 needs seconds"; HEALTH_CHECK_TIMEOUT=$2; shift 2 ;;
    --health-passes) [ $# -ge 2 ] || die "$1 needs a number"; HEALTH_PASSES=$2; shift 2 ;;
    --health-window) [ $# -ge 2 ] || die "$1 needs seconds"; HEALTH_WINDOW=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo pipefail$/{/^#/p}' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$SOURCE" ] || die "give one archive or folder, not '$SOURCE' and '$1'"; SOURCE=$1; shift ;;
  esac
done
case "$HEALTH_TIMEOUT" in ''|*[!0-9]*) die "--health-timeout '$HEALTH_TIMEOUT' is not a number of seconds" ;; esac
case "$HEALTH_WINDOW" in ''|*[!0-9]*) die "--health-window '$HEALTH_WINDOW' is not a number of seconds" ;; esac
case "$HEALTH_CHECK_TIMEOUT" in ''|0|*[!0-9]*) die "--health-check-timeout '$HEALTH_CHECK_TIMEOUT' is \
not a number of seconds (1 or more)" ;; esac
case "$HEALTH_PASSES" in ''|0|*[!0-9]*) die "--health-passes '$HEALTH_PASSES' is not a number (1 or more)" ;; esac
case "$PREFIX" in
  /*) ;;
  *) die "the install prefix '$PREFIX' is not absolute (fix install.prefix in the spec)" ;;
esac
case "$PREFIX/" in
  */../*|*/./*|*//*) die "the install prefix '$PREFIX' has '.', '..' or '//' (fix install.prefix in the spec)" ;;
esac
[ -d "$ROOT" ] || die "--root '$ROOT' is not a folder"
ROOT=$(cd "$ROOT" && pwd -P)
[ "$ROOT" = / ] && ROOT=
if [ -n "$ROOT" ]; then
  [ "$MODE" != finish ] || die "--finish runs on the board itself, not with --root"
  if [ "$PYTHON" = 1 ]; then
    # the host's python3 would build an environment for the host inside the target's rootfs
    note "--root: installing offline; the board builds the Python environment at first boot (--finish)"
  fi
  OFFLINE=1; PYTHON=0
fi
in_root() {  # in_root PATH: the host path of PATH inside ROOT, links resolved as chroot(ROOT) would
  local rest=$1 done= part link hops=0
  while [ -n "$rest" ]; do
    part=${rest%%/*}
    if [ "$part" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
    case "$part" in
      ''|.) continue ;;
      ..) done=${done%/*}; continue ;;  # never above ROOT, as in a chroot
    esac
    if [ -L "$ROOT$done/$part" ]; then
      hops=$((hops + 1))
      [ "$hops" -le 40 ] || die "'$1' in $ROOT: too many levels of links"
      link=$(readlink "$ROOT$done/$part")
      case "$link" in /*) done= ;; esac  # absolute: from ROOT, not from the host's /
      rest=$link${rest:+/$rest}
    else
      done=$done/$part
    fi
  done
  printf '%s\n' "$ROOT$done"
}

DEST="$ROOT$PREFIX"
KEYDIR="$ROOT/etc/edgefuse/keys"
UNITS="$ROOT/etc/systemd/system"
if [ -n "$ROOT" ]; then
  DEST=$(in_root "$PREFIX"); KEYDIR=$(in_root /etc/edgefuse/keys); UNITS=$(in_root /etc/systemd/system)
fi
LIVE=0
if [ -z "$ROOT" ] && [ "$OFFLINE" = 0 ] && command -v systemctl >/dev/null 2>&1 \
    && [ -d /run/systemd/system ]; then
  LIVE=1
fi

# ---- archive checks ------------------------------------------------------------------------------

TOP=  # the archive's one folder: the bundle id MANIFEST.json names
check_archive() {  # check_archive ARCHIVE: its members, then its MANIFEST.json, before extraction
  local archive=$1 names listing line name index=0 members=() kinds=() total=0 limit size count
  local bytes bad head listed path
  [ -f "$archive" ] || die "'$archive' is not a file"
  gzip -t "$archive" 2>/dev/null \
    || die "'$archive' is truncated or not a gzip file (copy it again; nothing was installed)"
  names=$(tar -tzf "$archive" 2>/dev/null) \
    || die "'$archive' is truncated or not a tar archive (copy it again; nothing was installed)"
  # counted before any member is looked at one by one: a flood of empty files costs nothing
  count=$(printf '%s\n' "$names" | wc -l)
  [ "$count" -le "$MAX_MEMBERS" ] || die "unsafe archive: it holds $count members, more than \
$MAX_MEMBERS (a bundle holds a few hundred files and folders); nothing was extracted"
  TOP=${names%%$'\n'*}; TOP=${TOP%%/*}
  case "$TOP" in
    "$BUNDLE_NAME"-*) ;;
    *) die "'$archive' holds '$TOP/', not a bundle of $BUNDLE_NAME ($BUNDLE_NAME-VERSION/)" ;;
  esac
  bad=$(printf '%s\n' "$names" | LC_ALL=C grep -m 1 "[^$NAME_CHARS]" || true)
  [ -z "$bad" ] || die "unsafe archive: member '$bad' has characters a bundle never uses"
  while IFS= read -r name; do
    case "$name" in
      /*) die "unsafe archive: member '$name' has an absolute path" ;;
    esac
    case "/$name/" in
      */../*) die "unsafe archive: member '$name' climbs out with '..'" ;;
    esac
    case "$name" in
      "$TOP"|"$TOP"/*) ;;
      *) die "unsafe archive: member '$name' is outside the bundle's folder '$TOP/'" ;;
    esac
  done <<< "$names"
  bad=$(printf '%s\n' "$names" | sed 's|/$||' | LC_ALL=C sort | uniq -d | sed -n 1p)
  [ -z "$bad" ] || die "unsafe archive: '$bad' is in it twice; a bundle holds each file once"
  # the first letter of each line is the member's type (--numeric-owner: no owner name with
  # spaces can shift anything); a bundle holds only files and folders, never a link
  listing=$(LC_ALL=C tar -tvzf "$archive" --numeric-owner 2>/dev/null) \
    || die "'$archive' cannot be listed"
  mapfile -t members <<< "$names"
  # at most 100 times the archive's size + 64 MiB unpacked, never over 8 GiB: no bomb fills
  # TMPDIR. Summed in bash's 64-bit integers, never awk's (mawk, the awk of Debian 12 and Ubuntu
  # 22.04, prints any sum over 2^31 - 1 as 2147483647): each size has at most 12 digits, so
  # MAX_MEMBERS of them cannot overflow
  size=$(stat -c %s "$archive")
  limit=$((100 * size + 67108864)); [ "$limit" -le 8589934592 ] || limit=8589934592
  while IFS= read -r line; do
    name=${members[$index]}; index=$((index + 1))
    case "${line:0:1}" in
      -) kinds+=(f) ;;
      d) kinds+=(d) ;;
      l) die "unsafe archive: '$name' is a symlink; a bundle holds only files and folders" ;;
      h) die "unsafe archive: '$name' is a hard link; a bundle holds only files and folders" ;;
      *) die "unsafe archive: '$name' is a device, fifo or other special file" ;;
    esac
    [[ "$line" =~ ^[^\ ]+\ +[^\ ]+\ +([0-9]{1,12})\  ]] || die "unsafe archive: '$name' has a \
size of 10^12 bytes or more, or none tar can tell (a decompression bomb?); nothing was extracted"
    bytes=$((10#${BASH_REMATCH[1]}))
    total=$((total + bytes))
    case "$name" in
      "$TOP/MANIFEST.json"|"$TOP/$SIG")
        [ "$bytes" -le "$MAX_MANIFEST" ] || die "unsafe archive: '$name' has $bytes bytes, more \
than the $MAX_MANIFEST a bundle's ever needs; nothing was extracted" ;;
    esac
  done <<< "$listing"
  [ "$index" = "${#members[@]}" ] \
    || die "'$archive' lists its members in two ways; nothing was extracted"
  [ "$total" -le "$limit" ] || die "unsafe archive: it would unpack to $total bytes, more than \
$limit for a $size-byte archive (a decompression bomb?); nothing was extracted"
  # MANIFEST.json (and its signature) alone first: signed, and naming the bundle in its folder
  # name, before anything else leaves the archive
  head="$(dirname "$archive")/manifest"
  rm -rf "$head"; mkdir "$head"
  listed=("$TOP/MANIFEST.json")
  if [[ $'\n'"$names"$'\n' == *$'\n'"$TOP/$SIG"$'\n'* ]]; then listed+=("$TOP/$SIG"); fi
  tar -xzf "$archive" -C "$head" --no-same-owner --no-same-permissions "${listed[@]}" 2>/dev/null \
    || die "'$archive' holds no $TOP/MANIFEST.json: not an edgefuse bundle; nothing was extracted"
  check_manifest "$head/$TOP"
  [ "$(bundle_field "$head/$TOP" id)" = "$TOP" ] || die "'$archive' holds the folder '$TOP/', but \
its MANIFEST.json is the bundle '$(bundle_field "$head/$TOP" id)': renamed or mixed up; nothing \
was extracted"
  # every member is a file MANIFEST.json lists (or MANIFEST.json, MANIFEST.sig) or a folder of one
  local -A allowed=(["$TOP"]=d ["$TOP/MANIFEST.json"]=f ["$TOP/$SIG"]=f)
  while IFS= read -r path; do
    [ -n "$path" ] || continue
    allowed["$TOP/$path"]=f
    while [[ "$path" == */* ]]; do path=${path%/*}; allowed["$TOP/$path"]=d; done
  done < <(manifest_files "$head/$TOP" | cut -c67-)
  for index in "${!members[@]}"; do
    name=${members[$index]%/}
    [ "${allowed[$name]:-}" = "${kinds[$index]}" ] || die "unsafe archive: '${members[$index]}' \
is not in MANIFEST.json's list (planted?); nothing was extracted"
  done
  rm -rf "$head"
}

# ---- bundle checks -------------------------------------------------------------------------------

manifest_files() {  # "sha256  path" lines from MANIFEST.json's "files" block
  sed -n '/^  "files": {$/,/^  }/p' "$1/MANIFEST.json" \
    | sed -n 's/^    "\([^"]*\)": "\([0-9a-f]\{64\}\)",\{0,1\}$/\2  \1/p'
}

manifest_digest() {
  sed -n 's/^  "manifest_sha256": "\([0-9a-f]\{64\}\)",$/\1/p' "$1/MANIFEST.json"
}

bundle_field() {  # bundle_field DIR KEY: a value of MANIFEST.json's "bundle" block
  sed -n '/^  "bundle": {$/,/^  }/p' "$1/MANIFEST.json" \
    | sed -n "s/^    \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" | head -n 1
}

trusted_keys() {  # the keys given with --key, then the device's trust store
  local key
  for key in ${KEYS[@]+"${KEYS[@]}"}; do printf '%s\n' "$key"; done
  for key in "$KEYDIR"/*.pem; do
    if [ -n "$ROOT" ]; then key=$(in_root "${key#"$ROOT"}"); fi  # a link in the root, not the host
    [ -f "$key" ] && printf '%s\n' "$key"
  done
  return 0
}

UNSIGNED_NOTED=0  # said once: the archive's MANIFEST.json and the extracted one are both checked
check_signature() {  # the Ed25519 signature of MANIFEST.json, by a key this device trusts
  local dir=$1 key keys
  keys=$(trusted_keys)
  if [ -z "$keys" ]; then
    [ "$UNSIGNED_NOTED" = 1 ] \
      || note "warning: no trusted signing key (--key, or $KEYDIR/*.pem): checking integrity only"
    UNSIGNED_NOTED=1
    return 0
  fi
  [ -f "$dir/$SIG" ] \
    || die "'$dir' is not signed, and this device installs only bundles signed by a key in $KEYDIR"
  command -v openssl >/dev/null 2>&1 || die "openssl is needed to check the bundle's signature"
  while IFS= read -r key; do
    [ -f "$key" ] || die "the trusted key '$key' does not exist"
    if openssl pkeyutl -verify -pubin -inkey "$key" -rawin -in "$dir/MANIFEST.json" \
        -sigfile "$dir/$SIG" >/dev/null 2>&1; then
      return 0
    fi
  done <<< "$keys"
  die "the signature of '$dir' matches no trusted key ($(printf '%s' "$keys" | tr '\n' ' ')): \
forged, or signed with another key; nothing was installed"
}

built_listing() {  # built_listing RELEASE FOLDER: the digest record of what this installer built
  # in RELEASE/FOLDER (.venv, .opp): every file's sha256, every link's target
  (cd "$1" && find "$2" -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum \
    && find "$2" -type l -print | LC_ALL=C sort | while IFS= read -r link; do
      printf 'link  %s -> %s\n' "$link" "$(readlink "$link")"; done)
}

venv_listing() { built_listing "$1" .venv; }

venv_record() { printf '%s/venv-digests/%s.sha256' "$DEST" "$(basename "$1")"; }

opp_record() { printf '%s/opp-digests/%s.sha256' "$DEST" "$(basename "$1")"; }

check_manifest() {  # MANIFEST.json: its own digest, its signature, and the bundle it names
  local dir=$1 expected actual id name
  [ -f "$dir/MANIFEST.json" ] || die "'$dir' has no MANIFEST.json: not an edgefuse bundle"
  expected=$(manifest_digest "$dir")
  [ -n "$expected" ] || die "$dir/MANIFEST.json carries no manifest_sha256: damaged or not a bundle"
  actual=$(sed "s/^  \"manifest_sha256\": \"[0-9a-f]\{64\}\",\$/  \"manifest_sha256\": \"$ZEROS\",/" \
    "$dir/MANIFEST.json" | sha256sum | cut -d' ' -f1)
  [ "$actual" = "$expected" ] || die "$dir/MANIFEST.json was modified (its digest does not match)"
  check_signature "$dir"
  # exactly this bundle name (never a prefix of another's), and the id it makes with the version
  id=$(bundle_field "$dir" id); name=$(bundle_field "$dir" name)
  [ "$name" = "$BUNDLE_NAME" ] && [ "$id" = "$name-$(bundle_field "$dir" version)" ] \
    || die "'$dir' is the bundle '$id' (name '$name'), not one of $BUNDLE_NAME"
}

installed_release() {  # the one place an installed release may be: DEST/releases/<id>-<digest>
  local dir=$1 here releases
  here=$(cd "$dir" && pwd -P); releases=$(cd "$DEST/releases" 2>/dev/null && pwd -P) || return 1
  [ "$here" = "$releases/$(bundle_field "$dir" id)-$(manifest_digest "$dir" | cut -c1-12)" ]
}

verify_tree() {  # verify_tree DIR [installed]: an installed release may hold what this
  # installer built in it (.venv: the Python environment, .opp: the custom-op package)
  local dir=$1 installed=${2:-} listed found bad record folder what built=()
  check_manifest "$dir"
  for folder in .venv .opp; do
    [ -n "$installed" ] && { [ -e "$dir/$folder" ] || [ -L "$dir/$folder" ]; } || continue
    # only in the release folder it was built in, exactly as recorded then (bundle_check.py
    # applies the same rule); anywhere else, or in a bundle to install, it is an unlisted file
    case "$folder" in
      .venv) record=$(venv_record "$dir"); what="the Python environment" ;;
      *) record=$(opp_record "$dir"); what="the custom-op package" ;;
    esac
    installed_release "$dir" && [ ! -L "$dir/$folder" ] && [ -f "$record" ] \
      && [ "$(built_listing "$dir" "$folder")" = "$(cat "$record")" ] \
      || die "$dir/$folder is not $what this installer built (changed or planted)"
    built+=(-path "./$folder" -prune -o)
  done
  bad=$(cd "$dir" && find . ${built[@]+"${built[@]}"} ! -type f ! -type d -print | sed -n 1p)
  [ -z "$bad" ] || bad="$dir/${bad#./}"
  found=$(cd "$dir" && find . ${built[@]+"${built[@]}"} -type f ! -path ./MANIFEST.json \
    ! -path "./$SIG" -print | sed 's|^\./||' | LC_ALL=C sort)
  [ -z "$bad" ] || die "'$bad' is a link or special file; a bundle holds only files and folders"
  listed=$(manifest_files "$dir" | cut -c67- | LC_ALL=C sort)
  if [ "$listed" != "$found" ]; then
    bad=$(LC_ALL=C comm -3 <(printf '%s\n' "$listed") <(printf '%s\n' "$found") | head -n 3 | tr -d '\t')
    die "the files of '$dir' differ from MANIFEST.json's list (missing or unlisted: $bad)"
  fi
  if ! bad=$(cd "$dir" && manifest_files . | sha256sum -c --quiet --strict 2>&1); then
    die "a file does not match MANIFEST.json (tampered or damaged; nothing was installed):
$(printf '%s\n' "$bad" | grep -v '^sha256sum: WARNING' | head -n 5)"
  fi
}

VERSION_RE='^([0-9]+(\.[0-9]+)*)((a|b|rc)([0-9]+))?(\.post([0-9]+))?(\.dev([0-9]+))?$'

number_order() {  # number_order A B: -1, 0 or 1; whole numbers of any length (no overflow)
  local a=${1#"${1%%[!0]*}"} b=${2#"${2%%[!0]*}"}
  a=${a:-0}; b=${b:-0}
  if [ "${#a}" != "${#b}" ]; then
    if [ "${#a}" -lt "${#b}" ]; then echo -1; else echo 1; fi
  elif [ "$a" = "$b" ]; then echo 0
  elif [[ "$a" < "$b" ]]; then echo -1
  else echo 1
  fi
}

version_key() {  # the PEP 440 order of a version after its release numbers: pre, post, dev
  local pre=${BASH_REMATCH[3]} letter=${BASH_REMATCH[4]} post=${BASH_REMATCH[6]}
  local dev=${BASH_REMATCH[8]}
  if [ -n "$pre" ]; then  # 1.0a1 < 1.0b1 < 1.0rc1 < 1.0
    case "$letter" in a) printf '1 0 %s' "${BASH_REMATCH[5]}" ;; b) printf '1 1 %s' \
      "${BASH_REMATCH[5]}" ;; *) printf '1 2 %s' "${BASH_REMATCH[5]}" ;; esac
  elif [ -z "$post" ] && [ -n "$dev" ]; then printf '0 0 0'  # 1.0.dev1 < 1.0a1
  else printf '2 0 0'
  fi
  if [ -n "$post" ]; then printf ' 1 %s' "${BASH_REMATCH[7]}"; else printf ' 0 0'; fi
  if [ -n "$dev" ]; then printf ' 0 %s\n' "${BASH_REMATCH[9]}"; else printf ' 1 0\n'; fi
}

version_order() {  # version_order A B: -1, 0 or 1 in PEP 440's order; fails for another form
  local a=$1 b=$2 ra rb ka kb i order
  [[ "$a" =~ $VERSION_RE ]] || return 1
  IFS=. read -ra ra <<< "${BASH_REMATCH[1]}"; read -ra ka <<< "$(version_key)"
  [[ "$b" =~ $VERSION_RE ]] || return 1
  IFS=. read -ra rb <<< "${BASH_REMATCH[1]}"; read -ra kb <<< "$(version_key)"
  while [ "${#ra[@]}" -lt "${#rb[@]}" ]; do ra+=(0); done  # 1.0 == 1.0.0
  while [ "${#rb[@]}" -lt "${#ra[@]}" ]; do rb+=(0); done
  ra+=("${ka[@]}"); rb+=("${kb[@]}")
  for i in "${!ra[@]}"; do
    order=$(number_order "${ra[$i]}" "${rb[$i]}")
    [ "$order" = 0 ] || { echo "$order"; return 0; }
  done
  echo 0
}

check_not_older() {  # refuse a lower build number, a lower version (PEP 440) of the same build,
  # and other content under the installed version and build
  local new=$1 cur new_build cur_build new_version cur_version order
  [ "$ALLOW_DOWNGRADE" = 0 ] && [ -f "$DEST/current/MANIFEST.json" ] || return 0
  cur=$(readlink -f "$DEST/current")
  [ "$(manifest_digest "$cur")" != "$(manifest_digest "$new")" ] || return 0
  new_build=$(bundle_field "$new" build); cur_build=$(bundle_field "$cur" build)
  new_build=${new_build:-0}; cur_build=${cur_build:-0}
  new_version=$(bundle_field "$new" version); cur_version=$(bundle_field "$cur" version)
  case "$new_build$cur_build" in
    *[!0-9]*) die "cannot order build '$new_build' after the installed build '$cur_build'; pass \
--allow-downgrade to install it anyway" ;;
  esac
  case "$(number_order "$new_build" "$cur_build")" in
    -1) die "downgrade refused: $new_version (build $new_build) is older than the installed \
$cur_version (build $cur_build); pass --allow-downgrade to install it anyway" ;;
    1) return 0 ;;
  esac
  order=$(version_order "$new_version" "$cur_version") || die "cannot order $new_version after \
the installed $cur_version (build $cur_build, both): one is not a PEP 440 version \
(N[.N]...[{a|b|rc}N][.postN][.devN]); pass --allow-downgrade to install it anyway"
  case "$order" in
    -1) die "downgrade refused: $new_version is older than the installed $cur_version (PEP 440 \
order; build $new_build, both); pass --allow-downgrade to install it anyway" ;;
    0) die "refused: $new_version (build $new_build) is installed already, with other content \
(MANIFEST.json $(manifest_digest "$cur" | cut -c1-12), this one $(manifest_digest "$new" \
| cut -c1-12)): give a rebuild a new version or build number; pass --allow-downgrade to replace \
it anyway" ;;
  esac
}

# ---- install ---------------------------------------------------------------------------------------

lock_holder() {  # "pid N: its command line" of the processes that hold PATH open on fd 8 or 9
  local fd pid found=
  for fd in /proc/[0-9]*/fd/[89]; do
    pid=${fd#/proc/}; pid=${pid%%/*}
    [ "$pid" != $$ ] && [ "$fd" -ef "$1" ] 2>/dev/null || continue
    found="${found:+$found; }pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
  done
  printf '%s' "${found:-pid unknown}"
}

hold_lock() {  # hold_lock FD PATH: flock PATH on FD 8 or 9, refused at once when another holds it
  local fd=$1 path=$2
  command -v flock >/dev/null 2>&1 || die "flock (util-linux) is needed: one installer at a time"
  # handed over by our own installer: the same open file, whose lock is already ours
  if ! [ "/proc/$$/fd/$fd" -ef "$path" ]; then
    if [ "$fd" = 8 ]; then exec 8<"$path"; else exec 9<"$path"; fi
  fi
  flock -n "$fd" || die "another installer is at work on $DEST ($(lock_holder "$path")); let it \
finish, then run this again; nothing was changed"
}

take_lock() {  # from the checks to the end: PREFIX/.lock, or the root folder until PREFIX exists
  if [ -f "$DEST/.lock" ] && [ ! -L "$DEST/.lock" ]; then hold_lock 9 "$DEST/.lock"
  else hold_lock 9 "${ROOT:-/}"; fi
}

lock_prefix() {  # before the first write: PREFIX/.lock itself, made while the root's lock is ours
  [ "/proc/$$/fd/9" -ef "$DEST/.lock" ] && return 0
  mkdir -p "$DEST"
  [ ! -L "$DEST/.lock" ] || die "$DEST/.lock is a link; remove it"
  [ -f "$DEST/.lock" ] || : >> "$DEST/.lock"
  hold_lock 8 "$DEST/.lock"
}

check_layout() {  # what install.sh keeps in PREFIX: its own folders, links to releases/NAME only
  local name target entry
  for name in releases venv-digests opp-digests; do
    [ ! -L "$DEST/$name" ] || die "$DEST/$name is a link; install.sh keeps a folder there (remove \
the link; nothing was changed)"
  done
  for name in current previous; do
    [ -L "$DEST/$name" ] || { [ ! -e "$DEST/$name" ] || die "$DEST/$name is not a link"; continue; }
    target=$(readlink "$DEST/$name")
    case "$target" in
      releases/.*|releases/*/*) die "$DEST/$name points to '$target', not to a release" ;;
      releases/?*) ;;
      *) die "$DEST/$name points to '$target', not to a release in $DEST/releases (a link install.sh \
did not make; nothing was changed)" ;;
    esac
  done
  for entry in "$DEST"/releases/*; do
    [ ! -L "$entry" ] || die "$entry is a link; a release is a folder (nothing was changed)"
  done
}

flush() {  # write everything under the given paths to the card before a rename depends on it
  sync -f "$@" 2>/dev/null || sync
}

switch_link() {  # switch_link NAME TARGET: rename a new symlink over NAME (atomic)
  ln -sfn "$2" "$DEST/.$1.new"
  mv -Tf "$DEST/.$1.new" "$DEST/$1"
  flush "$DEST"
}

install_service_files() {
  [ -n "$SERVICE" ] || return 0
  local units=$UNITS wants
  wants=$units/multi-user.target.wants
  if [ -n "$ROOT" ]; then wants=$(in_root /etc/systemd/system/multi-user.target.wants); fi
  mkdir -p "$units" "$wants"
  if ! cmp -s "$DEST/current/systemd/$SERVICE.service" "$units/$SERVICE.service"; then
    rm -f "$units/.$SERVICE.service.new"  # never written through a link left there
    cp "$DEST/current/systemd/$SERVICE.service" "$units/.$SERVICE.service.new"
    flush "$units/.$SERVICE.service.new"
    mv -f "$units/.$SERVICE.service.new" "$units/$SERVICE.service"
  fi
  # what `systemctl enable` does, without a running systemd
  ln -sfn "/etc/systemd/system/$SERVICE.service" "$wants/$SERVICE.service"
}

only_root_writes() {  # every folder from / down to DIR: root's, and only root (or sticky) writes
  local dir=$1 bad
  [ "$(id -u)" = 0 ] || return 0  # not root: the user building it is the one who runs it
  while :; do
    bad=$(find "$dir" -maxdepth 0 \( ! -user 0 -o \( -perm /022 ! -perm -1000 \) \) -print)
    [ -z "$bad" ] || fail "$bad is writable by a user other than root: a process of that user could \
change the Python environment while it is built; fix its owner and mode (chown root:; chmod \
go-w); nothing was switched"
    [ "$dir" != / ] || return 0
    dir=$(dirname "$dir")
  done
}

cann_python_paths() {  # the folders CANN's set_env.sh puts on PYTHONPATH, where pyACL (acl.so) is
  local home
  for home in "${ASCEND_TOOLKIT_HOME:-}" "$CANN_HOME" /usr/local/Ascend/ascend-toolkit/latest \
      /usr/local/Ascend/nnrt/latest; do
    if [ -n "$home" ] && { [ -e "$home/python/site-packages/acl.so" ] \
        || [ -d "$home/python/site-packages/acl" ]; }; then
      printf '%s\n' "$home/python/site-packages"
      if [ -d "$home/opp/built-in/op_impl/ai_core/tbe" ]; then
        printf '%s\n' "$home/opp/built-in/op_impl/ai_core/tbe"
      fi
      return 0
    fi
  done
  return 0
}

cann_pth_of() { cat "$1"/lib/python*/site-packages/"$CANN_PTH" 2>/dev/null || true; }

scratch() { [ -n "$SCRATCH" ] || SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/edgefuse-bundle.XXXXXX"); }

check_venv() {  # check_venv RELEASE OWN: every file of RELEASE/.venv is one a locked wheel's RECORD
  # lists (with its sha256), pip's marks and the bytecode of listed sources, the CANN .pth, or one
  # the venv made itself (OWN, listed before pip ran); prints what is not, and fails then
  python3 -I - "$1/.venv" "$1/wheels" "$1/$LOCK" "$2" "$CANN_PTH" <<'PY'
import base64, hashlib, os, re, sys, zipfile
venv, wheels, lock, own_list, cann_pth = sys.argv[1:]
lib = os.path.join(venv, "lib")
site = os.path.join("lib", next(n for n in os.listdir(lib) if n.startswith("python")),
                    "site-packages")
pyver = site.split(os.sep)[1]  # pythonX.Y
locked = set(re.findall(r"--hash=sha256:([0-9a-f]{64})", open(lock).read()))
allowed = {os.path.normpath(p) for p in open(own_list).read().splitlines()}
allowed.add(os.path.join(site, cann_pth))
digests = {}  # path -> the urlsafe-base64 sha256 its wheel's RECORD gives
for name in sorted(os.listdir(wheels)):
    path = os.path.join(wheels, name)
    with open(path, "rb") as handle:
        if hashlib.sha256(handle.read()).hexdigest() not in locked:
            continue
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        record = next(n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n))
        info = record.split("/")[0]
        dist = info[: -len(".dist-info")].split("-")[0]
        for mark in ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json"):
            allowed.add(os.path.join(site, info, mark))
        if info + "/entry_points.txt" in names:
            section = ""
            for line in wheel.read(info + "/entry_points.txt").decode().splitlines():
                line = line.strip()
                if line.startswith("["):
                    section = line
                elif "=" in line and section in ("[console_scripts]", "[gui_scripts]"):
                    allowed.add(os.path.join("bin", line.split("=")[0].strip()))
        for row in wheel.read(record).decode().splitlines():
            if not row.strip():
                continue
            member, digest = row.rsplit(",", 2)[:2]
            member = member.strip('"')
            data = re.fullmatch(r"[^/]+\.data/([^/]+)/(.+)", member)
            if data is None:
                target = os.path.join(site, member)
            elif data[1] in ("purelib", "platlib"):
                target = os.path.join(site, data[2])
            elif data[1] == "scripts":  # pip rewrites their #! line: listed, not digested
                allowed.add(os.path.normpath(os.path.join("bin", data[2])))
                continue
            elif data[1] == "headers":
                target = os.path.join("include", "site", pyver, dist, data[2])
            else:
                target = data[2]
            target = os.path.normpath(target)
            allowed.add(target)
            if digest.startswith("sha256="):
                digests[target] = digest[len("sha256="):].rstrip("=")
bad = []
for root, folders, files in os.walk(venv):
    for name in files + [f for f in folders if os.path.islink(os.path.join(root, f))]:
        full = os.path.join(root, name)
        rel = os.path.relpath(full, venv)
        source = re.fullmatch(r"(.*)/__pycache__/([^/.]+)\.[^/]+\.pyc", rel)
        if rel not in allowed and not (source and f"{source[1]}/{source[2]}.py" in allowed):
            bad.append(f"  not listed by a locked wheel's RECORD: {rel}")
        elif rel in digests:
            with open(full, "rb") as handle:
                got = base64.urlsafe_b64encode(hashlib.sha256(handle.read()).digest())
            if got.decode().rstrip("=") != digests[rel]:
                bad.append(f"  not the file its wheel's RECORD lists: {rel}")
print("\n".join(bad[:10]))
sys.exit(1 if bad else 0)
PY
}

python_env() {  # python_env RELEASE: its environment, built in place from its own wheels only
  [ "$PYTHON" = 1 ] || return 0
  local release=$1 venv="$1/.venv" record interpreter have cann site bad
  record=$(venv_record "$release")
  cann=$(cann_python_paths)
  if [ -f "$record" ] && [ -d "$venv" ] && [ "$(venv_listing "$release")" = "$(cat "$record")" ] \
      && [ "$(cann_pth_of "$venv")" = "$cann" ]; then
    return 0  # built, unchanged, and CANN is where it was (else rebuilt: CANN came or moved)
  fi
  rm -rf "$venv" "$record"
  command -v python3 >/dev/null 2>&1 || die "python3 is needed to install the edgefuse wheel"
  have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) \
    || fail "python3 does not run: the Python environment of $(basename "$release") could not \
be built; nothing was switched"
  [ "$have" = "$PYTHON_VERSION" ] || fail "the bundle's wheels are for Python $PYTHON_VERSION, \
but python3 here is $have: the Python environment of $(basename "$release") could not be built; \
nothing was switched (build with python.version: \"$have\")"
  [ -f "$release/$LOCK" ] && [ -d "$release/wheels" ] \
    || fail "$(basename "$release") carries no $LOCK and wheels/ (an edgefuse that installed \
from an index at first boot built it): rebuild it; nothing was switched"
  # Only the bundle's wheels, each pinned by its sha256 (covered by MANIFEST.json and its
  # signature): --no-index, --isolated (no pip.conf or PIP_* variable adds a source),
  # --require-hashes. The environment sees none of the system's site-packages (the image's
  # NumPy or OpenCV can never shadow the locked ones); CANN's pyACL comes in through one .pth
  # naming CANN's Python folders, found now. Built by root (the user running this) in a folder
  # only root can write: no process of the service user can plant a file (a .pth runs at every
  # start of that Python) while pip works; then every file is checked against the locked wheels'
  # RECORD before it is recorded. Built in place: pip writes this path into every #! line.
  only_root_writes "$release"
  mkdir "$venv"
  note "installing $LOCK into $venv from wheels/ only (hash-pinned, no index)"
  if ! python3 -m venv "$venv"; then
    rm -rf "$venv"
    fail "python3 -m venv failed: the Python environment of $(basename "$release") could not be \
built; nothing was switched"
  fi
  scratch
  (cd "$venv" && find . ! -type d -print | LC_ALL=C sort) > "$SCRATCH/venv-own"  # before pip
  if ! "$venv/bin/python" -m pip install --isolated --no-input \
        --disable-pip-version-check --no-cache-dir --no-index --find-links "$release/wheels" \
        --require-hashes --ignore-installed -r "$release/$LOCK"; then
    rm -rf "$venv"
    fail "the Python environment of $(basename "$release") could not be built from its own \
wheels (pip refuses a wheel that does not match $LOCK); nothing was switched"
  fi
  site=$(echo "$venv"/lib/python*/site-packages)
  if [ -n "$cann" ]; then
    printf '%s\n' "$cann" > "$site/$CANN_PTH"
    note "CANN's Python folders for pyACL (import acl), in $site/$CANN_PTH: $(printf '%s' "$cann" | tr '\n' ' ')"
  else
    note "no CANN found (acl.so in \$ASCEND_TOOLKIT_HOME, $CANN_HOME, /usr/local/Ascend/*/latest: \
python/site-packages): the service runs on the CPU fallback; once CANN is installed, run \
install.sh --finish"
  fi
  if ! bad=$(check_venv "$release" "$SCRATCH/venv-own"); then
    rm -rf "$venv"
    fail "the Python environment of $(basename "$release") holds files its locked wheels do not \
list (planted while it was built?); nothing was switched:
$bad"
  fi
  interpreter=$(sed -n '1s/^#!//p' "$venv/bin/edgefuse")
  if [ "$interpreter" = /bin/sh ]; then  # pip's trampoline for a long path: '''exec' "PY" ...
    interpreter=$(sed -n "2s/^'''exec' \"\{0,1\}\([^\" ]*\).*/\\1/p" "$venv/bin/edgefuse")
  fi
  if [ ! -x "$interpreter" ]; then
    rm -rf "$venv"
    fail "$venv/bin/edgefuse names '$interpreter', which does not exist; nothing was switched"
  fi
  mkdir -p "$DEST/venv-digests"
  venv_listing "$release" > "$record.new"
  flush "$venv" "$record.new"
  mv -f "$record.new" "$record"
}

ensure_user() {
  [ -n "$SERVICE" ] && [ -z "$ROOT" ] || return 0
  id -u "$SERVICE_USER" >/dev/null 2>&1 && return 0
  note "creating the service user $SERVICE_USER"
  getent group "$SERVICE_GROUP" >/dev/null 2>&1 || groupadd --system "$SERVICE_GROUP"
  useradd --system --gid "$SERVICE_GROUP" --home-dir /nonexistent --shell /usr/sbin/nologin \
    "$SERVICE_USER"
}

opp_package() {  # opp_package RELEASE: its custom-op package, built from RELEASE/opp into
  # RELEASE/.opp (ASCEND_CUSTOM_OPP_PATH names PREFIX/current/.opp/vendors/VENDOR) where the
  # board has the CANN toolkit, and recorded: each release runs and rolls back with its own
  local release=$1 record work
  [ -n "$OPP_VENDOR" ] && [ -d "$release/opp" ] || return 0
  record=$(opp_record "$release")
  if [ -f "$record" ] && [ -d "$release/.opp" ] \
      && [ "$(built_listing "$release" .opp)" = "$(cat "$record")" ]; then
    return 0
  fi
  rm -rf "$release/.opp" "$record"
  if [ -z "${ASCEND_HOME_PATH:-}" ] || ! command -v cmake >/dev/null 2>&1; then
    note "the models need edgefuse's custom-op package, built on the board: with the CANN \
toolkit set up (ASCEND_HOME_PATH, cmake), run install.sh --finish"
    return 0
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/edgefuse-opp.XXXXXX")
  cp -R "$release/opp/." "$work/"
  if ! (cd "$work" && bash build.sh && bash install.sh "$release/.opp"); then
    rm -rf "$work" "$release/.opp"
    fail "the custom-op package of $(basename "$release") could not be built (its log is above); \
nothing was switched"
  fi
  rm -rf "$work"
  mkdir -p "$DEST/opp-digests"
  built_listing "$release" .opp > "$record.new"
  flush "$release/.opp" "$record.new"
  mv -f "$record.new" "$record"
}

start_service() {
  [ -n "$SERVICE" ] && [ "$LIVE" = 1 ] || return 0
  systemctl daemon-reload
  systemctl enable "$SERVICE.service"
  systemctl restart --no-block "$SERVICE.service"
  note "started $SERVICE.service (journalctl -u $SERVICE -f)"
}

HEALTH_WHY=
HEALTH_PID=  # the check in flight, stopped by a signal
PAUSE_PID=

pause() {  # pause SECONDS, as a child a signal's trap does not wait for
  sleep "$1" & PAUSE_PID=$!
  wait "$PAUSE_PID" || true
  PAUSE_PID=
}

health_once() {  # health_once LIMIT: systemd's state (live board), then the command, killed at LIMIT s
  local limit=$1 state status=0
  HEALTH_WHY=
  if [ -n "$SERVICE" ] && [ "$LIVE" = 1 ]; then
    state=$(systemctl is-active "$SERVICE.service" 2>/dev/null || true)
    [ "$state" = active ] || HEALTH_WHY="$SERVICE.service is $state"
  fi
  [ -z "$HEALTH_WHY" ] && [ -n "$HEALTH_CMD" ] || return 0
  scratch
  # in the background, waited for: a SIGTERM or SIGHUP is handled at once, not after the check;
  # timeout kills the check's whole process group; the install lock is not passed on
  EDGEFUSE_CURRENT="$DEST/current" EDGEFUSE_ROOT="${ROOT:-/}" \
    timeout -k 5 "$limit" bash -c "$HEALTH_CMD" > "$SCRATCH/health.out" 2>&1 8<&- 9<&- &
  HEALTH_PID=$!
  wait "$HEALTH_PID" || status=$?
  HEALTH_PID=
  case "$status" in
    0) ;;
    124|137) HEALTH_WHY="the health check '$HEALTH_CMD' did not finish within $limit s (killed)" ;;
    *) HEALTH_WHY="the health check '$HEALTH_CMD' failed (exit $status): $(tail -n 3 \
"$SCRATCH/health.out")" ;;
  esac
}

healthy() {  # a first pass within --health-timeout, then --health-passes in a row over the window
  local deadline=$((SECONDS + HEALTH_TIMEOUT)) limit passes=1 gap
  [ -n "$HEALTH_CMD" ] || { [ -n "$SERVICE" ] && [ "$LIVE" = 1 ]; } || return 0
  while :; do
    limit=$HEALTH_CHECK_TIMEOUT  # never past the deadline (--health-timeout 0: one try)
    if [ "$HEALTH_TIMEOUT" -gt 0 ] && [ $((deadline - SECONDS)) -lt "$limit" ]; then
      limit=$((deadline - SECONDS)); [ "$limit" -ge 1 ] || limit=1
    fi
    health_once "$limit"
    [ -n "$HEALTH_WHY" ] || break
    [ "$SECONDS" -lt "$deadline" ] || return 1
    pause "$HEALTH_INTERVAL"
  done
  # the rest spread over the window, in milliseconds: a release that falls over after its first
  # pass (a crash loop, a leak) is not good; one failure here rolls back
  [ "$HEALTH_PASSES" -gt 1 ] || return 0
  gap=$((HEALTH_WINDOW * 1000 / (HEALTH_PASSES - 1)))
  gap=$((gap / 1000)).$(printf '%03d' $((gap % 1000)))
  while [ "$passes" -lt "$HEALTH_PASSES" ]; do
    pause "$gap"
    health_once "$HEALTH_CHECK_TIMEOUT"
    if [ -n "$HEALTH_WHY" ]; then
      HEALTH_WHY="$HEALTH_WHY, after $passes passing check(s) of $HEALTH_PASSES"
      return 1
    fi
    passes=$((passes + 1))
  done
}

UNDO_OLD=  # while a switched release waits for its verdict: the links to put back
UNDO_PREV=
UNDO_RELEASE=
PENDING=0
HANDED=  # the bundle's own install.sh, running in the background (hand_over)

put_back() {  # current (and previous) as they were before this install; the new release removed
  switch_link current "$UNDO_OLD"
  if [ -n "$UNDO_PREV" ]; then switch_link previous "$UNDO_PREV"; else rm -f "$DEST/previous"; fi
  install_service_files
  start_service
  case "releases/$UNDO_RELEASE" in
    "$UNDO_OLD"|"$UNDO_PREV") ;;  # an installed release it had switched to again: kept
    *) rm -rf "${DEST:?}/releases/$UNDO_RELEASE" "$(venv_record "$UNDO_RELEASE")" \
         "$(opp_record "$UNDO_RELEASE")" ;;
  esac
}

on_signal() {  # on_signal NAME CODE: stopped (ssh drop, kill, Ctrl-C): put back, then exit CODE
  trap '' TERM HUP INT PIPE  # finish putting back; the terminal may be gone: notes may fail
  if [ -n "$HANDED" ]; then  # the handed-over installer rolls itself back; its exit is ours
    kill -s "$([ "$1" = HUP ] && echo HUP || echo TERM)" "$HANDED" 2>/dev/null || true
    wait "$HANDED" && exit "$2"
    exit $?
  fi
  if [ -n "$HEALTH_PID" ]; then  # the check's process group; timeout ends after its command
    kill -TERM -- "-$HEALTH_PID" 2>/dev/null || kill -TERM "$HEALTH_PID" 2>/dev/null || true
    wait "$HEALTH_PID" 2>/dev/null || true
  fi
  if [ -n "$PAUSE_PID" ]; then kill "$PAUSE_PID" 2>/dev/null || true; fi
  if [ "$PENDING" = 1 ] && [ -n "$UNDO_OLD" ] && [ "$UNDO_OLD" != "releases/$UNDO_RELEASE" ]; then
    put_back
    echo "install.sh: error: stopped by SIG$1 before $UNDO_RELEASE passed its health check; \
rolled back to $UNDO_OLD" >&2 || true
  elif [ "$PENDING" = 1 ]; then
    echo "install.sh: error: stopped by SIG$1 before $UNDO_RELEASE passed its health check; no \
earlier release to return to" >&2 || true
  fi
  exit "$2"
}
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP
trap 'on_signal INT 130' INT

install_bundle() {
  local src=$1 digest release old prev staging entry
  digest=$(manifest_digest "$src")
  release="$BUNDLE_ID-${digest:0:12}"
  lock_prefix
  old=$(readlink "$DEST/current" 2>/dev/null || true)
  prev=$(readlink "$DEST/previous" 2>/dev/null || true)
  mkdir -p "$DEST/releases"
  # 1. the whole release beside the live one: files, then its Python environment in place
  if [ -d "$DEST/releases/$release" ]; then
    verify_tree "$DEST/releases/$release" installed
  else
    staging="$DEST/releases/.$release.new"
    rm -rf "$staging"
    mkdir -p "$staging"
    cp -R "$src/." "$staging/"
    verify_tree "$staging"
    flush "$staging"
    mv -T "$staging" "$DEST/releases/$release"
    flush "$DEST/releases"
  fi
  python_env "$DEST/releases/$release"
  if [ "$OFFLINE" = 0 ]; then opp_package "$DEST/releases/$release"; fi
  # 2. previous first: killed between the two renames, both links name working releases; from
  # here until the verdict, a SIGTERM, SIGHUP or SIGINT puts the old release back
  UNDO_OLD=$old; UNDO_PREV=$prev; UNDO_RELEASE=$release; PENDING=1
  if [ "$old" != "releases/$release" ]; then
    if [ -n "$old" ]; then switch_link previous "$old"; fi
    switch_link current "releases/$release"
  fi
  install_service_files
  start_service
  # 3. healthy, or back to the old release
  if ! healthy; then
    if [ -n "$old" ] && [ "$old" != "releases/$release" ]; then
      trap '' TERM HUP INT  # putting back is not stopped half-way
      put_back
      PENDING=0
      fail "$BUNDLE_ID failed its health check ($HEALTH_WHY); rolled back to $old"
    fi
    PENDING=0
    fail "$BUNDLE_ID failed its health check ($HEALTH_WHY); no earlier release to return to"
  fi
  PENDING=0
  # 4. marked good: keep it and the one to roll back to
  prev=$(readlink "$DEST/previous" 2>/dev/null || true)
  for entry in "$DEST"/releases/*; do
    [ -e "$entry" ] || continue
    case "releases/$(basename "$entry")" in
      "releases/$release"|"$prev") ;;
      *) rm -rf "$entry" "$(venv_record "$entry")" "$(opp_record "$entry")" ;;
    esac
  done
  note "installed $BUNDLE_ID as $DEST/current -> releases/$release"
}

rollback() {
  local cur prev
  check_layout
  cur=$(readlink "$DEST/current" 2>/dev/null || true)
  prev=$(readlink "$DEST/previous" 2>/dev/null || true)
  [ -n "$prev" ] && [ -d "$DEST/$prev" ] || die "no previous version to roll back to in $DEST"
  [ "$prev" != "$cur" ] || die "previous and current are both $cur in $DEST: nothing to roll back to"
  lock_prefix
  verify_tree "$DEST/$prev" installed
  python_env "$DEST/$prev"
  switch_link current "$prev"
  switch_link previous "$cur"
  install_service_files
  start_service
  note "rolled back: $DEST/current -> $prev"
}

SRC=
source_tree() {  # SRC: the bundle folder to install: the given one, an extracted archive, or ours
  SRC=${SOURCE:-$(cd "$(dirname "$0")" && pwd)}
  if [ -f "$SRC" ]; then
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/edgefuse-bundle.XXXXXX")
    # one private copy is hashed, checked and extracted: the original may change meanwhile
    cp "$SRC" "$SCRATCH/archive.tar.gz"
    if [ -n "$EXPECT_SHA" ]; then
      [ "$(sha256sum "$SCRATCH/archive.tar.gz" | cut -d' ' -f1)" = "$EXPECT_SHA" ] \
        || die "'$SRC' does not have the sha256 given with --expect-sha256"
    fi
    check_archive "$SCRATCH/archive.tar.gz"
    mkdir "$SCRATCH/tree"
    tar -xzf "$SCRATCH/archive.tar.gz" -C "$SCRATCH/tree" --no-same-owner --no-same-permissions
    SRC="$SCRATCH/tree/$TOP"
  elif [ -n "$EXPECT_SHA" ]; then
    die "--expect-sha256 checks an archive; '$SRC' is a folder"
  fi
  [ -d "$SRC" ] || die "'$SRC' is neither a bundle archive nor a bundle folder"
  verify_tree "$SRC"
  check_not_older "$SRC"
  device_check
}

device_check() {  # the installer already on the device checks the bundle too, when it is another
  local installed="$DEST/current/install.sh" args what=$SRC
  [ "$MODE" = install ] && [ -f "$installed" ] || return 0
  cmp -s "$installed" "$0" && return 0
  grep -qx "$INSTALLER_MARK" "$installed" || return 0  # an installer from before signatures
  args=(--verify-only ${PASS_ON[@]+"${PASS_ON[@]}"})
  if [ -n "$ROOT" ]; then args+=(--root "$ROOT"); fi
  note "the installed $(bundle_field "$(readlink -f "$DEST/current")" id) checks it as well"
  if [ -n "$SCRATCH" ]; then what=$SCRATCH/archive.tar.gz; fi
  bash "$installed" "${args[@]}" "$what" \
    || die "the installer on this device refuses the bundle; nothing was installed"
}

hand_over() {  # a checked bundle of another version installs with its own (now trusted) script
  local id
  id=$(bundle_field "$SRC" id)
  [ "$id" != "$BUNDLE_ID" ] || return 0
  note "$id is checked; its own install.sh installs it"
  local args=(${PASS_ON[@]+"${PASS_ON[@]}"})
  if [ -n "$ROOT" ]; then args+=(--root "$ROOT"); fi
  if [ -n "$HEALTH_CMD" ]; then args+=(--health-cmd "$HEALTH_CMD"); fi
  # the lock (fd 9) goes with it; the health settings as variables, which an older installer
  # ignores rather than refuses; run in the background, so that a signal reaches it (on_signal)
  EDGEFUSE_HEALTH_PASSES=$HEALTH_PASSES EDGEFUSE_HEALTH_WINDOW=$HEALTH_WINDOW \
    EDGEFUSE_HEALTH_CHECK_TIMEOUT=$HEALTH_CHECK_TIMEOUT bash "$SRC/install.sh" "${args[@]}" "$SRC" &
  HANDED=$!
  local status=0
  wait "$HANDED" || status=$?
  exit "$status"
}

case "$MODE" in
  verify) source_tree; note "${SOURCE:-$SRC}: $(bundle_field "$SRC" id) (build \
$(bundle_field "$SRC" build)): every file matches MANIFEST.json" ;;
  rollback) take_lock; rollback ;;
  finish)
    take_lock
    [ -L "$DEST/current" ] || die "nothing installed in $DEST to finish"
    lock_prefix; check_layout
    verify_tree "$(readlink -f "$DEST/current")" installed
    ensure_user; python_env "$(readlink -f "$DEST/current")"
    opp_package "$(readlink -f "$DEST/current")"; start_service
    healthy || fail "$BUNDLE_ID is not healthy after --finish ($HEALTH_WHY)" ;;
  install)
    take_lock  # from the checks (check_not_older reads current) to the end
    check_layout
    source_tree
    hand_over
    if [ "$OFFLINE" = 0 ]; then ensure_user; fi
    install_bundle "$SRC" ;;
esac
