#!/usr/bin/env bash
# Atlas 200I DK A2 card-maker hook for the edgefuse bundle @@BUNDLE_ID@@ (written by edgefuse build).
#
# The card maker (make_sd_card.py -> make_os_sd.sh, preInstallHook) runs
#     bash minirc_install_hook.sh <rootfs>
# against the root file system it is building, with no systemd running. This hook verifies the
# bundle, installs it into <rootfs>@@PREFIX@@ with the bundle's install.sh (--offline), enables the
# service the way `systemctl enable` would (the multi-user.target.wants link) and adds to
# <rootfs>/var/minirc_hook.sh, which the board runs once at first boot, the steps that need the
# running board: the Python environment (from the bundle's hash-pinned wheels only, no network)
# and starting the service. Running it twice leaves the same result: the release is reused and
# the first-boot block is replaced, not added again.
#
# The bundle is this script's own folder (it ships inside the bundle) or the folder
# @@BUNDLE_ID@@/ next to it (scripts/build-image.sh copies both next to the card maker).
#
# Signing keys: public keys (*.pem) in a folder trusted-keys/ next to this script, or named by
# EDGEFUSE_TRUSTED_KEYS (colon-separated paths), are installed into <rootfs>/etc/edgefuse/keys/
# first, each named by its fingerprint, and the bundle's edgefuse-verify-installer into
# <rootfs>@@VERIFIER_PATH@@: from then on the board installs only bundles signed by one of them,
# this one included, and runs a new bundle's install.sh only through that verifier.
#
# Links in <rootfs>: every path the hook writes is resolved inside the root as chroot(<rootfs>)
# would resolve it (the in_root of the bundle's own install.sh, which --root uses): a link in the
# image to /etc is the image's /etc, never this machine's. A path that still leads out of the root
# is refused (exit 2) before anything is written.
set -euo pipefail

BUNDLE_ID=@@BUNDLE_ID@@
PREFIX=@@PREFIX@@
BEGIN="# >>> edgefuse $BUNDLE_ID >>>"
END="# <<< edgefuse $BUNDLE_ID <<<"

die() { echo "minirc_install_hook.sh: error: $*" >&2; exit 2; }

[ $# -eq 1 ] || die "usage: bash minirc_install_hook.sh ROOTFS"
ROOTFS=$1
[ -d "$ROOTFS" ] || die "'$ROOTFS' is not a folder"
[ -d "$ROOTFS/etc" ] || die "'$ROOTFS' has no etc/: not a root file system"
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -f "$HERE/MANIFEST.json" ] && [ -f "$HERE/install.sh" ]; then
  BUNDLE=$HERE
elif [ -f "$HERE/$BUNDLE_ID/MANIFEST.json" ]; then
  BUNDLE=$HERE/$BUNDLE_ID
else
  die "cannot find the bundle: expected MANIFEST.json next to this script or in $HERE/$BUNDLE_ID/"
fi

KEYS=()
for key in "$HERE"/trusted-keys/*.pem; do [ -f "$key" ] && KEYS+=("$key"); done
IFS=: read -r -a given <<< "${EDGEFUSE_TRUSTED_KEYS:-}"
for key in ${given[@]+"${given[@]}"}; do
  [ -f "$key" ] || die "EDGEFUSE_TRUSTED_KEYS names '$key', which is not a file"
  KEYS+=("$key")
done
KEY_ARGS=()
for key in ${KEYS[@]+"${KEYS[@]}"}; do
  openssl pkey -pubin -in "$key" -noout 2>/dev/null || die "'$key' is not a PEM public key"
  KEY_ARGS+=(--key "$key")
done
# checked with the keys before anything is written into the rootfs
bash "$BUNDLE/install.sh" --verify-only --root "$ROOTFS" ${KEY_ARGS[@]+"${KEY_ARGS[@]}"} "$BUNDLE"

# where the hook writes, resolved as chroot(ROOT) would by the checked install.sh's own in_root
ROOT=$(cd "$ROOTFS" && pwd -P)
[ "$ROOT" != / ] || ROOT=
resolver=$(sed -n '/^in_root() {/,/^}$/p' "$BUNDLE/install.sh")
[ -n "$resolver" ] || die "$BUNDLE/install.sh has no in_root(), which resolves paths inside the root"
eval "$resolver"
within_root() {  # within_root PATH: refused unless its deepest existing folder is inside ROOT
  local dir=$1 real
  while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
  real=$(cd "$dir" && pwd -P)
  case "$real/" in
    "$ROOT"/*) ;;
    *) die "$1 leads out of the root file system $ROOTFS (to $real) through a link; the hook \
writes only inside it (replace the link with a folder; nothing was written)" ;;
  esac
}
KEYDIR=$(in_root /etc/edgefuse/keys)
VERIFIER=$(in_root @@VERIFIER_PATH@@)
hook=$(in_root /var/minirc_hook.sh)
for path in "$KEYDIR" "$VERIFIER" "$hook"; do within_root "$path"; done

if [ ${#KEYS[@]} -gt 0 ]; then
  mkdir -p "$KEYDIR"
  for key in "${KEYS[@]}"; do
    # named by fingerprint (the sha256 of the key's DER form): a key file of the same name from
    # another folder adds a key, it never replaces a trusted one
    fingerprint=$(openssl pkey -pubin -in "$key" -outform DER | sha256sum | cut -d' ' -f1)
    install -m 0644 "$key" "$KEYDIR/$fingerprint.pem"
  done
fi
# beside the keys, from the bundle just checked: what runs a later first install's install.sh
# only where one of these keys signed it (install.sh.sig)
install -D -m 0755 "$BUNDLE/@@VERIFIER@@" "$VERIFIER"
bash "$BUNDLE/install.sh" --root "$ROOTFS" --offline "$BUNDLE"

mkdir -p "$(dirname "$hook")"
tmp=$(mktemp "$(dirname "$hook")/.minirc_hook.sh.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if [ -f "$hook" ]; then
  # everything but an earlier block of this bundle
  awk -v begin="$BEGIN" -v end="$END" '$0 == begin {skip = 1} !skip {print} $0 == end {skip = 0}' \
    "$hook" > "$tmp"
else
  printf '#!/bin/bash\n# run once at first boot (Atlas 200I DK A2 card maker)\n' > "$tmp"
fi
cat >> "$tmp" <<BLOCK
$BEGIN
mkdir -p /var/log/edgefuse
if ! bash $PREFIX/current/install.sh --finish >> /var/log/edgefuse/$BUNDLE_ID-first-boot.log 2>&1; then
  echo "edgefuse: first-boot setup of $BUNDLE_ID failed; see /var/log/edgefuse/$BUNDLE_ID-first-boot.log"
fi
$END
BLOCK
chmod 0755 "$tmp"
mv -f "$tmp" "$hook"
trap - EXIT
echo "minirc_install_hook.sh: installed $BUNDLE_ID into $ROOTFS$PREFIX; first-boot steps in $hook"
