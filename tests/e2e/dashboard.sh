#!/usr/bin/env bash
# End-to-end test of the proxy's /dashboard in headless Chromium (see dashboard.mjs for what
# it checks). Installs what it needs: Debian's chromium (apt-get, as root or with sudo),
# Node.js if missing, and playwright-core as pinned in package-lock.json (npm ci). Builds the
# tidegate binary, runs the test, and leaves screenshots in target/e2e/.
#
#   tests/e2e/dashboard.sh
#
# Exits 0 with a SKIP message only when Chromium cannot be installed (no apt-get, no root and
# no password-less sudo, or the package is unavailable); every other problem is a failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
e2e="$root/tests/e2e"

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

find_chromium() {
    for candidate in chromium chromium-browser; do
        if command -v "$candidate" >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 || return 1
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 && return 0
    # The package lists may be missing or stale.
    as_root apt-get update -qq >/dev/null 2>&1 &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

if ! chromium="$(find_chromium)"; then
    echo "e2e: installing chromium (apt-get)"
    if ! apt_install chromium || ! chromium="$(find_chromium)"; then
        echo "SKIP: tests/e2e/dashboard.sh: Chromium cannot be installed here" \
            "(needs apt-get and root or password-less sudo); the dashboard was not tested in a browser"
        exit 0
    fi
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "e2e: installing nodejs and npm (apt-get)"
    apt_install nodejs npm || { echo "e2e: cannot install Node.js, which the test needs" >&2; exit 1; }
fi
command -v python3 >/dev/null 2>&1 || apt_install python3 ||
    { echo "e2e: cannot install python3 (the slow origin)" >&2; exit 1; }

(cd "$e2e" && npm ci --no-audit --no-fund --loglevel=error)
cargo build --quiet --locked --manifest-path "$root/Cargo.toml" -p tidegate
echo "e2e: $("$chromium" --version 2>/dev/null), node $(node --version)"
exec node "$e2e/dashboard.mjs" --tidegate "$root/target/debug/tidegate" --chromium "$chromium" \
    --out "$root/target/e2e"
