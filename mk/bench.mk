# mk/bench.mk - the contention benchmark (bench/storm/) and the comparison with the peers
# (bench/peers/). Included by the Makefile, whose variables (BUILDDIR, OBJ, LIB_A,
# COMPILE_PROG, LINK_PROG, PROG_LIBS, SUPPORT_OBJS, GEN) it uses.
#
#   make bench        also runs build/redisync-storm first: 2, 8, 32 and 128 processes on the
#                     mutex, the rwlock, the semaphore and the raw FIFO floor (about 70 s);
#                     table on stdout, chart in build/bench/contention.png
#   make bench-peers  bench/peers/deps.sh (python3-redis, node + npm ci, gnuplot-nox), then
#                     the same storm for redisync's mutex, the raw floor, redis-py's Lock, node
#                     redlock and node redis-semaphore on one redis-server (about 3 min);
#                     chart in build/bench/peers.png
#
#   make bench        also runs build/redisync-holds: the watchdog's cost with 10,000 holds in
#                     one client (renewals per period, CPU of one core; bench/holds/holds.c)
#
#   make bench        also runs build/redisync-memory (or alone: make bench-memory): bytes per
#                     handle and per client (mallinfo2), and heap and RSS over 1,000,000
#                     lock/unlock cycles (bench/memory/memory.c); MEMORY_ARGS='CYCLES THREADS'
#
#   make bench        also runs build/redisync-bench-tls (or alone: make bench-tls): PING and
#                     uncontended lock+unlock over plain and TLS, and a new TLS connection
#                     with a full handshake against a resumed session (bench/tls/tls.c)
#
# Knobs: STORM_ARGS, e.g. STORM_ARGS='--procs "2 8" --seconds 1 --only mutex'; PEERS_ONLY;
# MEMORY_ARGS (default '1000000 4': cycles, threads).
#
# bench/storm/*.c is its own program (bench/*.c all link into build/redisync-bench). The
# read-write lock and the semaphore join the storm when the library defines them: the
# compile asks nm whether build/libredisync.a defines rs_rwlock_wrlock and rs_sem_wait.

STORM_SRCS := $(sort $(wildcard bench/storm/*.c))
STORM_OBJS := $(STORM_SRCS:%.c=$(OBJ)/%.o)
STORM_BIN  := $(BUILDDIR)/redisync-storm
STORM_OUT  := $(BUILDDIR)/bench
STORM_ARGS ?=
# what bench-peers runs: redisync's mutex and the raw floor next to the three peers
PEERS_ONLY ?= mutex,raw,redispy,redlock,redissem

.PHONY: bench-contention bench-peers storm-build bench-holds bench-memory bench-tls

HOLDS_BIN := $(BUILDDIR)/redisync-holds
HOLDS_OBJS := $(OBJ)/bench/holds/holds.o
MEMORY_BIN := $(BUILDDIR)/redisync-memory
MEMORY_OBJS := $(OBJ)/bench/memory/memory.o
MEMORY_ARGS ?= 1000000 4

TLSB_BIN := $(BUILDDIR)/redisync-bench-tls
TLSB_OBJS := $(OBJ)/bench/tls/tls.o
TLSB_ARGS ?= 4000

# Prerequisites of bench: they run before bench's own recipe (build/redisync-bench).
bench: bench-contention bench-holds bench-memory bench-tls

bench-tls: | deps
	@$(MAKE) --no-print-directory $(TLSB_BIN)
	$(TLSB_BIN) $(TLSB_ARGS)

$(OBJ)/bench/tls/%.o: bench/tls/%.c $(LIB_A) | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(TLSB_BIN): $(TLSB_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(TLSB_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

bench-memory: | deps
	@$(MAKE) --no-print-directory $(MEMORY_BIN)
	$(MEMORY_BIN) $(MEMORY_ARGS)

$(OBJ)/bench/memory/%.o: bench/memory/%.c $(LIB_A) | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(MEMORY_BIN): $(MEMORY_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(MEMORY_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

bench-holds: | deps
	@$(MAKE) --no-print-directory $(HOLDS_BIN)
	$(HOLDS_BIN) 10000 10

$(OBJ)/bench/holds/%.o: bench/holds/%.c $(LIB_A) | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) -c $< -o $@

$(HOLDS_BIN): $(HOLDS_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(HOLDS_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

bench-contention: | deps
	@sh bench/deps.sh
	@$(MAKE) --no-print-directory storm-build
	$(STORM_BIN) --out $(STORM_OUT) $(STORM_ARGS)

bench-peers: | deps
	@sh bench/peers/deps.sh
	@$(MAKE) --no-print-directory storm-build
	$(STORM_BIN) --peers $(CURDIR)/bench/peers --only $(PEERS_ONLY) --out $(STORM_OUT) $(STORM_ARGS)

storm-build: $(STORM_BIN)

# (a more specific pattern than the Makefile's $(OBJ)/bench/%.o, so make picks this one)
$(OBJ)/bench/storm/%.o: bench/storm/%.c $(LIB_A) | $(GEN)/scripts.h
	@mkdir -p $(@D)
	$(COMPILE_PROG) $$(nm $(LIB_A) 2>/dev/null | awk '$$2 == "T" && $$3 == "rs_rwlock_wrlock" { print "-DSTORM_HAVE_RWLOCK" } $$2 == "T" && $$3 == "rs_sem_wait" { print "-DSTORM_HAVE_SEM" }') -c $< -o $@

$(STORM_BIN): $(STORM_OBJS) $(SUPPORT_OBJS) $(LIB_A)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $(STORM_OBJS) $(SUPPORT_OBJS) $(PROG_LIBS)

-include $(STORM_OBJS:.o=.d) $(HOLDS_OBJS:.o=.d) $(MEMORY_OBJS:.o=.d) $(TLSB_OBJS:.o=.d)
