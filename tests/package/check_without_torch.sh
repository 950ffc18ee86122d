#!/usr/bin/env bash
# kolo in a fresh venv without torch: made with `python3 -m venv` (no system
# site-packages, so no Debian torch), the build tools, NumPy, pytest,
# cloudpickle and Ray from pip's index, then `pip install
# --no-build-isolation` of this checkout, which builds kolo without
# kolo.torch. In that venv:
#   1. `import kolo` imports no torch; `import kolo.torch` fails with an
#      ImportError saying torch is needed;
#   2. the array API's suite (tests/arrays) at 2 and 3 ranks under the
#      venv's kolorun;
#   3. kolo.run (without_torch/run_job.py) and a kolo.ray job
#      (without_torch/ray_job.py).
#
#   check_without_torch.sh SOURCE_DIR CACHE_DIR [BASE_PYTHON]
#
# The venv, and scikit-build-core's build folder (so a rerun rebuilds only
# what changed), are kept under CACHE_DIR (the checkout's .cache/, as
# scripts/python-venv.sh's venvs). Prints "without torch: ok" when every
# step passed, or "SKIPPED: pip's index is unreachable" when the venv cannot
# be made for that reason alone.
set -euo pipefail
# Another build's CMake arguments (scripts/test.sh exports torch2's for its
# wheel) are not this build's: a changed compiler makes CMake wipe the
# build folder's cache and rebuild everything.
unset CMAKE_ARGS
source_dir=$(cd "$1" && pwd)
cache=${KOLO_CACHE_DIR:-$2}  # scripts/test.sh's cache, shared between clones
base_python=${3:-/usr/bin/python3}
venv=$cache/venv-without-torch
# One build folder per checkout: CMake refuses a build folder made for
# another source folder.
build=$cache/build-without-torch-$(printf '%s' "$source_dir" | sha256sum | cut -c1-12)
mkdir -p "$cache"
packages=("scikit-build-core>=0.10" "pybind11>=2.10" "numpy>=1.22" pytest cloudpickle
          "ray==2.60.0")

exec 9>"$cache/.without-torch.lock"  # one run at a time per cache
flock 9

ready() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - <<'PY' 2>/dev/null
from importlib import metadata
for name in ("scikit-build-core", "pybind11", "numpy", "pytest", "cloudpickle", "ray"):
    metadata.version(name)
PY
}

if ! ready; then
  echo "== venv $venv: ${packages[*]} from pip's index"
  rm -rf "$venv"
  "$base_python" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --quiet --progress-bar off --disable-pip-version-check \
       "${packages[@]}"; then
    probe=$(mktemp -d)
    if ! "$venv/bin/python" -m pip download --quiet --no-deps --no-cache-dir --no-index \
         --disable-pip-version-check -d "$probe" pip >/dev/null 2>&1 &&
       ! "$venv/bin/python" -m pip download --quiet --no-deps --no-cache-dir \
         --disable-pip-version-check -d "$probe" cloudpickle >/dev/null 2>&1; then
      rm -rf "$probe" "$venv"
      echo "SKIPPED: pip's index is unreachable, so no venv could be made"
      exit 0
    fi
    rm -rf "$probe"
    echo "pip could not install ${packages[*]} (the index is reachable)" >&2
    exit 1
  fi
fi
if "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "$venv has torch: it must not" >&2
  exit 1
fi

echo "== pip install --no-build-isolation $source_dir (build folder $build)"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
            --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
fi
start=$SECONDS
# Two compile jobs unless told otherwise (CI's machine has two cores).
PATH="$venv/bin:$PATH" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps --config-settings=build-dir="$build" "${launcher[@]}" \
  "$source_dir"
echo "built and installed in $((SECONDS - start)) s"

py=$venv/bin/python
clean_env=(env -i PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" HOME="${HOME:-/tmp}"
           PYTHONDONTWRITEBYTECODE=1 KOLO_TIMEOUT=60)

echo "== import kolo (no torch), import kolo.torch (a clear ImportError)"
"${clean_env[@]}" "$py" - <<'PY'
import sys
import kolo
assert "torch" not in sys.modules, "import kolo imported torch"
assert not hasattr(kolo, "_kolo_torch")
try:
    import kolo.torch  # noqa: F401
except ImportError as e:
    message = str(e)
    assert "kolo.torch needs torch" in message and "pip install torch" in message, message
    print("import kolo.torch:", message.splitlines()[0][:160])
else:
    raise SystemExit("import kolo.torch worked without torch")
PY

for np in 2 3; do
  echo "== kolorun -np $np: the array API (tests/arrays)"
  (cd "$source_dir/tests/arrays" &&
   "${clean_env[@]}" "$venv/bin/kolorun" -np $np --start-timeout 120 \
     "$py" -m pytest -q -x -p no:cacheprovider . | tail -1)
done

echo "== kolo.run"
"${clean_env[@]}" "$py" "$source_dir/tests/package/without_torch/run_job.py"
echo "== kolo.ray"
"${clean_env[@]}" RAY_USAGE_STATS_ENABLED=0 "$py" "$source_dir/tests/package/without_torch/ray_job.py"
echo "without torch: ok"
