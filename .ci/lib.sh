# Sourced by .ci/setup.d/*.sh: shared install helpers.

# apt_need PKG...: install the Debian packages that are missing (one apt run at most). Steps
# run two at a time (.ci/setup.py): one apt run at a time, the next waiting for the lock.
apt_need() {
    local need=() pkg
    (
        flock 9
        for pkg in "$@"; do
            dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep "ok installed" >/dev/null || need+=("$pkg")
        done
        if ((${#need[@]})); then
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
        fi
    ) 9>/run/lock/kube-scale-exporter-apt.lock
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

# go_pin MODDIR MODULE: the version .ci/go/MODDIR/go.mod requires of MODULE (the one place
# each version is pinned; testbed/builds.py reads the same).
go_pin() {
    local v
    v="$(sed -nE "s#^(require)?[[:space:]]*$2 (v[^[:space:]]+).*#\2#p" ".ci/go/$1/go.mod")"
    [[ -n "$v" ]] || { echo "no $2 version in .ci/go/$1/go.mod" >&2; return 1; }
    echo "$v"
}

# go_build MODDIR DEST TAGS LDFLAGS PACKAGE...: each package's command, built in .ci/go/MODDIR
# (CGO off, the go.mod's pins only), installed into the directory DEST, which is replaced whole
# so that no test ever runs a binary while it is being written.
go_build() {
    local mod=$1 dest=$2 tags=$3 ldflags=$4 work start=$SECONDS
    shift 4
    command -v go >/dev/null || { echo "go_build: no go on PATH" >&2; return 1; }
    work="$(mktemp -d /var/tmp/go-build.XXXXXX)"
    (
        cd ".ci/go/$mod"
        export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
        go build -trimpath -tags "$tags" -ldflags "-s -w $ldflags" -o "$work/" "$@"
    ) || { rm -rf "$work"; return 1; }
    mkdir -p "$(dirname "$dest")"
    rm -rf "$dest.new"
    mv "$work" "$dest.new"
    chmod 0755 "$dest.new"
    rm -rf "$dest" && mv "$dest.new" "$dest"
    echo "$mod: built in $((SECONDS - start)) s into $dest"
}

# third_party_version NAME: the commit .ci/third-party.sha256 pins NAME's tarball at.
third_party_version() {
    local v
    v="$(sed -nE "s#^[0-9a-f]{64}  $1-([0-9a-f.]+)\.tar\.gz\$#\1#p" .ci/third-party.sha256)"
    [[ -n "$v" ]] || { echo "no $1 tarball in .ci/third-party.sha256" >&2; return 1; }
    echo "$v"
}

# third_party_dir: where the third-party tarballs are: $KSE_THIRD_PARTY, else ../shared/third_party
# beside the checkout, else /work/shared/third_party (a clone made elsewhere on this machine).
third_party_dir() {
    local d
    for d in "${KSE_THIRD_PARTY:-}" "$(realpath -m ../shared/third_party)" /work/shared/third_party; do
        [[ -n "$d" && -d "$d" ]] && { echo "$d"; return 0; }
    done
    echo "third_party_dir: no ../shared/third_party beside $(pwd); set KSE_THIRD_PARTY" >&2
    return 1
}

# third_party_src NAME WORK: NAME's tarball from third_party_dir,
# its sha256 checked against .ci/third-party.sha256 before anything reads it, unpacked into
# WORK/NAME-VERSION whatever its own top directory is called (cluster-autoscaler's is
# autoscaler-cluster-autoscaler-1.36.1); prints that directory.
third_party_src() {
    local name=$1 work=$2 dir version file
    dir="$(third_party_dir)" || return 1
    version="$(third_party_version "$name")" || return 1
    file="$name-$version.tar.gz"
    [[ -f "$dir/$file" ]] || { echo "third_party_src: no $dir/$file" >&2; return 1; }
    grep -E "^[0-9a-f]{64}  $file\$" .ci/third-party.sha256 | (cd "$dir" && sha256sum --quiet --strict -c -) ||
        { echo "third_party_src: $dir/$file does not match its sha256" >&2; return 1; }
    mkdir -p "$work/$name-$version"
    tar -xzf "$dir/$file" -C "$work/$name-$version" --strip-components=1
    echo "$work/$name-$version"
}
