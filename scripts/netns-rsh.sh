#!/bin/sh
# A remote shell into a network namespace, for kolorun --rsh:
#
#   kolorun --rsh scripts/netns-rsh.sh -H HOST:N,... PROGRAM
#
# kolorun runs it as `netns-rsh.sh HOST COMMAND`. HOST is a namespace name
# or an IPv4 address that one namespace has; COMMAND runs there under sh, with
# this script's standard input (where kolorun sends the worker's environment).
set -eu
host=${1:?usage: $0 HOST COMMAND}
command=${2:?usage: $0 HOST COMMAND}

ns=""
if ip netns list | awk '{print $1}' | grep -qx "$host"; then
  ns=$host
else
  for candidate in $(ip netns list | awk '{print $1}'); do
    if ip -n "$candidate" -4 -o addr show | grep -q " inet $host/"; then
      ns=$candidate
      break
    fi
  done
fi
if [ -z "$ns" ]; then
  echo "netns-rsh: no network namespace named or addressed '$host'" >&2
  exit 255
fi
exec ip netns exec "$ns" sh -c "$command"
