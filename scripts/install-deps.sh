#!/usr/bin/env bash
# Installs the Debian bookworm packages kolo needs to build, test and run its
# examples. Idempotent and quiet when everything is already there. Run as
# root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgloo-dev libssl-dev libflatbuffers-dev flatbuffers-compiler
  libfmt-dev libspdlog-dev libcli11-dev libeigen3-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev
  libtorch-dev python3-torch python3-dev pybind11-dev python3-pytest python3-numpy
  python3-cloudpickle python3-venv ccache
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist iproute2 procps openssh-server slurm-wlm munge
  clang libclang-rt-14-dev
  clang-16 libc++-16-dev libc++abi-16-dev iwyu
  python3-sphinx python3-myst-parser furo python3-breathe doxygen graphviz
  openjdk-17-jre-headless
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "kolo: installing ${#missing[@]} missing packages: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "kolo: packages installed"
