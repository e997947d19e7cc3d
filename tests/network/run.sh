#!/bin/sh
# run.sh - runs the fault driver's network scenarios inside a network namespace of their
# own (make test-network; mk/network.mk).
#
# Usage: sh tests/network/run.sh build/redisync-faults [DRIVER ARGS...]
#
# Creates rsnet-PID (unique per run) with only its loopback up, runs
#   ip netns exec rsnet-PID env RS_NETNS=rsnet-PID DRIVER --net ARGS
# so every redis-server, worker, the delay program and every iptables rule the driver adds
# live in that namespace: nothing touches the host's tables or interfaces. A trap (EXIT,
# INT, TERM, HUP) kills every process left in the namespace and deletes it, also when the
# driver fails or is interrupted; then the script checks that the namespace is gone and no
# process of it is left. Exit status: the driver's (2 when the namespace cannot be made, 1
# when something was left behind). Needs root.
set -u

drv=${1:?usage: run.sh DRIVER [ARGS...]}
shift
ns="rsnet-$$"

cleanup() {
    pids=$(ip netns pids "$ns" 2>/dev/null)
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086  # one pid per word
        kill -9 $pids 2>/dev/null
        sleep 0.2
    fi
    ip netns del "$ns" 2>/dev/null
    return 0
}

if [ "$(id -u)" != 0 ]; then
    echo "test-network: needs root (ip netns, iptables)" >&2
    exit 2
fi
if ! ip netns add "$ns"; then
    echo "test-network: cannot create network namespace $ns" >&2
    exit 2
fi
trap 'cleanup' EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 129' HUP

ip netns exec "$ns" ip link set lo up || exit 2
ip netns exec "$ns" env RS_NETNS="$ns" "$drv" --net "$@"
status=$?

# what the driver left (it removes its own rules; a leftover is a bug to report)
left=$(ip netns exec "$ns" iptables -S 2>/dev/null | grep -c '^-A'; \
       ip netns exec "$ns" iptables -t mangle -S 2>/dev/null | grep -c '^-A')
left_rules=0
for n in $left; do left_rules=$((left_rules + n)); done
left_pids=$(ip netns pids "$ns" 2>/dev/null | wc -l)
cleanup
trap - EXIT INT TERM HUP

bad=0
if [ "$left_rules" -ne 0 ]; then
    echo "test-network: the driver left $left_rules iptables rule(s) in $ns" >&2
    bad=1
fi
if [ "$left_pids" -ne 0 ]; then
    echo "test-network: $left_pids process(es) were left in $ns (killed)" >&2
    bad=1
fi
if ip netns list | grep -q "^$ns\\b"; then
    echo "test-network: namespace $ns could not be deleted" >&2
    bad=1
fi
echo "test-network: namespace $ns deleted; $left_rules rules and $left_pids processes were left before the clean-up"
if [ "$status" -eq 0 ] && [ "$bad" -ne 0 ]; then
    status=1
fi
exit "$status"
