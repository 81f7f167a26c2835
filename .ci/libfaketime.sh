#!/usr/bin/env bash
# A libfaketime whose preload leaves a multi-threaded Python's sleeps and waits working with the
# wall clock stepped, for the soak's clock-step fault (bench/soak.py, tests/vision/events/
# test_soak_bench.py). Debian 12's 0.9.10 breaks them (with FAKETIME_DONT_FAKE_MONOTONIC=1,
# time.sleep raises EINVAL; without it, threading.Event.wait never returns). Debian 13's
# (0.9.10+2024-06-05) passes the soak's probe but aborts the app now and then ("Fatal Python
# error: take_gil: PyCOND_WAIT(gil->cond) failed"): its pthread_cond_timedwait wrapper returns
# EAGAIN when another thread is destroying any condition variable (a try-lock on its own table).
# 0.9.12 (Debian sid's) takes that lock blocking, and passes both.
#
# Where the machine's own libfaketime is 0.9.12 or later, nothing is done. Otherwise, on Debian,
# sid's source tarball (upstream's; its binary package needs glibc >= 2.38) is fetched from the
# mirror this machine's own apt sources name, through a private apt configuration
# (.ci/debian-mirror.sh), checked against the SHA-256 of the signed Sources index, built with make
# and installed as /usr/local/lib/faketime/libfaketimeMT.so.1 beside Debian's, which stays for
# tests/apps/test_stepped_clock.py. bench/soak.py takes the first library that passes its probe.
set -euo pipefail
MIN=0.9.12
NEWER_SUITE=sid
TARGET=/usr/local/lib/faketime/libfaketimeMT.so.1

installed=$(dpkg-query -W -f '${Version}' libfaketime 2>/dev/null || true)
if [ -n "$installed" ] && dpkg --compare-versions "$installed" ge "$MIN"; then
  echo "libfaketime: $installed (this suite's)"
  exit 0
fi
built=$(cat "$TARGET.version" 2>/dev/null || true)
if [ -n "$built" ] && dpkg --compare-versions "$built" ge "$MIN"; then
  echo "libfaketime: $TARGET, $built (built before)"
  exit 0
fi

WANTED="libfaketime >= $MIN (this suite offers ${installed:-none})"
. "$(dirname "$0")/debian-mirror.sh"
command -v make >/dev/null && command -v cc >/dev/null \
  || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc make libc6-dev >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
apt_private "$work" \
  "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $NEWER_SUITE main"
# the upstream tarball only: 'URI' NAME SIZE SHA256:HASH, as the signed Sources index gives it
read -r uri name _ hash < <(apt-get "${apt_options[@]}" --print-uris source faketime 2>/dev/null \
  | grep "\.orig\.tar\.")
/usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "${uri//\'/}" "$work/$name" "$hash" >/dev/null
mkdir "$work/src"
tar -xf "$work/$name" -C "$work/src" --strip-components 1
make -s -C "$work/src/src" libfaketimeMT.so.1 >/dev/null
version=$(apt-cache "${apt_options[@]}" showsrc faketime | sed -n 's/^Version: //p' | head -n 1)
install -D -m 0644 "$work/src/src/libfaketimeMT.so.1" "$TARGET"
echo "$version" > "$TARGET.version"
echo "libfaketime: $TARGET $version, built from Debian $NEWER_SUITE's $name (from $mirror)"
