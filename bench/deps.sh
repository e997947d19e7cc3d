#!/bin/sh
# bench/deps.sh - what `make bench` needs beyond scripts/deps.sh: gnuplot, for the chart.
#
# gnuplot-nox is a benchmark need, not a test prerequisite, so it is not in scripts/deps.sh's
# list: this script adds it through RS_EXTRA_PKGS. As root a missing gnuplot is installed
# with apt-get; otherwise the bench runs anyway and skips the chart (it says so).
set -eu
if command -v gnuplot >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "bench/deps.sh: gnuplot is not installed; the chart will be skipped" >&2
    echo "bench/deps.sh: as root: apt-get install -y --no-install-recommends gnuplot-nox" >&2
    exit 0
fi
RS_EXTRA_PKGS="${RS_EXTRA_PKGS:-} gnuplot-nox" sh "$(dirname "$0")/../scripts/deps.sh"
