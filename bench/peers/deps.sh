#!/bin/sh
# bench/peers/deps.sh - installs what `make bench-peers` runs the peers with. Not a test
# prerequisite: scripts/deps.sh does not know these.
#
#   Debian: python3-redis (redis-py's Lock, run with /usr/bin/python3), gnuplot-nox (the
#           chart), and nodejs + npm when no `node` is on PATH
#   npm:    `npm ci` in bench/peers (ioredis, redlock, redis-semaphore at the versions of
#           package-lock.json) into bench/peers/node_modules, when that is missing or older
#           than the lock file
set -eu
here=$(cd "$(dirname "$0")" && pwd)

pkgs="python3-redis gnuplot-nox"
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
RS_EXTRA_PKGS="${RS_EXTRA_PKGS:-} $pkgs" sh "$here/../../scripts/deps.sh"

if [ ! -f "$here/node_modules/.package-lock.json" ] ||
   [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
    echo "bench/peers/deps.sh: npm ci in $here"
    (cd "$here" && npm ci --no-audit --no-fund)
fi
