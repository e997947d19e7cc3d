#!/bin/sh
# scripts/layers.sh - checks that lib/ points down only: for every lib/*.c, the rs__
# functions (and variables) it references that a file listed above it defines, in the order
# of the layer list at the top of lib/internal.h (bottom up; files named on one line of the
# list are one layer and may call each other).
#
#   sh scripts/layers.sh [OBJDIR]     OBJDIR: the library's objects, relative to the top of
#                                     the tree (default build/obj/lib)
#
# Reads the objects with nm: an undefined rs__ symbol of FILE.o is a reference to another
# file, and the .o that defines it says which. Prints one line per upward reference,
# "FILE -> SYMBOL (DEFINER)" (or "(not in lib/)"), and exits 1 if there is any, or if a
# lib/*.c is missing from the list or has no object. Taking a function's address counts as a reference; a call
# through a pointer that an upper file stored (c->topo_hook, c->wd.start, ...) does not.
# make check-layers builds the objects first and runs this (.ci/run, after make test).
set -eu
cd "$(dirname "$0")/.."
objdir=${1:-build/obj/lib}
NM=${NM:-nm}

# the layer list: " *   a.c, b.c   what they do" lines between "Layers, bottom up" and the
# first line that is not part of it
order=$(awk '
    /Layers, bottom up/ { on = 1; next }
    on && /^ \*   [a-z_]+\.c/ {
        line = $0; sub(/^ \*   /, "", line)
        while (match(line, /^[a-z_]+\.c(, )?/)) {
            f = substr(line, 1, RLENGTH); sub(/, $/, "", f)
            printf "%s %d\n", f, layer
            line = substr(line, RLENGTH + 1)
        }
        layer++
        next
    }
    on && /^ \*    / { next }          # a description continued
    on { exit }
' lib/internal.h)

status=0
objs=
for src in lib/*.c; do
    f=${src#lib/}
    case " $(printf '%s\n' "$order" | cut -d' ' -f1 | tr '\n' ' ') " in
    *" $f "*) ;;
    *) echo "layers: $src is not in lib/internal.h's layer list" >&2; status=1 ;;
    esac
    if [ ! -f "$objdir/${f%.c}.o" ]; then
        echo "layers: no object $objdir/${f%.c}.o (make check-layers builds them)" >&2
        exit 1
    fi
    objs="$objs $objdir/${f%.c}.o"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "$order" > "$tmp/order"
# nm -A: "OBJECT:VALUE TYPE SYMBOL" for a definition, "OBJECT:  U SYMBOL" for a reference
# shellcheck disable=SC2086
"$NM" -A $objs > "$tmp/syms"

awk '
    FILENAME == ARGV[1] { layer[$1] = $2; next }
    {
        i = index($0, ":"); f = substr($0, 1, i - 1); sub(/.*\//, "", f); sub(/\.o$/, ".c", f)
        split(substr($0, i + 1), w, " ")
        if (w[1] == "U" && w[2] ~ /^rs__/)
            ref[++n] = w[2] " " f
        else if (w[2] ~ /^[TDBR]$/ && w[3] ~ /^rs__/)
            def[w[3]] = f
    }
    END {
        for (i = 1; i <= n; i++) {
            split(ref[i], r, " ")
            s = r[1]; f = r[2]
            if (!(f in layer))
                continue                     # reported above
            if (!(s in def))
                printf "%s -> %s (not in lib/: lib/ never names a primitive)\n", f, s
            else if (layer[def[s]] > layer[f])
                printf "%s -> %s (%s)\n", f, s, def[s]
        }
    }' "$tmp/order" "$tmp/syms" | sort > "$tmp/up"

if [ -s "$tmp/up" ]; then
    cat "$tmp/up"
    echo "layers: $(wc -l < "$tmp/up") upward references (lib/internal.h lists the layers)" >&2
    status=1
fi
exit $status
