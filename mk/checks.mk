# mk/checks.mk - thread, memory and fuzz checks. Included by the Makefile (after its own
# rules, whose variables and object rules it reuses); every rule of these checks lives here.
#
#   make check-tsan      deps, then the library and the stress programs (tests/stress/*.c,
#                        plain programs with a main(): Criterion crashes under TSan) rebuilt
#                        under build/tsan/ with clang -fsanitize=thread, and run one after the
#                        other. Fails on any TSan report (exit 66) or wrong result (exit 1).
#                        Then a TLS pass: STRESS_TLS_NAMES again with STRESS_TLS=1 (a TLS
#                        redis-server, every client over rediss://, so the library's OpenSSL
#                        path runs under TSan), scaled to TSAN_TLS_SCALE with leases of
#                        TSAN_TLS_LEASE_MS (a TLS handshake under TSan can take most of a
#                        300 ms lease: the holders' first renewal then comes too late).
#                        Then a Cluster pass: STRESS_CLUSTER_NAMES again with STRESS_CLUSTER=1
#                        (three masters, every client on redis-cluster://, so the event-loop
#                        API's per-master pipelines and sharded wake-ups run under TSan),
#                        scaled to TSAN_CLUSTER_SCALE.
#   make check-valgrind  deps, then the same programs built plainly under build/valgrind/
#                        (-O1 -g) and run under valgrind memcheck, scaled down (STRESS_SCALE):
#                        fails on any memory error or definite/indirect leak (exit 99). Then
#                        the same TLS pass, scaled to VALGRIND_TLS_SCALE with leases of
#                        VALGRIND_TLS_LEASE_MS (TLS under valgrind is slower still); and the
#                        Cluster pass, scaled to VALGRIND_CLUSTER_SCALE.
#   make fuzz            deps, then the libFuzzer targets (tests/fuzz/*.c) built under
#                        build/fuzz/ with clang -fsanitize=fuzzer,address,undefined; each runs
#                        FUZZ_SECONDS seconds from its seeds (tests/fuzz/corpus/NAME/) plus
#                        what earlier runs found (build/fuzz/corpus/NAME/). Fails on any crash,
#                        leak, sanitizer report or timeout; the input is kept under
#                        build/fuzz/artifacts/ (replay: build/fuzz/fuzzers/NAME FILE).
#
# Knobs: CHECK_CC (clang), STRESS_TLS_NAMES, TSAN_TLS_SCALE (25), TSAN_TLS_LEASE_MS (1000),
# STRESS_CLUSTER_NAMES (stress_async), TSAN_CLUSTER_SCALE (100), VALGRIND_CLUSTER_SCALE (25),
# VALGRIND_TLS_SCALE (10),
# VALGRIND_TLS_LEASE_MS (1000), STRESS_TIMEOUT (seconds per stress program, 600), VALGRIND_SCALE
# (percent of the stress iterations under valgrind, 25), VALGRIND_LEASE_MS (500: valgrind
# runs one thread at a time, so the 300 ms of the TSan runs would be tight), FUZZ_SECONDS
# (30 per target), FUZZ_ARGS (more libFuzzer flags, e.g. FUZZ_ARGS=-max_len=256). The stress
# programs' own knobs (STRESS_SCALE, STRESS_LEASE_MS, STRESS_PAUSES, ...)
# are environment variables, described in tests/stress/stress.h; e.g.
#
# Each check runs this Makefile again with its own BUILDDIR and GEN (as check-asan does), so
# the three builds and the normal one never share an object. Stress programs are found by
# wildcard (a new tests/stress/NAME.c is a new program; tests/stress/stress.h is their shared
# header, tests/stress/stress_async.h the event-loop programs') and so are fuzz targets
# (tests/fuzz/NAME.c, seeds in tests/fuzz/corpus/NAME/).
# TSan suppressions, if any are ever needed, go in tests/stress/tsan.supp with their reasons;
# valgrind's in tests/stress/valgrind.supp (passed when it exists), only for what is inside
# OpenSSL itself, each named with its reason.
#
# The TLS pass (STRESS_TLS_NAMES: the mutex, whose handoffs cross the subscriber and the pool,
# and close, which joins every thread that touched OpenSSL) adds about 10 s to check-tsan and
# 30 s to check-valgrind (measured: 8-11 s and 26-35 s on the shared 2-core VM).
# The Cluster pass (STRESS_CLUSTER_NAMES: stress_async, whose event-loop clients keep one
# pipeline per master) adds about 5 s to check-tsan and 8 s to check-valgrind (measured:
# 4.4-6.2 s and 7.0-8.5 s, the Cluster's start included).

