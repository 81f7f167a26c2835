#!/usr/bin/env bash
# qemu-user 10 or later, for the aarch64 rehearsal (`edgefuse bundle rehearse`,
# tests/bundle/test_rehearsal.py): qemu-user 7.2 (Debian 12's) segfaults importing onnxruntime
# 1.3x for aarch64; 10.0 (Debian 13's) runs it.
#
# Where this machine's own suite offers qemu-user >= 10, apt installs it. Otherwise, on Debian,
# Debian 13's qemu-user (a static build that depends on nothing) is downloaded from the Debian
# mirror this machine's own apt sources name, through a private apt configuration (the machine's
# sources, lists and pinning stay as they are), and installed with dpkg. No mirror is named here.
# The rehearsal registers qemu-aarch64 with binfmt_misc itself.
set -euo pipefail
MIN=10
NEWER_SUITE=trixie

major_of() { sed -n 's/^\([0-9]*:\)\{0,1\}\([0-9][0-9]*\)\..*/\2/p' | head -n 1; }

installed=$(qemu-aarch64 --version 2>/dev/null | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' \
  | major_of || true)
if [ -n "$installed" ] && [ "$installed" -ge "$MIN" ]; then
  echo "qemu-user: $(qemu-aarch64 --version | head -n 1)"
  exit 0
fi

candidate=$(apt-cache policy qemu-user 2>/dev/null | sed -n 's/^ *Candidate: *//p' | major_of || true)
if [ -n "$candidate" ] && [ "$candidate" -ge "$MIN" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
  echo "qemu-user: $(qemu-aarch64 --version | head -n 1)"
  exit 0
fi

WANTED="qemu-user >= $MIN (this suite offers ${candidate:-none})"
. "$(dirname "$0")/debian-mirror.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
apt_private "$work" \
  "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $NEWER_SUITE main"
(cd "$work" && apt-get "${apt_options[@]}" download -qq qemu-user)
dpkg -i "$work"/qemu-user_*.deb >/dev/null
echo "qemu-user: $(qemu-aarch64 --version | head -n 1) (Debian $NEWER_SUITE's, from $mirror)"
