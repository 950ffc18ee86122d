#!/bin/sh
# A host discovery script for kolorun --host-discovery-script: prints the
# hosts that may run workers now, one "host:slots" per line. kolorun runs it
# every --discovery-interval seconds (default 1); a host that disappears
# from the output leaves the job at its next commit, one that appears joins.
#
# This one prints the lines of $KOLO_HOSTS_FILE (default ./hosts.txt), so
# that you can add and remove hosts by editing that file while the job runs:
#   echo localhost:2 > hosts.txt
#   kolorun -np 2 --max-np 4 --host-discovery-script examples/elastic/discover_hosts.sh \
#       build/default/examples/elastic/elastic_fashion_mnist
#   echo localhost:4 > hosts.txt      # in another shell: the job grows to 4
# On a cloud, ask the provider's API for the instances of the job instead.
cat "${KOLO_HOSTS_FILE:-hosts.txt}"
