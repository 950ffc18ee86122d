#!/usr/bin/env bash
# Downloads (does not install) the Debian bookworm .debs that scripts/gpu-check
# unpacks on a GPU machine that has no package registry: Gloo and what its
# library links (hiredis, ibverbs, libnl), fmt, spdlog, GoogleTest/GoogleMock,
# CLI11, FlatBuffers (library, flatc, and flatc's CMake target) and yaml-cpp
# (kolorun --config-file). Run it here, on a Debian machine with apt; the
# folder then travels to the GPU machine with the working tree (`.debs` is
# git-ignored: carry it).
#
#   scripts/gpu-debs.sh          # into .debs/ in the checkout
#   scripts/gpu-debs.sh DIR      # into DIR
#
# libssl-dev and libssl3 come too: gpu-check unpacks them only when the GPU
# machine has no OpenSSL headers of its own. So do wheels of pytest (the
# Python CUDA suite) and numpy (examples/python, which the ResNet-50 Python
# benchmark imports) for the GPU machine's Python (KOLO_GPU_PYTHON_VERSION,
# default 3.12) into DIR/wheels: gpu-check unzips them onto PYTHONPATH only
# when that interpreter lacks them. KOLO_GPU_WHEELS=0 skips them.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.debs}

packages=(
  libgloo0 libgloo-dev
  libhiredis0.14 libhiredis-dev
  libibverbs1 libibverbs-dev libnl-3-200 libnl-route-3-200
  libfmt9 libfmt-dev
  libspdlog1.10 libspdlog-dev
  libgtest-dev libgmock-dev
  libcli11-dev
  libflatbuffers2 libflatbuffers-dev flatbuffers-compiler flatbuffers-compiler-dev
  libssl3 libssl-dev
  libyaml-cpp0.7 libyaml-cpp-dev
)

mkdir -p "$dir"
# amd64 whatever this machine is: the GPU machines are x86-64.
(cd "$dir" && apt-get -q -oAPT::Architecture=amd64 download "${packages[@]}")
missing=0
for p in "${packages[@]}"; do
  compgen -G "$dir/${p}_*.deb" >/dev/null || { echo "gpu-debs: $p was not downloaded" >&2; missing=1; }
done
[ $missing -eq 0 ] || exit 1

if [ "${KOLO_GPU_WHEELS:-1}" != 0 ]; then
  pyver=${KOLO_GPU_PYTHON_VERSION:-3.12}
  pip=(python3 -m pip)
  "${pip[@]}" --version >/dev/null 2>&1 || pip=(pip3)
  rm -rf "$dir/wheels"
  "${pip[@]}" download -q --disable-pip-version-check --only-binary=:all: -d "$dir/wheels" \
    --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    pytest numpy
  echo "gpu-debs: wheels for Python $pyver in $dir/wheels:"
  ls "$dir/wheels"
fi
echo "gpu-debs: ${#packages[@]} packages in $dir ($(du -sh "$dir" | cut -f1) in all)"
