#!/bin/sh
# run-asan.sh - runs the ASan+UBSan build of the suite for `make check-asan`.
#
# Usage: scripts/run-asan.sh REPORT_DIR TEST_BINARY [CRITERION ARGS...]
#
# Sanitizer reports go to files in REPORT_DIR, because Criterion runs each test in a forked
# worker and counts a test that leaked as passed (LeakSanitizer reports at the worker's exit,
# after the result is in). A run fails on a failed test or on any report, printed after
# Criterion's summary.
#
# One retry, and only of the whole suite: gcc 12's libasan has no fork() interceptor, so a
# test child forked while another thread of the test held one of ASan's allocator locks can
# hang on its first malloc (a known sanitizer limitation, not a bug of the code under test;
# seen once under heavy machine load). A failing first run is therefore printed in full and
# the WHOLE suite is run again: the target passes only if that second run is entirely clean.
# A real memory error, leak or failure shows up in both runs and fails the target.
#
# Criterion 2.4.1's own runner process (not a test, not our code) leaks a few hundred bytes
# allocated inside libcriterion.so once the suite has enough tests. A report made only of
# leaks whose allocation site (the frame right above the allocator) is in libcriterion.so
# is therefore shown but not counted; any other report, or any leak allocated elsewhere in
# that report, fails the run.
set -u
reports=$1
shift

# 0 if report $1 holds only leaks allocated inside libcriterion.so
criterion_only() {
    awk '
        /ERROR: / && !/LeakSanitizer: detected memory leaks/ { other = 1 }
        /^(Direct|Indirect) leak of/ { blocks++; want = 1; next }
        want && /^ *#1 / { if ($0 ~ /libcriterion\.so/) ok++; want = 0 }
        END { exit !(other == 0 && blocks > 0 && ok == blocks) }
    ' "$1"
}

run() {
    rm -rf "$reports" && mkdir -p "$reports"
    status=0
    out="$reports.out"
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:log_path=$reports/asan" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
        "$@" > "$out" 2>&1 || status=$?
    cat "$out"
    found="" excused=0
    for r in $(ls "$reports"); do
        if criterion_only "$reports/$r"; then
            echo "check-asan: $r: leaks allocated inside libcriterion.so only (Criterion's runner), not counted:"
            cat "$reports/$r"
            excused=1
        else
            found="$found $r"
        fi
    done
    # LeakSanitizer makes the runner exit non-zero for its own leak: then the run's verdict
    # is Criterion's summary line
    if [ "$status" -ne 0 ] && [ "$excused" -eq 1 ] && [ -z "$found" ] &&
        grep -q 'Synthesis: Tested: [0-9]* | Passing: [0-9]* | Failing: 0 | Crashing: 0' "$out"; then
        status=0
    fi
    if [ -n "$found" ]; then
        for r in $found; do echo "==== $reports/$r"; cat "$reports/$r"; done
        echo "check-asan: sanitizer reports from $(echo $found | wc -w) process(es), above" >&2
        [ "$status" -ne 0 ] || status=1
    fi
    return "$status"
}

if run "$@"; then
    exit 0
fi
echo "check-asan: the first run FAILED (above); running the whole suite once more" >&2
if run "$@"; then
    echo "check-asan: the second run is clean: the first failure did not reproduce" >&2
    exit 0
fi
echo "check-asan: FAILED twice" >&2
exit 1
