#!/usr/bin/env bash
# Installs what is missing, builds kolo and trains the Fashion-MNIST example
# on 2 processes with kolorun. Extra arguments go to the example
# (e.g. --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j"$(nproc)" --target kolorun fashion_mnist

echo "== kolorun -np 2 fashion_mnist $*"
exec build/default/launcher/kolorun -np 2 build/default/examples/fashion_mnist/fashion_mnist "$@"
