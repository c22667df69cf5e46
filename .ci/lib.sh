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
