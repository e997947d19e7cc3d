# mk/load.mk - the load test (tests/load/). Included by the Makefile (after its own rules,
# whose variables BUILDDIR, OBJ, GEN, LIB_A, COMPILE_PROG, LINK_PROG, PROG_LIBS and
# SUPPORT_OBJS it uses); every rule of the load test lives here.
#
#   make load      deps, then builds build/redisync-load and runs the full load: 64
#                  processes x 4 threads on 16 names for 60 s on its own redis-server, then
#                  waits for the leases to run out (about 75 s in all). Prints a table
#                  (docs/reliability.md); fails on any error, an unserved process, broken
#                  exclusion, a lost increment, Redis memory not back within 256 KiB, a key
#                  left without a TTL or a connection left open.
#   make load-ci   the same checks sized for CI: 16 processes x 4 threads x 16 names for
#                  12 s (about 25 s in all; .ci/run runs it).
#
# Knobs: LOAD_ARGS (more options for both, e.g. LOAD_ARGS='--seconds 30 --verbose'; the
# options are listed by build/redisync-load --help), LOAD_CI_ARGS.
#
# tests/load/*.c make ONE program (main.c has the main(); the worker processes are forks
# of it, not exec'd). It is a plain program, not a Criterion test.

LOAD_SRCS    := $(sort $(wildcard tests/load/*.c))
LOAD_OBJS    := $(LOAD_SRCS:%.c=$(OBJ)/%.o)
LOAD_BIN     := $(BUILDDIR)/redisync-load
LOAD_ARGS    ?=
LOAD_CI_ARGS ?= --procs 16 --threads 4 --names 16 --seconds 12

.PHONY: load load-ci load-build

load: | deps
	@$(MAKE) --no-print-directory load-build
	$(LOAD_BIN) $(LOAD_ARGS)

load-ci: | deps
	@$(MAKE) --no-print-directory load-build
	$(LOAD_BIN) $(LOAD_CI_ARGS) $(LOAD_ARGS)

load-build: $(LOAD_BIN)

# (a more specific pattern than the Makefile's $(OBJ)/tests/%.o, so make picks this one:
# no Criterion flags)
$(OBJ)/tests/load/%.o: tests/load/%.c | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(LOAD_BIN): $(LOAD_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(LOAD_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

-include $(LOAD_OBJS:.o=.d)
