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

. /etc/os-release
if [ "${ID:-}" != debian ]; then
  echo "qemu-user.sh: this $PRETTY_NAME offers qemu-user ${candidate:-none} (< $MIN) and is not" \
    "Debian: install qemu-user >= $MIN by hand" >&2
  exit 1
fi
# the mirror of this machine's own suite: deb822 *.sources first, then one-line lists
mirror=$(awk -v suite="$VERSION_CODENAME" 'BEGIN { RS = "" } {
    uri = ""; ours = 0; n = split($0, lines, "\n")
    for (i = 1; i <= n; i++) {
      if (lines[i] ~ /^URIs:/) { split(lines[i], words, /[ \t]+/); uri = words[2] }
      if (lines[i] ~ /^Suites:/) { m = split(lines[i], words, /[ \t]+/)
        for (j = 2; j <= m; j++) if (words[j] == suite) ours = 1 }
    }
    if (ours && uri != "") { print uri; exit }
  }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
if [ -z "$mirror" ]; then
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed 's/\[[^]]*\]//' | awk -v suite="$VERSION_CODENAME" \
      '$1 == "deb" && $3 == suite { print $2; exit }' || true)
fi
[ -n "$mirror" ] || { echo "qemu-user.sh: no apt source for $VERSION_CODENAME" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $NEWER_SUITE main" \
  > "$work/sources.list"
apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
apt-get "${apt_private[@]}" update -qq
(cd "$work" && apt-get "${apt_private[@]}" download -qq qemu-user)
dpkg -i "$work"/qemu-user_*.deb >/dev/null
echo "qemu-user: $(qemu-aarch64 --version | head -n 1) (Debian $NEWER_SUITE's, from $mirror)"
