#!/usr/bin/env bash
# Debian packages that some tests run (each test skips, saying why, without its
# tool): installed when missing, if this is Debian and we may install.
# Usage: scripts/system-packages.sh PACKAGE:COMMAND ...
set -uo pipefail
missing=()
for pair in "$@"; do
    package=${pair%%:*}
    command=${pair#*:}
    # A command on the PATH, or a path pattern (PostgreSQL's initdb is not on it).
    command -v "$command" >/dev/null 2>&1 || compgen -G "$command" >/dev/null || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "note: not installed: ${missing[*]} (needs root and apt-get); the tests that use them are skipped" >&2
    exit 0
fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
        || echo "note: could not install ${missing[*]}; the tests that use them are skipped" >&2
fi
exit 0
