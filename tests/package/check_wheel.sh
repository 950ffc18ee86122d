#!/usr/bin/env bash
# The pip route, from this checkout: build a wheel, install it into a second
# venv with the same torch, and run it from there with a clean environment.
#
#   check_wheel.sh PYTHON
#
# PYTHON: a venv's interpreter with torch, scikit-build-core and pybind11
# (scripts/python-venv.sh --no-kolo makes one). That venv is not modified.
#   1. PYTHON -m pip wheel --no-build-isolation: scikit-build-core builds
#      kolo through its CMake against that venv's torch;
#   2. a second venv from the same base interpreter, with hard links to the
#      first one's packages (the same torch, without copying 4 GB) but not
#      kolo's dependencies, gets the wheel with pip, which installs them;
#   3. its own `kolorun` (the script pip put on its PATH) runs
#      tests/package/smoke.py on 2 ranks with a clean environment;
#   4. every shared object in the installed package exports kolo's API
#      only (check_exports.sh);
#   5. an interpreter with another torch (/usr/bin/python3 with Debian's, if
#      its version differs) importing that kolo must fail at import with an
#      ImportError naming both versions and the reinstall command.
# Extra CMake options for the wheel build: CMAKE_ARGS (read by
# scikit-build-core), e.g. "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache";
# KOLO_WHEEL_BUILD_DIR: its build folder (emptied first; default a
# temporary one). scripts/test.sh sets both so that ccache serves the wheel
# build from the torch2 preset's objects (same flags, same folder depth).
# When every step passed, the wheel is copied to KOLO_WHEEL_ARTIFACT_DIR
# (default build/artifacts in the checkout; older kolo-*.whl there are
# removed) and "wheel: ok" is printed.
set -euo pipefail
python=$1
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
venv1=$("$python" -c 'import sys; print(sys.prefix)')
site1=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
base_python=$("$python" -c 'import sys; print(getattr(sys, "_base_executable", "") or sys.executable)')
# Scratch beside the first venv: hard links need the same file system.
scratch=$(mktemp -d "$(dirname "$venv1")/.kolo-wheel-check.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# docs-block: python-pip-install (docs/quickstart/python.md): the quick
# start installs with `pip install --no-build-isolation .` into a venv with
# torch, scikit-build-core, pybind11 and numpy (made here the same way by
# scripts/python-venv.sh); this builds that wheel and installs it.
echo "== pip wheel --no-build-isolation $source_dir"
start=$SECONDS
build_dir_setting=()
if [ -n "${KOLO_WHEEL_BUILD_DIR:-}" ]; then
  rm -rf "$KOLO_WHEEL_BUILD_DIR"
  build_dir_setting=(--config-settings "build-dir=$KOLO_WHEEL_BUILD_DIR")
fi
"$python" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  "${build_dir_setting[@]}" -w "$scratch/wheels" "$source_dir"
wheel=$(echo "$scratch"/wheels/kolo-*.whl)
[ -f "$wheel" ] || { echo "no wheel in $scratch/wheels" >&2; exit 1; }
echo "   $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB, $((SECONDS - start)) s)"

echo "== second venv with the same torch: pip install $(basename "$wheel")"
"$base_python" -m venv --without-pip "$scratch/v2"
site2=$("$scratch/v2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for entry in "$site1"/* "$site1"/.[!.]*; do
  [ -e "$entry" ] || continue
  case "$(basename "$entry")" in
    # kolo's own dependencies are left out: pip must bring them.
    kolo|kolo-*.dist-info|__pycache__|cloudpickle|cloudpickle-*.dist-info) continue ;;
  esac
  cp -al "$entry" "$site2/"
done
# (pip itself is among the linked packages.)
"$scratch/v2/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
"$scratch/v2/bin/python" -c 'import cloudpickle' ||
  { echo "pip did not install kolo's dependency cloudpickle" >&2; exit 1; }
[ -x "$scratch/v2/bin/kolorun" ] || { echo "pip put no kolorun in $scratch/v2/bin" >&2; exit 1; }

echo "== v2/bin/kolorun -np 2 v2/bin/python tests/package/smoke.py (clean environment)"
env -i PATH="$scratch/v2/bin:/usr/local/bin:/usr/bin:/bin" HOME="$scratch" \
  PYTHONDONTWRITEBYTECODE=1 KOLO_TIMEOUT=60 KOLO_EXPECT_DIR="$site2" \
  "$scratch/v2/bin/kolorun" -np 2 --timeout-seconds 120 \
  "$scratch/v2/bin/python" "$source_dir/tests/package/smoke.py"

echo "== exported symbols of every shared object in $site2/kolo"
"$source_dir/tests/package/check_exports.sh" "$site2/kolo"

other=/usr/bin/python3
built=$("$scratch/v2/bin/python" -c 'import torch; print(torch.__version__)')
theirs=$("$other" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ -n "$theirs" ] && [ "$theirs" != "$built" ]; then
  echo "== $other (torch $theirs) importing kolo built for torch $built"
  mkdir "$scratch/only-kolo"
  ln -s "$site2/kolo" "$scratch/only-kolo/kolo"
  set +e
  msg=$(env -i PATH=/usr/bin:/bin HOME="$scratch" PYTHONPATH="$scratch/only-kolo" \
        PYTHONDONTWRITEBYTECODE=1 "$other" -c 'import kolo.torch' 2>&1)
  rc=$?
  set -e
  echo "$msg" | tail -1
  if [ $rc -eq 0 ] || ! echo "$msg" | grep -q "ImportError: kolo was built against torch $built, but $other imports torch $theirs" ||
     ! echo "$msg" | grep -q "pip install --no-build-isolation --force-reinstall"; then
    echo "expected an ImportError naming torch $built and $theirs and the reinstall command" >&2
    exit 1
  fi
fi
artifacts=${KOLO_WHEEL_ARTIFACT_DIR:-$source_dir/build/artifacts}
mkdir -p "$artifacts"
rm -f "$artifacts"/kolo-*.whl
cp "$wheel" "$artifacts/"
echo "== wheel kept: $artifacts/$(basename "$wheel")"
echo "wheel: ok"
