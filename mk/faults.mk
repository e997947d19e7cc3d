# mk/faults.mk - the fault-injection suite (tests/faults/). Included by the Makefile (after
# its own rules, whose variables BUILDDIR, OBJ, GEN, LIB_A, COMPILE_PROG, LINK_PROG, PROG_LIBS
# and SUPPORT_OBJS it uses); every rule of the suite lives here.
#
#   make test-faults   deps, then builds build/redisync-faults and runs every scenario: >= 8
#                      worker processes per primitive on a real redis-server while processes
#                      are killed (-9) and stopped past their lease, the server is restarted
#                      (with appendfsync always, and without persistence), stalled (CLIENT
#                      PAUSE, DEBUG SLEEP) and connections are dropped (CLIENT KILL); the
#                      invariants of docs testing.md (I1-I7; I8-I10 for once, barrier and
#                      cond, and "lost?" under Redlock: every RS_ELOST explained by a
#                      fault, tests/faults/check_lost.c: docs/reliability.md) are checked
#                      on a separate checker redis-server. Prints a table; fails on any
#                      violation or lack of progress. About 4.5 minutes on 2 cores (4 with
#                      the machine to itself).
#
# Knobs: FAULTS_ARGS, e.g. FAULTS_ARGS='--only mutex-lose --seed 7 --verbose' (--list names
# the scenarios; --scale PCT shortens or lengthens the fault phases); FAULTS_SEED (the
# default seed is fixed, so CI repeats one schedule); FAULTS_LIBLOG=1 (workers print the
# library's warnings, 2: everything).
#
#   make faults-repro  builds and runs tests/faults/repro/*.c: deterministic reproductions of
#                      the library bugs the fault runs found (each exits 1 while its bug
#                      shows, 0 once fixed). Not part of test-faults or CI.
#
# tests/faults/*.c make ONE program (only main.c has a main(); the workers are the same
# binary run with --worker). They are plain programs, not Criterion tests.
# tests/faults/repro/NAME.c are small programs of their own (build/faults-repro/NAME).

FAULTS_SRCS := $(sort $(wildcard tests/faults/*.c))
FAULTS_OBJS := $(FAULTS_SRCS:%.c=$(OBJ)/%.o)
FAULTS_BIN  := $(BUILDDIR)/redisync-faults
FAULTS_ARGS ?=

.PHONY: test-faults faults-build faults-repro

test-faults: | deps
	@$(MAKE) --no-print-directory faults-build
	$(FAULTS_BIN) $(FAULTS_ARGS)

faults-build: $(FAULTS_BIN)

# (a more specific pattern than the Makefile's $(OBJ)/tests/%.o, so make picks this one:
# no Criterion flags)
$(OBJ)/tests/faults/%.o: tests/faults/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(FAULTS_BIN): $(FAULTS_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(FAULTS_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

REPRO_SRCS := $(sort $(wildcard tests/faults/repro/*.c))
REPRO_OBJS := $(REPRO_SRCS:%.c=$(OBJ)/%.o)
REPRO_BINS := $(REPRO_SRCS:tests/faults/repro/%.c=$(BUILDDIR)/faults-repro/%)

faults-repro: | deps
	@$(MAKE) --no-print-directory $(REPRO_BINS)
	@status=0; for p in $(REPRO_BINS); do echo "==== $$p"; $$p || status=1; done; exit $$status

$(OBJ)/tests/faults/repro/%.o: tests/faults/repro/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(BUILDDIR)/faults-repro/%: $(OBJ)/tests/faults/repro/%.o $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $< $(SUPPORT_OBJS) $(PROG_LIBS)

-include $(FAULTS_OBJS:.o=.d) $(REPRO_OBJS:.o=.d)
