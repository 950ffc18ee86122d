#!/usr/bin/env bash
# Installs the build tree into a scratch prefix outside the loader's default
# path and runs what was installed from there with a clean environment (no
# LD_LIBRARY_PATH; only PATH and HOME): each binary must find its own
# libraries through its RPATH.
#
#   check_install.sh BUILD_DIR [PYTHON]
#
#   1. tests/package/consumer: configured with find_package(kolo) against the
#      prefix, built, and run as a 2-rank job under the installed kolorun;
#      then, when kolo was built with LibTorch, the C++ quick start's own
#      project (tests/package/torch_consumer, links kolo::torch) by the
#      commands docs/quickstart/cpp.md shows (docs/_ext/blocks.py runs them);
#   2. with PYTHON (the interpreter the kolo package was built for): the
#      installed package imported from the prefix by tests/package/smoke.py
#      (allreduce, a few training steps) as a 2-rank job under the installed
#      kolorun;
#   3. every shared object installed (libkolo_*, the Python module) exports
#      kolo's API only (check_exports.sh).
# Prints "install: ok" when every step passed.
set -euo pipefail
build_dir=$1
python=${2:-}
source_dir=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d /tmp/kolo-install.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
prefix=$scratch/prefix

clean_env=(env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$scratch" KOLO_TIMEOUT=60)

cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -S "$source_dir/consumer" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/build" >/dev/null
echo "== kolorun -np 2 consumer (from $prefix)"
"${clean_env[@]}" "$prefix/bin/kolorun" -np 2 --timeout-seconds 60 "$scratch/build/consumer"

if compgen -G "$prefix/lib*/libkolo_torch.so*" >/dev/null; then
  # The C++ quick start's own project, by the commands the page shows
  # (docs/quickstart/cpp.md, block cpp-own-project, with this build for
  # build/default): install into ~/kolo, build tests/package/torch_consumer
  # against it and run it on 2 ranks, in a clean environment.
  echo "== the C++ quick start's project (kolo::torch) from an install of $build_dir"
  "${clean_env[@]}" "${python:-python3}" "$source_dir/../../docs/_ext/blocks.py" run docs/quickstart/cpp.md --name cpp-own-project \
    --build-dir "$build_dir" --python "${python:-$(command -v python3)}" --timeout 600 |
    grep -vE '^-- (Installing|Up-to-date|Set runtime path)'  # CI shows a test's first lines
fi

if [ -n "$python" ]; then
  site=$(echo "$prefix"/lib/python*/site-packages)
  [ -f "$site/kolo/__init__.py" ] || { echo "no kolo package under $prefix/lib" >&2; exit 1; }
  echo "== kolorun -np 2 $python tests/package/smoke.py (kolo from $site)"
  "${clean_env[@]}" PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 KOLO_EXPECT_DIR="$site" \
    "$prefix/bin/kolorun" -np 2 --timeout-seconds 120 "$python" "$source_dir/smoke.py"
fi

echo "== exported symbols of every installed shared object"
"$source_dir/check_exports.sh" "$prefix"
echo "install: ok"
