#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium, installing Debian's `chromium` package first when none is on
# PATH and this runs as root with apt-get (a CI machine). The HTML report test (tests/workflow/test_report_browser.py)
# calls it under CI=true. Exit 1, with the reason on stderr, where no browser is found or can be installed.
set -euo pipefail

find_browser() {
    local name
    for name in chromium chromium-browser google-chrome; do
        if command -v "$name" >/dev/null 2>&1; then
            command -v "$name"
            return 0
        fi
    done
    return 1
}

if find_browser; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "no chromium on PATH, and not root with apt-get to install it: apt-get install -y chromium" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends chromium >&2; }
find_browser || { echo "apt-get installed chromium, but it is not on PATH" >&2; exit 1; }
