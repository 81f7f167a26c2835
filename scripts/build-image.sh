#!/usr/bin/env bash
# One shot from a spec to a bootable card for the Atlas 200I DK A2: what a CI job or a release
# engineer runs.
#
#   scripts/build-image.sh SPEC.yaml [-o OUT_DIR] [--jobs N] [--cache DIR]
#                          [--card-maker DIR_OR_make_sd_card.py] [--device /dev/sdX] [--media SD]
#
# 1. `edgefuse build SPEC.yaml -o OUT_DIR` (the bundle, its reproducible .tar.gz and sha256).
# 2. With --card-maker (the folder of Ascend's make_sd_card.py, or the script itself): copy the
#    bundle and its minirc_install_hook.sh next to make_sd_card.py, where the card maker runs the
#    hook against the rootfs it builds, then run `python3 make_sd_card.py local DEVICE MEDIA`
#    (--device is required; --media defaults to SD). Without --card-maker: leave the hook in the
#    bundle and print the one command that makes the card.
set -euo pipefail

die() { echo "build-image.sh: error: $*" >&2; exit 2; }
usage() { sed -n '2,14p' "$0"; }

SPEC=
OUT=
CARD_MAKER=
DEVICE=
MEDIA=SD
BUILD_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o|--output) [ $# -ge 2 ] || die "$1 needs a folder"; OUT=$2; shift 2 ;;
    --jobs|--cache|--shard) [ $# -ge 2 ] || die "$1 needs a value"; BUILD_ARGS+=("$1" "$2"); shift 2 ;;
    --no-cache|--force|--no-progress) BUILD_ARGS+=("$1"); shift ;;
    --card-maker) [ $# -ge 2 ] || die "--card-maker needs a path"; CARD_MAKER=$2; shift 2 ;;
    --device) [ $# -ge 2 ] || die "--device needs a block device"; DEVICE=$2; shift 2 ;;
    --media) [ $# -ge 2 ] || die "--media needs SD, eMMC, USB, M.2 or NVME"; MEDIA=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$SPEC" ] || die "one SPEC.yaml, not '$SPEC' and '$1'"; SPEC=$1; shift ;;
  esac
done
[ -n "$SPEC" ] || { usage >&2; die "no SPEC.yaml given"; }
case "$MEDIA" in SD|eMMC|USB|M.2|NVME) ;; *) die "--media $MEDIA: use SD, eMMC, USB, M.2 or NVME" ;; esac
OUT=${OUT:-out/$(basename "${SPEC%.*}")}
EDGEFUSE=${EDGEFUSE:-edgefuse}
command -v "$EDGEFUSE" >/dev/null 2>&1 || die "'$EDGEFUSE' is not on PATH (pip install -e . in a venv)"

# the card maker and the device are checked before the build: a mistake costs no build time
if [ -n "$CARD_MAKER" ]; then
  if [ -f "$CARD_MAKER" ]; then maker_dir=$(cd "$(dirname "$CARD_MAKER")" && pwd)
  else maker_dir=$(cd "$CARD_MAKER" 2>/dev/null && pwd) || die "--card-maker '$CARD_MAKER' does not exist"; fi
  [ -f "$maker_dir/make_sd_card.py" ] || die "$maker_dir has no make_sd_card.py"
  [ -n "$DEVICE" ] || die "--device is required with --card-maker (the card's block device, e.g. /dev/sdb)"
  [ -b "$DEVICE" ] || die "$DEVICE is not a block device"
  # the card maker repartitions the whole device: never one that is (or has a partition) mounted,
  # which is how the disk this machine runs from looks
  command -v lsblk >/dev/null 2>&1 || die "lsblk is needed to check that $DEVICE is not in use"
  in_use=$(lsblk -nro MOUNTPOINT "$DEVICE" 2>/dev/null | sed '/^$/d' | head -n 3 | tr '\n' ' ')
  [ -z "$in_use" ] || die "$DEVICE is in use (mounted at: $in_use); give the card's device, not a disk of this machine"
fi

"$EDGEFUSE" build "$SPEC" -o "$OUT" ${BUILD_ARGS[@]+"${BUILD_ARGS[@]}"}
bundle=$(find "$OUT" -mindepth 1 -maxdepth 1 -type d ! -name '.*' | head -n 1)
[ -n "$bundle" ] && [ -f "$bundle/minirc_install_hook.sh" ] || die "no bundle in $OUT"
bundle_id=$(basename "$bundle")

if [ -z "$CARD_MAKER" ]; then
  echo
  echo "bundle ready: $bundle"
  echo "to make the card, on the host with Ascend's card maker (make_sd_card.py and its driver/OS files):"
  echo "  scripts/build-image.sh $SPEC -o $OUT --card-maker /path/to/card-maker --device /dev/sdX --media $MEDIA"
  echo "or by hand: cp -R $bundle $bundle/minirc_install_hook.sh /path/to/card-maker/ && (cd /path/to/card-maker && python3 make_sd_card.py local /dev/sdX $MEDIA)"
  exit 0
fi

rm -rf "${maker_dir:?}/$bundle_id"
cp -R "$bundle" "$maker_dir/$bundle_id"
cp "$bundle/minirc_install_hook.sh" "$maker_dir/minirc_install_hook.sh"
echo "build-image.sh: running the card maker in $maker_dir for $DEVICE ($MEDIA)"
(cd "$maker_dir" && python3 make_sd_card.py local "$DEVICE" "$MEDIA")
