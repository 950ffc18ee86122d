#!/usr/bin/env bash
# Makes (or reuses) a Python virtual environment with PyTorch from the
# package index and the tools that build kolo, then pip-installs kolo from
# this checkout into it: `kolo` (import kolo.torch as hvd) and `kolorun` in
# DIR/bin.
#
#   scripts/python-venv.sh v                  # torch 2.11.0 + kolo in ./v
#   v/bin/kolorun -np 2 v/bin/python examples/python/fashion_mnist.py --epochs 1
#
#   scripts/python-venv.sh [--torch VERSION] [--no-kolo] DIR
#     --torch VERSION  torch from the package index (default 2.11.0, or
#                      $KOLO_TORCH_VERSION); docs/install.md
#     --no-kolo        stop after torch and the build tools (scripts/test.sh's
#                      cached environment)
#
# Reuse: a DIR that already has that torch and the tools is kept as it is
# (seconds); a DIR with another torch is refused, not changed. Concurrent
# runs on one DIR wait for each other. Downloads (about 3.5 GB for torch
# with its CUDA wheels) land in pip's cache (~/.cache/pip, PIP_CACHE_DIR),
# so another DIR on the same machine installs without downloading again.
# The venv is made with $KOLO_BASE_PYTHON (default /usr/bin/python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

torch_version=${KOLO_TORCH_VERSION:-2.11.0}
install_kolo=1
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --torch) torch_version=${2:?--torch needs a version}; shift 2 ;;
    --no-kolo) install_kolo=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "python-venv.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$dir" ] || { echo "python-venv.sh: one DIR only" >&2; exit 2; }; dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || { echo "usage: scripts/python-venv.sh [--torch VERSION] [--no-kolo] DIR" >&2; exit 2; }

# The C++ toolchain and libraries kolo builds with (Debian packages), and
# python3-venv for the venv itself.
"$repo/scripts/install-deps.sh"

base_python=${KOLO_BASE_PYTHON:-/usr/bin/python3}
# Build tools for `pip install --no-build-isolation`; numpy and pytest for
# the examples and tests/python; cloudpickle for the object collectives
# (as Horovod; kolo falls back to pickle without it); Ray for kolo.ray and
# tests/ray (optional for users: pip install "kolo[ray]"); PySpark for
# kolo.spark and tests/spark (optional: pip install "kolo[spark]"; it runs
# on Debian's OpenJDK, which install-deps.sh installs); Hugging Face
# Accelerate and PyTorch Lightning for tests/c10d/frameworks (a user needs
# neither; docs/guides/torch-distributed.md).
packages=("torch==$torch_version" "scikit-build-core>=0.10" "pybind11>=2.10" numpy pytest
          cloudpickle "ray[train]==2.60.0" "pyspark[sql]==4.3.0" "accelerate==1.15.0"
          "lightning==2.6.6")

# ready DIR: exit 0 when DIR's python has torch==$torch_version and the
# tools (read from the installed metadata, without importing torch); 3 and
# a message when it has another torch.
ready() {
  [ -x "$1/bin/python" ] || return 1
  "$1/bin/python" - "$torch_version" <<'EOF' 2>/dev/null
import sys
from importlib import metadata
want = sys.argv[1]
have = metadata.version("torch").split("+")[0]
if have != want:
    print("python-venv.sh: %s has torch %s, not %s: use another DIR or delete this one"
          % (sys.prefix, have, want))
    sys.exit(3)
for name in ("scikit-build-core", "pybind11", "numpy", "pytest", "cloudpickle", "ray", "pyspark",
             "accelerate", "lightning"):
    metadata.version(name)
EOF
}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ ! -e "$dir/pyvenv.cfg" ] && [ -n "$(ls -A "$dir" | grep -vx .kolo-venv.lock)" ]; then
  echo "python-venv.sh: $dir is not empty and not a venv; choose another DIR" >&2
  exit 1
fi
exec 9>"$dir/.kolo-venv.lock"
flock 9
set +e
msg=$(ready "$dir")
rc=$?
set -e
if [ $rc -eq 3 ]; then
  echo "$msg" >&2
  exit 1
elif [ $rc -ne 0 ]; then
  echo "== venv $dir: torch $torch_version from the package index (about 3.5 GB the first time)"
  start=$SECONDS
  "$base_python" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --progress-bar off --disable-pip-version-check \
    "${packages[@]}"
  ready "$dir"
  echo "== venv $dir ready ($((SECONDS - start)) s)"
fi
flock -u 9
exec 9>&-

if [ $install_kolo = 1 ]; then
  echo "== pip install --no-build-isolation $repo (builds kolo: a few minutes)"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation "$repo"
  echo "== kolo installed: $dir/bin/kolorun -np 2 $dir/bin/python examples/python/fashion_mnist.py"
fi
