#!/usr/bin/env bash
# The version is kept in one place, VERSION at the root; everything that
# shows one must show that one.
#
#   check_version.sh SOURCE_DIR BUILD_DIR [PYTHON]
#
# Compares VERSION with: `kolorun --version`, the CMake package's
# koloConfigVersion.cmake, the wheel's version source (pyproject.toml reads
# VERSION), and with PYTHON, `kolo.__version__` of the built module
# (BUILD_DIR/python). The docs read VERSION in docs/conf.py. Prints
# "version: ok X.Y.Z" when all agree.
set -euo pipefail
source_dir=$1 build_dir=$2 python=${3:-}
want=$(head -n1 "$source_dir/VERSION")
[[ $want =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  { echo "VERSION holds '$want': expected MAJOR.MINOR.PATCH" >&2; exit 1; }
fail=0
check() {  # check WHAT GOT
  if [ "$2" != "$want" ]; then
    echo "$1 says '$2', VERSION says '$want': rebuild, or read VERSION there" >&2
    fail=1
  fi
}
check "kolorun --version" "$("$build_dir/launcher/kolorun" --version | awk '{print $NF}')"
check "koloConfigVersion.cmake" \
  "$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$build_dir/koloConfigVersion.cmake")"
grep -q '^input = "VERSION"' "$source_dir/pyproject.toml" ||
  { echo "pyproject.toml: the version's input is not VERSION" >&2; fail=1; }
grep -q 'release = version = (_root / "VERSION")' "$source_dir/docs/conf.py" ||
  { echo "docs/conf.py does not read VERSION" >&2; fail=1; }
if [ -n "$python" ]; then
  check "kolo.__version__" "$(PYTHONPATH="$build_dir/python" PYTHONDONTWRITEBYTECODE=1 \
    "$python" -c 'import kolo; print(kolo.__version__)')"
fi
[ $fail = 0 ] && echo "version: ok $want"
