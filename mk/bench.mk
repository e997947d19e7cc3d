# mk/bench.mk - the contention benchmark (bench/storm/) and the comparison with the peers
# (bench/peers/). Included by the Makefile, whose variables (BUILDDIR, OBJ, LIB_A,
# COMPILE_PROG, LINK_PROG, PROG_LIBS, SUPPORT_OBJS, GEN) it uses.
#
#   make bench        also runs build/redisync-storm first: 2, 8, 32 and 128 processes on the
#                     mutex, the rmutex, the rwlock (writers; readers and writers), the
#                     semaphore and the raw FIFO floor (about 100 s); tables on stdout (the
#                     last: Redis calls inside scripts and server time per acquisition, each
#                     primitive next to the floor's), chart in build/bench/contention.png
#   make bench-peers  bench/peers/deps.sh (python3-redis, node + npm ci, gnuplot-nox), then
#                     the same storm for redisync's mutex, the raw floor, redis-py's Lock, node
#                     redlock and node redis-semaphore on one redis-server (about 3 min);
#                     chart in build/bench/peers.png
#
#   make bench        also runs build/redisync-holds: the watchdog's cost with 10,000 holds in
#                     one client (renewals per period, CPU of one core; bench/holds/holds.c)
#
#   make bench        also runs build/redisync-redlock (or alone: make bench-redlock): lock
#                     waits and handoff under redlock:// (3 masters) against one server, 2, 8
#                     and 32 processes (bench/redlock/redlock.c); REDLOCK_ARGS='SECS P...'
#   make bench        also runs build/redisync-memory (or alone: make bench-memory): bytes per
#                     handle and per client (mallinfo2), and heap and RSS over 1,000,000
#                     lock/unlock cycles (bench/memory/memory.c); MEMORY_ARGS='CYCLES THREADS'
#
#   make bench        also runs build/redisync-bench-cond (or alone: make bench-cond): the
#                     condition variable's signal -> woken waiter holding the mutex, next to
#                     the mutex's handoff and one round trip in the same run, with issue 14's
#                     target as PASS/MISS (bench/cond/cond.c); COND_ARGS='ROUNDS'
#
#   make bench        also runs build/redisync-bench-fanout (or alone: make bench-fanout):
#                     the condition's broadcast to 1, 10 and 100 waiters (calls in the script,
#                     messages, commands per waiter) and barrier generations of 2, 8 and 32
#                     parties (script calls, messages, time), with issue 14's targets as
#                     PASS/MISS (bench/fanout/fanout.c); FANOUT_ARGS='ROUNDS GENS'
#
#   make bench        also runs build/redisync-bench-tls (or alone: make bench-tls): PING and
#                     uncontended lock+unlock over plain and TLS, a new TLS connection with a
#                     full handshake against a resumed session, a bare OpenSSL client sending
#                     the lock's two EVALSHAs, and contended handoff plain and TLS, with issue
#                     12's two targets as PASS/MISS (bench/tls/tls.c)
#
#   make bench        also runs build/redisync-bench-cluster (or alone: make bench-cluster):
#                     3 masters, 3 masters + 3 replicas, 6 masters; 8 processes on one mutex, then
#                     8 x 4 threads on 16 names; per acquisition the cluster bus messages
#                     (classic and sharded), client commands, EVALSHA / PUBLISH / SPUBLISH
#                     calls and server CPU over all nodes (bench/cluster/cluster.c, about
#                     80 s); the one-name storm twice, classic PUBLISH wake-ups (before) and
#                     sharded (after), and the chart of both against the number of nodes in
#                     build/bench/cluster.png (gnuplot-nox: bench/deps.sh);
#                     CLUSTER_ARGS='SECONDS PROCS [OUT]' (default '3 8')
#
#   make bench        also runs build/redisync-bench-async (or alone: make bench-async): one
#                     loop thread's rs_mutex_acquire_async + rs_hold_release_async on 256 names
#                     against blocking lock+unlock on one thread, same run (issue 16's 3x
#                     target as PASS/MISS), heap bytes per pending request (about 480 since
#                     the lease moved into the request's block, 660-670 before; target 512:
#                     PASS), the
#                     thread count while 10,000 wait, and the watchdog's round with 10,000
#                     queue entries: rounds per period, write batches per round, renewals per
#                     round, its duration against one PING (one batch a round: PASS)
#                     (bench/async/async.c); ASYNC_ARGS='PAIRS PENDING'
#   make bench-async-cluster  the same rows against a Cluster of three masters over
#                     redis-cluster:// (redisync-bench-async --cluster; not part of make bench);
#                     ASYNC_CLUSTER_ARGS='PAIRS PENDING'
#
#   make bench-instr  (not part of make bench) bench/instr/instr.py: one redis-server under
#                     valgrind --tool=callgrind; the server's instructions per contended
#                     acquisition (8 owners handing over in turn), per uncontended acq + rel
#                     pair and per renew, for the mutex, the rwlock (writers) and the
#                     semaphore (1 permit), and the raw FIFO floor's, with the Redis calls
#                     inside scripts per contended acquisition and the ratios to the floor and
#                     the mutex (about 60 s; independent of the machine's load);
#                     INSTR_ARGS='--n1 400 --n2 1600 --only mutex,rwlock,sem --script mutex=FILE';
#                     INSTR_ARGS='--breakdown mutex --redis-server PATH': where the instructions
#                     of one contended acquisition and of the floor's go (the EVALSHA's parts,
#                     each command, Lua VM / strings / tables / allocator ...; bench/instr/
#                     breakdown.py); PATH from `sh bench/instr/redis-syms.sh`, which builds
#                     Debian's redis-server from its source package with symbols (Debian's
#                     binary is stripped: its Lua internals count as "no symbol")
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