CHECK_CC           ?= clang
STRESS_TIMEOUT     ?= 600
VALGRIND_SCALE     ?= 25
VALGRIND_LEASE_MS  ?= 500
FUZZ_SECONDS       ?= 30
FUZZ_ARGS          ?=
STRESS_TLS_NAMES   ?= stress_mutex stress_close
TSAN_TLS_SCALE     ?= 25
TSAN_TLS_LEASE_MS  ?= 1000
VALGRIND_TLS_SCALE ?= 10
VALGRIND_TLS_LEASE_MS ?= 1000
STRESS_CLUSTER_NAMES ?= stress_async
TSAN_CLUSTER_SCALE ?= 100
VALGRIND_CLUSTER_SCALE ?= 25

TSAN_DIR := build/tsan
VG_DIR   := build/valgrind
FUZZ_DIR := build/fuzz

STRESS_SRCS  := $(sort $(wildcard tests/stress/*.c))
STRESS_NAMES := $(notdir $(STRESS_SRCS:.c=))
STRESS_OBJS  := $(STRESS_SRCS:%.c=$(OBJ)/%.o)
FUZZ_SRCS    := $(sort $(wildcard tests/fuzz/*.c))
FUZZ_NAMES   := $(notdir $(FUZZ_SRCS:.c=))
FUZZ_OBJS    := $(FUZZ_SRCS:%.c=$(OBJ)/%.o)

TSAN_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
VG_CFLAGS   := -O1 -g -fno-omit-frame-pointer
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
               -fno-sanitize-recover=undefined

# The second make of each check (SANITIZE=0: these flags replace check-asan's).
CHECK_MAKE = $(MAKE) --no-print-directory SANITIZE=0

TSAN_SUPP := $(wildcard tests/stress/tsan.supp)
TSAN_RUN_OPTIONS := halt_on_error=1 exitcode=66 second_deadlock_stack=1 history_size=4 \
                    $(if $(TSAN_SUPP),suppressions=$(CURDIR)/$(TSAN_SUPP))

VG_SUPP  := $(wildcard tests/stress/valgrind.supp)
VALGRIND := valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
            --errors-for-leak-kinds=definite,indirect --fair-sched=yes --num-callers=30 \
            $(if $(VG_SUPP),--suppressions=$(CURDIR)/$(VG_SUPP))

.PHONY: check-tsan check-valgrind fuzz stress-build fuzz-build

# ---- the second make's goals -------------------------------------------------------------
stress-build: $(STRESS_NAMES:%=$(BUILDDIR)/stress/%)
fuzz-build: $(FUZZ_NAMES:%=$(BUILDDIR)/fuzzers/%)

$(OBJ)/tests/stress/%.o: tests/stress/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(OBJ)/tests/fuzz/%.o: tests/fuzz/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(BUILDDIR)/stress/%: $(OBJ)/tests/stress/%.o $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $< $(SUPPORT_OBJS) $(PROG_LIBS)

$(BUILDDIR)/fuzzers/%: $(OBJ)/tests/fuzz/%.o $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -fsanitize=fuzzer -o $@ $< $(PROG_LIBS)

# (kept: make would otherwise delete them as intermediates of the pattern chain)
.SECONDARY: $(STRESS_OBJS) $(FUZZ_OBJS)
-include $(STRESS_OBJS:.o=.d) $(FUZZ_OBJS:.o=.d)

# ---- check-tsan --------------------------------------------------------------------------
check-tsan: | deps
	@$(CHECK_MAKE) BUILDDIR=$(TSAN_DIR) GEN=$(TSAN_DIR)/gen CC=$(CHECK_CC) \
	    CFLAGS='$(TSAN_CFLAGS)' stress-build
	@status=0; \
	for p in $(STRESS_NAMES); do \
	    echo "== check-tsan: $$p"; \
	    TSAN_OPTIONS='$(strip $(TSAN_RUN_OPTIONS))' \
	        timeout -k 10 $(STRESS_TIMEOUT) $(TSAN_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-tsan: $$p FAILED with exit $$rc (66: TSan report, 1: wrong result, 124: timeout)" >&2; }; \
	done; \
	for p in $(STRESS_TLS_NAMES); do \
	    echo "== check-tsan: $$p over TLS"; \
	    STRESS_TLS=1 STRESS_SCALE=$(TSAN_TLS_SCALE) STRESS_LEASE_MS=$(TSAN_TLS_LEASE_MS) \
	    TSAN_OPTIONS='$(strip $(TSAN_RUN_OPTIONS))' \
	        timeout -k 10 $(STRESS_TIMEOUT) $(TSAN_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-tsan: $$p over TLS FAILED with exit $$rc (66: TSan report, 1: wrong result, 2: no TLS server, 124: timeout)" >&2; }; \
	done; \
	for p in $(STRESS_CLUSTER_NAMES); do \
	    echo "== check-tsan: $$p on a Cluster of 3 masters"; \
	    STRESS_CLUSTER=1 STRESS_SCALE=$(TSAN_CLUSTER_SCALE) \
	    TSAN_OPTIONS='$(strip $(TSAN_RUN_OPTIONS))' \
	        timeout -k 10 $(STRESS_TIMEOUT) $(TSAN_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-tsan: $$p on a Cluster FAILED with exit $$rc (66: TSan report, 1: wrong result, 2: no Cluster, 124: timeout)" >&2; }; \
	done; \
	[ $$status -eq 0 ] && echo "check-tsan: $(words $(STRESS_NAMES)) program(s) clean, $(words $(STRESS_TLS_NAMES)) of them over TLS too, $(words $(STRESS_CLUSTER_NAMES)) on a Cluster"; \
	exit $$status

# ---- check-valgrind ----------------------------------------------------------------------
check-valgrind: | deps
	@$(CHECK_MAKE) BUILDDIR=$(VG_DIR) GEN=$(VG_DIR)/gen CFLAGS='$(VG_CFLAGS)' stress-build
	@status=0; \
	for p in $(STRESS_NAMES); do \
	    echo "== check-valgrind: $$p"; \
	    STRESS_SCALE=$(VALGRIND_SCALE) STRESS_LEASE_MS=$(VALGRIND_LEASE_MS) \
	        timeout -k 10 $(STRESS_TIMEOUT) $(VALGRIND) $(VG_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-valgrind: $$p FAILED with exit $$rc (99: valgrind error or leak, 1: wrong result, 124: timeout)" >&2; }; \
	done; \
	for p in $(STRESS_TLS_NAMES); do \
	    echo "== check-valgrind: $$p over TLS"; \
	    STRESS_TLS=1 STRESS_SCALE=$(VALGRIND_TLS_SCALE) STRESS_LEASE_MS=$(VALGRIND_TLS_LEASE_MS) \
	        timeout -k 10 $(STRESS_TIMEOUT) $(VALGRIND) $(VG_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-valgrind: $$p over TLS FAILED with exit $$rc (99: valgrind error or leak, 1: wrong result, 2: no TLS server, 124: timeout)" >&2; }; \
	done; \
	for p in $(STRESS_CLUSTER_NAMES); do \
	    echo "== check-valgrind: $$p on a Cluster of 3 masters"; \
	    STRESS_CLUSTER=1 STRESS_SCALE=$(VALGRIND_CLUSTER_SCALE) STRESS_LEASE_MS=$(VALGRIND_LEASE_MS) \
	        timeout -k 10 $(STRESS_TIMEOUT) $(VALGRIND) $(VG_DIR)/stress/$$p || { \
	        rc=$$?; status=1; \
	        echo "check-valgrind: $$p on a Cluster FAILED with exit $$rc (99: valgrind error or leak, 1: wrong result, 2: no Cluster, 124: timeout)" >&2; }; \
	done; \
	[ $$status -eq 0 ] && echo "check-valgrind: $(words $(STRESS_NAMES)) program(s) clean, $(words $(STRESS_TLS_NAMES)) of them over TLS too, $(words $(STRESS_CLUSTER_NAMES)) on a Cluster"; \
	exit $$status

# ---- fuzz --------------------------------------------------------------------------------
fuzz: | deps
	@$(CHECK_MAKE) BUILDDIR=$(FUZZ_DIR) GEN=$(FUZZ_DIR)/gen CC=$(CHECK_CC) \
	    CFLAGS='$(FUZZ_CFLAGS)' fuzz-build
	@status=0; \
	for t in $(FUZZ_NAMES); do \
	    mkdir -p $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/artifacts $(FUZZ_DIR)/logs tests/fuzz/corpus/$$t; \
	    echo "== fuzz: $$t for $(FUZZ_SECONDS) s (log: $(FUZZ_DIR)/logs/$$t.log)"; \
	    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	        $(FUZZ_DIR)/fuzzers/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	        -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t- $(FUZZ_ARGS) \
	        $(FUZZ_DIR)/corpus/$$t tests/fuzz/corpus/$$t > $(FUZZ_DIR)/logs/$$t.log 2>&1; \
	    rc=$$?; \
	    if [ $$rc -ne 0 ]; then \
	        status=1; tail -n 80 $(FUZZ_DIR)/logs/$$t.log; \
	        echo "fuzz: $$t FAILED with exit $$rc; input in $(FUZZ_DIR)/artifacts/" >&2; \
	    else \
	        grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|#[0-9]+.*DONE' \
	            $(FUZZ_DIR)/logs/$$t.log | tr '\n' ' '; echo; \
	    fi; \
	done; \
	[ $$status -eq 0 ] && echo "fuzz: $(words $(FUZZ_NAMES)) target(s) ran $(FUZZ_SECONDS) s each without a crash"; \
	exit $$status
