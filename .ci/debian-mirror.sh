# Sourced by the .ci scripts that take a package from a newer Debian suite than this machine's
# (qemu-user.sh, libfaketime.sh): sets $mirror to the Debian mirror this machine's own apt sources
# name for its suite (deb822 *.sources first, then one-line lists), so that no mirror is named in
# the repository, and defines apt_private, which sets $apt_options to a private apt configuration
# in a folder (the machine's sources, lists and pinning stay as they are). Exits where it cannot.
. /etc/os-release
if [ "${ID:-}" != debian ]; then
  echo "$0: this $PRETTY_NAME is not Debian: install ${WANTED:-the package} by hand" >&2
  exit 1
fi
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
[ -n "$mirror" ] || { echo "$0: no apt source for $VERSION_CODENAME" >&2; exit 1; }

# apt_private FOLDER LINE: $apt_options for a private configuration in FOLDER whose only source is
# LINE (e.g. "deb-src [signed-by=...] $mirror trixie main"), with its lists updated.
apt_private() {
  mkdir -p "$1/lists/partial" "$1/cache/archives/partial"
  echo "$2" > "$1/sources.list"
  apt_options=(-o "Dir::Etc::SourceList=$1/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$1/lists" -o "Dir::Cache=$1/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" update -qq
}
