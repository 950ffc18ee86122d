#!/bin/sh
# A "remote shell" that runs the command right here, for kolorun's remote
# start tests without ssh: fake-rsh.sh HOST COMMAND. Hosts named
# unreachable* fail like ssh does when a host cannot be reached.
host=$1
case "$host" in
  unreachable*)
    echo "ssh: connect to host $host port 22: No route to host" >&2
    exit 255
    ;;
esac
exec sh -c "$2"
