#!/usr/bin/env bash
# Builds the documentation site (docs/ -> build/docs/html) and runs its
# checks; exits non-zero, naming what is missing, when one fails:
#   1. every public C++ declaration has a /// doc comment (Doxygen with
#      WARN_IF_UNDOCUMENTED; its warnings file must be empty);
#   2. the site builds with Sphinx, warnings as errors (-W --keep-going -n):
#      every reference, internal link and heading anchor resolves, every
#      KOLO_* variable the code reads is in docs/reference/environment.toml
#      and no other (docs/_ext/kolo_docs.py);
#   3. README.md's relative links and anchors resolve; every figure in the
#      results of docs/benchmarks.md and benchmarks/README.md names its
#      commit, command and program (checks.py benchmark-sources);
#   4. every public Python name of kolo, kolo.torch, kolo.torch.elastic,
#      kolo.ray (and kolo.run, kolo.spark where present) has a docstring;
#   5. every kolorun flag is in `kolorun --help` and on the reference page,
#      every KOLO_* variable on the environment page, VERSION on the site;
#   6. the quick starts' marked code blocks (docs/_ext/blocks.py): files
#      shown whole equal the repository's, commands CI runs elsewhere are
#      the ones it runs, and the rest run here (the Python quick start: a
#      training job on 2 ranks). scripts/test.sh's docs stage then runs the
#      C++ quick start's scripts/quickstart.sh (with --epochs 1).
#
#   scripts/docs.sh [BUILD_DIR]       # default build/default
#   KOLO_DOCS_SKIP_RUN=1 scripts/docs.sh    # all but step 6's runs
#
# Needs a configured BUILD_DIR (it builds kolorun and the Python module
# there when they are missing) and the Debian packages of
# scripts/install-deps.sh (Sphinx, MyST, furo, Breathe, Doxygen). Prints
# the time it took and "docs: ok".
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
build=$(realpath -m "${1:-build/default}")
out=$PWD/build/docs
failed=()
fail() { failed+=("$1"); echo "docs: FAILED: $1" >&2; }

for tool in sphinx-build doxygen dot; do
  command -v "$tool" >/dev/null || { echo "docs: $tool is missing: run scripts/install-deps.sh" >&2; exit 1; }
done
# What the checks run: kolorun and the compiled Python module (the C++
# quick start builds only kolorun and the example; configure alone leaves
# python/kolo with no _kolo in it). Built here when missing.
built() { [ -x "$build/launcher/kolorun" ] && compgen -G "$build/python/kolo/_kolo*.so" >/dev/null; }
if ! built; then
  [ -f "$build/CMakeCache.txt" ] || {
    echo "docs: $build is not a configured build: run cmake --preset default first" >&2; exit 1; }
  echo "== building kolorun and the Python module in $build (the checks run them)"
  cmake --build "$build" -j"$(nproc)" --target kolorun kolo_python >/dev/null ||
    { echo "docs: could not build kolorun and kolo_python in $build (run: cmake --build $build --target kolorun kolo_python)" >&2; exit 1; }
fi
python=$(sed -n 's/^KOLO_PYTHON_EXECUTABLE:INTERNAL=//p' "$build/CMakeCache.txt")
python=${python:-/usr/bin/python3}
export KOLO_KOLORUN=$build/launcher/kolorun KOLO_PYTHONPATH=$build/python
export KOLO_DOXYGEN_XML=$out/doxygen/xml PYTHONDONTWRITEBYTECODE=1
checks=(docs/_ext/checks.py)
rm -rf "$out/doxygen" && mkdir -p "$out/doxygen"

echo "== doxygen (C++ reference; every public declaration documented)"
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY=$out/doxygen"; echo "WARN_LOGFILE=$out/doxygen/warnings.txt"; } |
  doxygen - >/dev/null || fail "doxygen did not run"
"$python" "${checks[@]}" doxygen "$out/doxygen/warnings.txt" 2>"$out/doxygen/missing.txt" ||
  { head -n 20 "$out/doxygen/missing.txt" >&2
    fail "C++ doc comments: $(grep -c . "$out/doxygen/missing.txt") Doxygen warnings (all in $out/doxygen/missing.txt)"; }

echo "== sphinx-build -W -n (docs/ -> $out/html)"
# The Python API pages import kolo from $build/python with the interpreter
# it was built for.
if ! "$python" -m sphinx -E -b html -W --keep-going -n -q -d "$out/doctrees" docs "$out/html"; then
  fail "the site does not build without warnings (above)"
fi

echo "== README.md links"
"$python" "${checks[@]}" readme-links || fail "README.md links"

echo "== benchmark figures' sources"
"$python" "${checks[@]}" benchmark-sources || fail "benchmark figures without their commit, command or program"

echo "== docstrings"
PYTHONPATH=$build/python "$python" "${checks[@]}" docstrings 2>"$out/docstrings.txt"
case $? in
  0) ;;
  1) head -n 20 "$out/docstrings.txt" >&2
     fail "Python docstrings: $(grep -c '^docstrings: ' "$out/docstrings.txt") missing (all in $out/docstrings.txt)" ;;
  *) tail -n 5 "$out/docstrings.txt" >&2
     fail "Python docstrings: the check could not import kolo from $build/python (above; all in $out/docstrings.txt)" ;;
esac

echo "== kolorun flags, KOLO_* variables, version in the reference"
"$python" "${checks[@]}" kolorun-flags "$out/html/reference/kolorun.html" || fail "kolorun flags"
"$python" "${checks[@]}" environment "$out/html/reference/environment.html" || fail "KOLO_* variables"
"$python" "${checks[@]}" version "$out/html/index.html" || fail "version"

echo "== quick starts' code blocks"
pages=(docs/quickstart/*.md)
"$python" docs/_ext/blocks.py check "${pages[@]}" || fail "quick-start code blocks"
if [ "${KOLO_DOCS_SKIP_RUN:-0}" != 1 ]; then
  for page in "${pages[@]}"; do
    run_start=$SECONDS
    "$python" docs/_ext/blocks.py run "$page" --build-dir "$build" --python "$python" \
      --timeout 600 || fail "$page: a command it shows fails"
    echo "   $page: $((SECONDS - run_start)) s"
  done
fi

echo "== docs: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'docs: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "docs: ok"
