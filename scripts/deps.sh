#!/bin/sh
# deps.sh - makes sure the Debian packages redisync builds and tests with are installed.
#
# Usage: scripts/deps.sh          (or `make deps`)
#
# Checks every package with dpkg-query and prints one line when all are present (fast: no
# apt-get, no network). When some are missing: as root it runs apt-get update + install for
# just those; otherwise it prints the exact command to run and exits 1.
#
# RS_EXTRA_PKGS="pkg1 pkg2" adds packages to the list (e.g. a later tool's needs), so the
# list is extended without editing this file; to add one for good, add it to PKGS below.
#
# Installing redis-server makes its postinst start the system service. In a container without
# an init system that start can fail and make apt-get fail, so while installing we put a
# /usr/sbin/policy-rc.d that forbids service starts (exit 101), unless one already exists.
# redisync's tests start their own redis-server on free ports; they never use 6379.
set -eu

# gcc, make, pkg-config: the build. libhiredis-dev: the library's one dependency.
# libcriterion-dev: the tests. redis-server, redis-tools (redis-cli): the tests' servers.
PKGS="gcc make pkg-config libhiredis-dev libcriterion-dev redis-server redis-tools"
# libssl-dev: the TLS transport (OpenSSL 3). openssl: the TLS tests make their certificates.
PKGS="$PKGS libssl-dev openssl"
# clang, libclang-rt-14-dev (its sanitizer and libFuzzer runtimes), valgrind: mk/checks.mk.
PKGS="$PKGS clang libclang-rt-14-dev valgrind"
# iproute2 (ip netns), iptables, libnetfilter-queue-dev (build/redisync-delayq): the network
# fault suite, make test-network (mk/network.mk).
PKGS="$PKGS iproute2 iptables libnetfilter-queue-dev"
# libuv1-dev: examples/uv_lock.c, the libuv example of the event-loop API (make examples,
# run by make test).
PKGS="$PKGS libuv1-dev"
# Not here: gnuplot-nox, which only the benchmarks' charts use (make bench, bench-cluster,
# bench-peers): bench/deps.sh adds it through RS_EXTRA_PKGS, so make test and .ci/run do
# not need it.
PKGS="$PKGS ${RS_EXTRA_PKGS:-}"

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps: dpkg-query not found; this script knows Debian only. Install by hand:" >&2
    echo "deps:   $PKGS" >&2
    exit 1
fi

missing=""
for p in $PKGS; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing="$missing $p"
done

if [ -z "$missing" ]; then
    # shellcheck disable=SC2086  # print the list on one line
    echo "deps: all present:$(printf ' %s' $PKGS)"
    exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing:$missing" >&2
    echo "deps: as root, run:" >&2
    echo "  $cmd" >&2
    exit 1
fi

echo "deps: installing:$missing"

# Keep package scripts from starting services (see the top of this file).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary, from redisync scripts/deps.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
fi
cleanup() {
    if [ "$made_policy" -eq 1 ]; then rm -f "$policy"; fi
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

apt-get update
# $missing is a list of package names: split it on purpose.
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing

# apt-get succeeded; confirm dpkg agrees, so a half-configured package is not taken as done.
still=""
for p in $missing; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || still="$still $p"
done
if [ -n "$still" ]; then
    echo "deps: still not installed after apt-get:$still" >&2
    exit 1
fi
echo "deps: installed:$missing"
