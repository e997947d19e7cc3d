# mk/network.mk - the fault suite on a faulty network (tests/network/, tests/faults/net.c).
# Included by the Makefile after mk/faults.mk, whose FAULTS_BIN and faults-build it uses.
#
#   make test-network     deps, then builds build/redisync-faults and build/redisync-delayq
#                         and runs tests/network/run.sh: a network namespace of its own
#                         (rsnet-PID, only lo up), the fault driver inside it with --net, and
#                         every namespace, iptables rule and process removed afterwards, also
#                         on failure. Scenarios (mutex, 8 processes, lease 3 s): one holder
#                         black-holed for 1.5-2.5 leases, then healed (net-blackhole); the same
#                         with replies only dropped (net-oneway); 100 +- 25 ms each way and 5 %
#                         loss on every data link (net-slow-lossy: 0 false loss reports
#                         required); the data port dropped for everyone for 1-3 s every 4-6 s
#                         (net-flap); on three Redlock masters, one worker cut from one master
#                         for 1.5-2.5 leases (net-rl-part); the delay and loss of
#                         net-slow-lossy on every master (net-rl-slowloss: 0 false loss
#                         reports and no starved waiter required: under Redlock a lock
#                         call past the 15 s bound fails the run only if later callers
#                         overtook it or its name went 7 s without a grant, check_waits);
#                         split brain (net_split.c): a Sentinel master (2 replicas, 3
#                         sentinels) or a Cluster shard's master (3 masters + 3 replicas, or
#                         + 6: two per shard) with workers w0-w2 cut from everything else for
#                         8-10 s, longer than the failover, then healed until the old master
#                         is a replica (net-sentinel-split, net-cluster-split,
#                         net-cluster-split-2r; min_replicas 1 and min-replicas-to-write 1;
#                         Sentinel and -2r must give the cut master's name to the far side
#                         during the split; opt-in, expected to fail: the -nowait variants,
#                         and net-cluster-split-2r-along, a replica cut along with the master).
#                         Invariants I1-I7 as in test-faults, plus the network figures (loss
#                         detection, takeover, on_lost before the takeover, recovery; splits:
#                         promotion and demotion times). About 8 minutes on 2 cores (429 s
#                         for the ten default scenarios before net-rl-slowloss joined them,
#                         about 50 s more with it, 2026-11-26). Needs root (ip netns,
#                         iptables); docs/reliability.md, "Network faults: make test-network".
#   make test-network-ci  the same at --scale 40 (the CI form, about 5 minutes: 242 s before
#                         net-rl-slowloss, which adds 35-46 s; the three split scenarios
#                         about 80 s of it, one split each: -2r 26 s)
#
# Knobs: NETWORK_ARGS (passed to the driver, e.g. NETWORK_ARGS='--only net-oneway --verbose';
# --list names the scenarios), FAULTS_SEED and FAULTS_LIBLOG as for test-faults;
# RS_SPLIT_LOGS=DIR (environment) keeps the split scenarios' data nodes' redis.log files in
# DIR (elections, votes, demotions).
#
# build/redisync-delayq (tests/network/delayq.c) is the delay line: it takes packets from
# NFQUEUE and accepts each one after delay +- jitter (this kernel has no netem). It links
# libnetfilter_queue (Debian libnetfilter-queue-dev, in scripts/deps.sh).

DELAYQ_BIN  := $(BUILDDIR)/redisync-delayq
DELAYQ_OBJ  := $(OBJ)/tests/network/delayq.o
NFQ_CFLAGS  := $(shell $(PKG_CONFIG) --cflags libnetfilter_queue 2>/dev/null)
NFQ_LIBS    := $(shell $(PKG_CONFIG) --libs libnetfilter_queue 2>/dev/null || echo -lnetfilter_queue -lnfnetlink)
NETWORK_ARGS ?=

.PHONY: test-network test-network-ci network-build

test-network: | deps
	@$(MAKE) --no-print-directory network-build
	sh tests/network/run.sh $(FAULTS_BIN) $(NETWORK_ARGS)

test-network-ci: | deps
	@$(MAKE) --no-print-directory network-build
	sh tests/network/run.sh $(FAULTS_BIN) --scale 40 $(NETWORK_ARGS)

network-build: $(FAULTS_BIN) $(DELAYQ_BIN)

$(DELAYQ_OBJ): tests/network/delayq.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -D_GNU_SOURCE $(WARNINGS) $(NFQ_CFLAGS) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(DELAYQ_BIN): $(DELAYQ_OBJ)
	@mkdir -p $(@D)
	$(LINK_PROG) -o $@ $< $(NFQ_LIBS)

-include $(DELAYQ_OBJ:.o=.d)
