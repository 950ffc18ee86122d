#!/bin/sh
# Pretend hosts for kolorun: network namespaces on one bridge.
#
#   netns-hosts.sh up PREFIX COUNT [NET]   creates namespaces PREFIX1..PREFIXCOUNT
#   netns-hosts.sh down PREFIX             removes them and the bridge
#
# NET is the third octet of the private test subnet 10.77.NET.0/24 (default 0).
# The bridge PREFIXbr in this namespace gets 10.77.NET.1; namespace i gets
# 10.77.NET.(i+1) on its eth0 and a default route via the bridge. `up` prints
# one line per namespace: "NAME ADDRESS". Needs root (CAP_NET_ADMIN).
# Start programs in them with scripts/netns-rsh.sh (kolorun --rsh).
set -eu

cmd=${1:-}
prefix=${2:-}
if [ -z "$cmd" ] || [ -z "$prefix" ]; then
  echo "usage: $0 up PREFIX COUNT [NET] | down PREFIX" >&2
  exit 2
fi
bridge="${prefix}br"

case "$cmd" in
  up)
    count=${3:?usage: $0 up PREFIX COUNT [NET]}
    net=${4:-0}
    ip link add "$bridge" type bridge
    ip addr add "10.77.$net.1/24" dev "$bridge"
    ip link set "$bridge" up
    i=1
    while [ "$i" -le "$count" ]; do
      ns="$prefix$i"
      ip netns add "$ns"
      ip link add "${prefix}v$i" type veth peer name "${prefix}p$i"
      ip link set "${prefix}p$i" netns "$ns"
      ip link set "${prefix}v$i" master "$bridge" up
      ip -n "$ns" link set "${prefix}p$i" name eth0
      ip -n "$ns" addr add "10.77.$net.$((i + 1))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      ip -n "$ns" route add default via "10.77.$net.1"
      echo "$ns 10.77.$net.$((i + 1))"
      i=$((i + 1))
    done
    ;;
  down)
    for ns in $(ip netns list | awk '{print $1}'); do
      case "$ns" in
        "$prefix"[0-9]*) ip netns del "$ns" ;;  # takes its veth pair along
      esac
    done
    ip link del "$bridge" 2>/dev/null || true
    ;;
  *)
    echo "usage: $0 up PREFIX COUNT [NET] | down PREFIX" >&2
    exit 2
    ;;
esac
