#!/bin/sh
# redis-syms.sh - builds Debian's redis-server, same source and flags, with its symbols.
#
# Usage: sh bench/instr/redis-syms.sh [OUTDIR]     (default build/redis-syms)
#        prints the path of the binary on its last line
#
# Debian's /usr/bin/redis-server is stripped: its .dynsym names only the exported functions
# (evalGenericCommand, scriptCall, hsetCommand, lua_pcall, ...), not the static and hidden ones
# (luaV_execute, luaH_*, str_format, luaRedisGenericCommand, redisProtocolToLuaType_*), and
# no redis-server-dbgsym is in the archive the machine reaches. `instr.py --breakdown` needs
# those names to attribute instructions. This script fetches the source package of the
# installed redis-server version with apt-get source (a private sources list in OUTDIR: the
# system's apt configuration is not touched), applies Debian's patches (dpkg-source -x) and
# builds src/redis-server as debian/rules does (dpkg-buildflags with hardening=+all and the
# package's appends, USE_SYSTEM_JEMALLOC, USE_SYSTEMD, BUILD_TLS), unstripped. instr.py prints
# the figures of both binaries side by side, so a difference from Debian's binary shows.
# Needs root for the build dependencies (scripts/deps.sh installs them); about 3 minutes on
# 2 cores; an existing binary of the same version is reused.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/build/redis-syms}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

RS_EXTRA_PKGS="dpkg-dev libjemalloc-dev liblzf-dev libsystemd-dev" sh "$ROOT/scripts/deps.sh" >&2

VER=$(dpkg-query -W -f='${Version}' redis-server)   # e.g. 5:7.0.15-1~deb12u10
UP=${VER#*:}; UP=${UP%-*}                            # 7.0.15
SRC=$OUT/redis-$UP
BIN=$SRC/src/redis-server
if [ -x "$BIN" ] && [ "$(cat "$OUT/version" 2>/dev/null)" = "$VER" ]; then
    echo "$BIN"
    exit 0
fi

# deb-src entries for the system's own Debian archives (deb822 .sources or one-line lists)
mkdir -p "$OUT/apt/lists/partial" "$OUT/dl"
: > "$OUT/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -n 's/^deb \(.*debian.*\)$/deb-src \1/p' "$f" >> "$OUT/apt/sources.list"
done
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS=""; FS="\n" }
         { uris=""; suites=""; comps="";
           for (i = 1; i <= NF; i++) {
               if ($i ~ /^URIs:/) { uris=$i; sub(/^URIs:[ \t]*/, "", uris) }
               if ($i ~ /^Suites:/) { suites=$i; sub(/^Suites:[ \t]*/, "", suites) }
               if ($i ~ /^Components:/) { comps=$i; sub(/^Components:[ \t]*/, "", comps) } }
           if (uris !~ /debian/) next
           n = split(uris, u, " "); m = split(suites, s, " ");
           for (a = 1; a <= n; a++) for (b = 1; b <= m; b++)
               print "deb-src " u[a] " " s[b] " " comps }' "$f" \
        >> "$OUT/apt/sources.list"
done
APTO="-o Dir::Etc::SourceList=$OUT/apt/sources.list -o Dir::Etc::SourceParts=/dev/null"
APTO="$APTO -o Dir::State::Lists=$OUT/apt/lists"
# shellcheck disable=SC2086
apt-get $APTO update >&2
# shellcheck disable=SC2086
(cd "$OUT/dl" && apt-get $APTO source --download-only "redis=$VER" >&2)
rm -rf "$SRC"
(cd "$OUT" && dpkg-source -x "$OUT/dl/redis_${VER#*:}.dsc" "$SRC" >&2)

# debian/rules: hardening=+all, the package's CFLAGS/LDFLAGS appends, dh_auto_build's flags
eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all DEB_CFLAGS_MAINT_APPEND=-I/usr/include/liblzf \
    DEB_LDFLAGS_MAINT_APPEND='-Wl,-no-as-needed -ldl -latomic -llzf' \
    dpkg-buildflags --export=sh)"
(cd "$SRC" && BUILD_TLS=yes make -j2 V=1 USE_SYSTEM_JEMALLOC=yes USE_SYSTEMD=yes \
    USE_JEMALLOC=yes BUILD_TLS=yes -C src redis-server >&2)
echo "$VER" > "$OUT/version"
echo "$BIN"