.PHONY: bench-instr bench-contention bench-peers storm-build bench-holds bench-memory \
        bench-redlock bench-tls bench-cluster bench-cond bench-fanout bench-async \
        bench-async-cluster

# The one-program benchmarks: bench/DIR/DIR.c builds BIN, which make bench-DIR runs with
# $(ARGSVAR) (default DEFAULT). $(call small_bench,DIR,BIN,ARGSVAR,DEFAULT)
define small_bench
$(3) ?= $(4)
bench-$(1): | deps
	@$$(MAKE) --no-print-directory $(2)
	$(2) $$($(3))
$$(OBJ)/bench/$(1)/%.o: bench/$(1)/%.c $$(LIB_A) | $$(GEN)/scripts.h
	@mkdir -p $$(@D)
	$$(COMPILE_PROG) -c $$< -o $$@
$(2): $$(OBJ)/bench/$(1)/$(1).o $$(SUPPORT_OBJS) $$(LIB_A)
	@mkdir -p $$(@D)
	$$(LINK_PROG) -o $$@ $$(OBJ)/bench/$(1)/$(1).o $$(SUPPORT_OBJS) $$(PROG_LIBS)
endef
$(eval $(call small_bench,holds,$(BUILDDIR)/redisync-holds,HOLDS_ARGS,10000 10))
$(eval $(call small_bench,memory,$(BUILDDIR)/redisync-memory,MEMORY_ARGS,1000000 4))
$(eval $(call small_bench,redlock,$(BUILDDIR)/redisync-redlock,REDLOCK_ARGS,4 2 8 32))
$(eval $(call small_bench,cluster,$(BUILDDIR)/redisync-bench-cluster,CLUSTER_ARGS,3 8))
$(eval $(call small_bench,tls,$(BUILDDIR)/redisync-bench-tls,TLSB_ARGS,4000))
$(eval $(call small_bench,cond,$(BUILDDIR)/redisync-bench-cond,COND_ARGS,300))
$(eval $(call small_bench,fanout,$(BUILDDIR)/redisync-bench-fanout,FANOUT_ARGS,5 50))
$(eval $(call small_bench,async,$(BUILDDIR)/redisync-bench-async,ASYNC_ARGS,20000 10000))
ASYNC_CLUSTER_ARGS ?= 20000 10000
bench-async-cluster: | deps
	@$(MAKE) --no-print-directory $(BUILDDIR)/redisync-bench-async
	$(BUILDDIR)/redisync-bench-async --cluster $(ASYNC_CLUSTER_ARGS)
# bench-cluster draws build/bench/cluster.png with gnuplot when it is installed
bench-cluster: | bench-chart-deps
.PHONY: bench-chart-deps
bench-chart-deps:
	@sh bench/deps.sh

# Prerequisites of bench: they run before bench's own recipe (build/redisync-bench).
bench: bench-contention bench-holds bench-memory bench-redlock bench-tls bench-cluster bench-cond \
       bench-fanout bench-async

INSTR_ARGS ?=
# python3 runs the harness (a benchmark need only: RS_EXTRA_PKGS, not scripts/deps.sh's list);
# valgrind is in scripts/deps.sh's list already
bench-instr:
	@RS_EXTRA_PKGS="python3" sh scripts/deps.sh
	python3 bench/instr/instr.py $(INSTR_ARGS)

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

-include $(STORM_OBJS:.o=.d) $(HOLDS_OBJS:.o=.d) $(MEMORY_OBJS:.o=.d) $(TLSB_OBJS:.o=.d) \
         $(wildcard $(OBJ)/bench/cond/*.d) $(wildcard $(OBJ)/bench/fanout/*.d) \
         $(wildcard $(OBJ)/bench/async/*.d)
