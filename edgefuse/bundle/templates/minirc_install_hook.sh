#!/usr/bin/env bash
# Atlas 200I DK A2 card-maker hook for the edgefuse bundle @@BUNDLE_ID@@ (written by edgefuse build).
#
# The card maker (make_sd_card.py -> make_os_sd.sh, preInstallHook) runs
#     bash minirc_install_hook.sh <rootfs>
# against the root file system it is building, with no systemd running. This hook verifies the
# bundle, installs it into <rootfs>@@PREFIX@@ with the bundle's install.sh (--offline), enables the
# service the way `systemctl enable` would (the multi-user.target.wants link) and adds to
# <rootfs>/var/minirc_hook.sh, which the board runs once at first boot, the steps that need the
# running board: the Python environment and starting the service. Running it twice leaves the
# same result: the release is reused and the first-boot block is replaced, not added again.
#
# The bundle is this script's own folder (it ships inside the bundle) or the folder
# @@BUNDLE_ID@@/ next to it (scripts/build-image.sh copies both next to the card maker).
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

bash "$BUNDLE/install.sh" --root "$ROOTFS" --offline "$BUNDLE"

hook="$ROOTFS/var/minirc_hook.sh"
mkdir -p "$ROOTFS/var"
tmp=$(mktemp "$ROOTFS/var/.minirc_hook.sh.XXXXXX")
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
