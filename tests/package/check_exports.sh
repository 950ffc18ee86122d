#!/usr/bin/env bash
# Every shared object kolo installs exports kolo's API and nothing else.
#
#   check_exports.sh DIR...
#
# Reads the defined dynamic symbols (nm -D --defined-only) of every shared
# object under each DIR (files named *.so or *.so.N...) and fails, listing
# them, on any symbol that is not kolo's:
#   - C++ names under kolo:: (demangled; also their typeinfo, typeinfo name,
#     vtable, VTT, construction vtable, guard variable and thunks);
#   - C symbols named kolo_*; PyInit_* (a Python module's entry point).
# An exported std:: template instantiation or a statically linked
# libstdc++'s std::ostream is what the dynamic linker binds every other
# library's calls to (issue 23: Gloo crashed in libkolo_core's copy);
# cmake/kolo_exports.map is what keeps them local. Also fails when a DIR
# holds no shared object, or one exports nothing of kolo's.
# Prints "exports: ok (N shared objects)" when every one passed.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: check_exports.sh DIR..." >&2; exit 2; }
special='^(typeinfo name for|typeinfo for|vtable for|VTT for|construction vtable for|guard variable for|non-virtual thunk to|virtual thunk to|covariant return thunk to) '
checked=0 failed=0
for dir in "$@"; do
  libs=$(find "$dir" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) | sort)
  [ -n "$libs" ] || { echo "no shared object under $dir" >&2; exit 1; }
  for lib in $libs; do
    checked=$((checked + 1))
    # name<TAB>demangled name, one per defined dynamic symbol.
    raw=$(nm -D --defined-only --format=posix "$lib" | awk '{ print $1 }')
    [ -n "$raw" ] || { echo "FAIL $lib: exports nothing" >&2; failed=$((failed + 1)); continue; }
    table=$(paste <(echo "$raw") <(echo "$raw" | c++filt))
    outside=$(echo "$table" | awk -F'\t' -v special="$special" '{
        name = $2; sub(special, "", name)
        if (name ~ /^kolo::/ || $1 ~ /^kolo_/ || $1 ~ /^PyInit_/) next
        print $2 }')
    ours=$(( $(echo "$table" | wc -l) - $(echo -n "$outside" | grep -c '^' || true) ))
    if [ -n "$outside" ]; then
      failed=$((failed + 1))
      echo "FAIL $lib exports $(echo "$outside" | wc -l) symbols outside kolo's API, e.g.:" >&2
      echo "$outside" | head -20 | cut -c1-200 | sed 's/^/    /' >&2
    elif [ "$ours" -eq 0 ]; then
      failed=$((failed + 1))
      echo "FAIL $lib exports none of kolo's symbols" >&2
    else
      echo "   $lib: $ours symbols, all kolo's"
    fi
  done
done
[ "$failed" -eq 0 ] || { echo "$failed of $checked shared objects export more than kolo's API" >&2; exit 1; }
echo "exports: ok ($checked shared objects)"
