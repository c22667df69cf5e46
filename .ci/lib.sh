# Sourced by .ci/setup.d/*.sh: shared install helpers.

# apt_need PKG...: install the Debian packages that are missing (one apt run at most).
apt_need() {
    local need=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
    done
    if ((${#need[@]})); then
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
}

# kube_source_tree WORKDIR: unpack Debian bookworm's `kubernetes` source package under
# WORKDIR (through a private apt configuration with deb-src lines for the archive the
# machine already uses, so the system's sources and lists stay untouched), swap the
# vendored reflect2 1.0.1 (faults under Go >= 1.18) for Debian's 1.0.2, print the tree.
kube_source_tree() {
    local work="$1" apt_dir f src
    apt_dir="$work/apt"
    mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial"
    if [[ -f /etc/apt/sources.list ]]; then
        sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list \
            >"$apt_dir/sources.list.d/src.list"
    fi
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -e "$f" ]] || continue
        sed 's/^Types:.*/Types: deb-src/' "$f" >"$apt_dir/sources.list.d/$(basename "$f")"
    done
    local apt_opts=(
        -o "Dir::Etc::SourceList=/dev/null"
        -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "APT::Sandbox::User=root"
    )
    apt-get "${apt_opts[@]}" update -q >/dev/null
    (cd "$work" && apt-get "${apt_opts[@]}" source -q --only-source kubernetes/bookworm >/dev/null)
    src="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)"
    [[ -n "$src" ]] || { echo "apt-get source kubernetes gave no source tree" >&2; return 1; }
    rm -rf "$src/vendor/github.com/modern-go/reflect2"
    cp -a /usr/share/gocode/src/github.com/modern-go/reflect2 "$src/vendor/github.com/modern-go/reflect2"
    echo "$src"
}

# sid_unpack CACHE PKG...: Debian sid's .debs of PKG..., fetched with a private apt
# configuration (sid only, its own lists dir: the system's sources and lists stay untouched),
# unpacked with dpkg-deb -x into CACHE/root (swapped in whole), never installed.
sid_unpack() {
    suite_unpack sid "$@"
}

# suite_unpack SUITE CACHE PKG...: the same for another Debian suite (trixie, ...).
suite_unpack() {
    local suite="$1" cache="$2" work apt_dir deb
    shift 2
    work="$(mktemp -d /var/tmp/sid-unpack.XXXXXX)"
    apt_dir="$work/apt"
    mkdir -p "$apt_dir/sources.list.d" "$apt_dir/lists/partial" "$work/archives/partial"
    cat >"$apt_dir/sources.list.d/sid.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    local apt_opts=(
        -o "Dir::Etc::SourceList=/dev/null"
        -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
        -o "Dir::State::Lists=$apt_dir/lists"
        -o "Dir::Cache::Archives=$work/archives"
        -o "APT::Sandbox::User=root"
    )
    apt-get "${apt_opts[@]}" update -q >/dev/null
    (cd "$work" && apt-get "${apt_opts[@]}" download -q "$@" >/dev/null)
    mkdir -p "$(dirname "$cache")"
    rm -rf "$cache.new"
    mkdir -p "$cache.new"
    for deb in "$work"/*.deb; do
        dpkg-deb -x "$deb" "$cache.new/root"
        cp "$deb" "$cache.new/"
    done
    rm -rf "$cache" "$work"
    mv "$cache.new" "$cache"
}
