#!/usr/bin/env bash
# Include check: every source file must include the standard headers it
# uses, not rely on another header pulling them in (GCC 12's libstdc++ pulls
# <system_error> into <thread>, GCC 13's does not; a file that leaned on
# that stopped compiling there).
#
#   scripts/include-check.sh [BUILD_DIR]     # default build/inclcheck
#   KOLO_INCLUDE_CHECK_ONLY=rendezvous/ scripts/include-check.sh   # files whose path matches
#
# Configures kolo with Clang 16 (CMAKE_EXPORT_COMPILE_COMMANDS), generates
# the FlatBuffers header, then checks every translation unit in
# compile_commands.json, with that unit's own flags, twice:
#   1. libc++ 16: `clang++ -stdlib=libc++ -fsyntax-only
#      -D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES`, which leaves out most of what
#      one standard header drags in for another: a missing #include is a
#      compile error. Each of kolo's own headers (core/include, core/src,
#      launcher, tests/harness, benchmarks) is also compiled alone, so a
#      header includes what it uses instead of counting on its includer.
#   2. libstdc++ with include-what-you-use (iwyu): libc++ still carries some
#      headers inside others (its <thread> includes <system_error>), so iwyu
#      names the standard header of each std:: name a file uses. A file must
#      include that header itself or through a kolo header it includes.
#      Ignored: what iwyu attributes to template internals
#      (allocator_traits<>::..., <ratio> behind std::chrono, ...) and
#      non-standard headers (third-party libraries choose their own public
#      headers). A kolo header is checked with the .cc of the same name.
# install-deps.sh installs clang-16, libc++-16-dev and iwyu.
#
# Covered: core (the framework-free engine, every backend but CUDA/NCCL),
# launcher, tests and benchmarks that need no LibTorch, fuzz targets.
# Not covered: what includes LibTorch (adapters/torch, bindings/python,
# tests/torch, tests/gpu, examples, benchmarks/bert_base) or CUDA
# (core/src/comm/cuda, core/src/comm/nccl): LibTorch and the CUDA toolkit
# are configured out here (LibTorch's headers need its libstdc++ build);
# GCC builds them in the default and torch2 stages.
#
# First of all (a second, no build): the layering check
# (scripts/layering-check.py), which fails when a folder of core/src
# includes one that lies above it.
#
# Prints each failing file with the compiler's first errors or the missing
# header; exits non-zero if any file fails. About 10 CPU-minutes (5 on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/layering-check.py
build_dir=${1:-build/inclcheck}
cxx=${KOLO_INCLUDE_CHECK_CXX:-clang++-16}
cc=${cxx/clang++/clang}
for tool in "$cxx" include-what-you-use; do
  command -v "$tool" >/dev/null ||
    { echo "include check: $tool not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_COMPILER_LAUNCHER= -DCMAKE_CXX_COMPILER_LAUNCHER= \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_BUILD_TYPE=Release \
  -DKOLO_WITH_TORCH=OFF -DKOLO_WITH_CUDA=OFF -DKOLO_WITH_NCCL=OFF -DKOLO_BUILD_FUZZERS=ON \
  >/dev/null
# Generated headers the sources include (flatc's output).
cmake --build "$build_dir" --target kolo_wire_generated >/dev/null

python3 - "$build_dir/compile_commands.json" "$PWD" "$(nproc)" "${KOLO_INCLUDE_CHECK_ONLY:-}" <<'PY'
import json, os, re, shlex, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

db_path, root, jobs, only = sys.argv[1], sys.argv[2], int(sys.argv[3]), re.compile(sys.argv[4])
libcxx = ["-stdlib=libc++", "-fsyntax-only", "-w", "-D_LIBCPP_REMOVE_TRANSITIVE_INCLUDES",
          "-ferror-limit=5"]
iwyu = ["-w", "-Xiwyu", "--no_fwd_decls", "-Xiwyu", "--max_line_length=1000"]
# Headers compiled alone: kolo's own in these folders, except those that
# need LibTorch or CUDA. Each gets the flags of a unit in its folder or the
# nearest one above it.
header_roots = ["core/include", "core/src", "launcher", "tests/harness", "benchmarks"]
needs_torch_or_cuda = re.compile(r'#\s*include\s*[<"](torch/|ATen/|c10/|cuda|nccl)')
STD = set("""algorithm any array atomic bit bitset cassert cctype cerrno cfloat charconv
chrono cinttypes climits clocale cmath complex condition_variable csetjmp csignal cstdarg
cstddef cstdint cstdio cstdlib cstring ctime cwchar cwctype deque exception execution
filesystem forward_list fstream functional future initializer_list iomanip ios iosfwd
iostream istream iterator limits list locale map memory memory_resource mutex new numeric
optional ostream queue random ratio regex scoped_allocator set shared_mutex sstream stack
stdexcept streambuf string string_view system_error thread tuple type_traits typeindex
typeinfo unordered_map unordered_set utility valarray variant vector""".split())
# iwyu reasons that are template plumbing, not names the code uses.
# Names the standard declares in several headers: any of them will do.
ANY_OF = {"size_t": {"cstddef", "cstdio", "cstdlib", "cstring", "ctime", "cwchar"},
          "FILE": {"cstdio", "cwchar"}}
NOISE = {"ratio", "milli", "micro", "nano", "declval", "allocator", "char_traits",
         "remove_reference", "initializer_list"}

def strip(args, source):
    """The unit's own flags, minus output, dependency files and the source."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a not in ("-c", "-MD", "-MMD", source):
            out.append(a)
    return out

units = []
for e in json.load(open(db_path)):
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    units.append((os.path.relpath(e["file"], root), e["directory"], strip(args, e["file"])))
all_units = units
units = [u for u in units if only.search(u[0])]

def flags_for(header):
    d = os.path.dirname(header)
    while d:
        for src, cwd, flags in all_units:
            if src.startswith(d + "/"):
                return cwd, flags
        d = os.path.dirname(d)
    raise SystemExit("include check: no translation unit near %s to take flags from" % header)

headers = []
for top in header_roots:
    for dirpath, _, names in os.walk(os.path.join(root, top)):
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, root)
            if (n.endswith(".h") and only.search(rel)
                    and not needs_torch_or_cuda.search(open(path).read())):
                headers.append(rel)
headers.sort()

def compile_unit(u):
    src, cwd, flags = u
    r = subprocess.run(flags + libcxx + [os.path.join(root, src)], cwd=cwd,
                       capture_output=True, text=True)
    return [(src, r.stderr)] if r.returncode else []

def compile_header(h):
    cwd, flags = flags_for(h)
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as f:
        f.write('#include "%s"\n' % os.path.join(root, h))
    try:
        r = subprocess.run(flags + libcxx + [f.name], cwd=cwd, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    return [(h + " (alone)", r.stderr)] if r.returncode else []

# The standard headers a kolo file has: its own includes and, through its
# quoted includes of other kolo files, theirs.
include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
def std_name(h):
    if h == "bits/chrono.h":
        return "chrono"
    if h.endswith(".h") and "c" + h[:-2] in STD:  # <stdint.h> counts as <cstdint>
        return "c" + h[:-2]
    return h
def provided(path, dirs, seen):
    if path in seen:
        return set()
    seen.add(path)
    out = set()
    for kind, name in include_re.findall(open(path, errors="replace").read()):
        if kind == "<":
            out.add(std_name(name))
            continue
        for d in [os.path.dirname(path)] + dirs:
            p = os.path.normpath(os.path.join(d, name))
            if os.path.isfile(p) and p.startswith(root + "/") and "/build/" not in p:
                out |= provided(p, dirs, seen)
                break
    return out

def run_iwyu(u):
    src, cwd, flags = u
    r = subprocess.run(["include-what-you-use"] + flags[1:] + iwyu + [os.path.join(root, src)],
                       cwd=cwd, capture_output=True, text=True)
    dirs = [os.path.normpath(os.path.join(cwd, a[2:])) for a in flags if a.startswith("-I")]
    missing, current = [], None
    for line in r.stderr.splitlines():
        m = re.match(r"^(\S+) should add these lines:", line)
        if m:
            current = os.path.normpath(os.path.join(cwd, m.group(1)))
            continue
        if not line.strip() or line.startswith(("The full", "---")) or "should remove" in line:
            current = None
            continue
        m = re.match(r"#include <([^>]+)>\s*(?://\s*for (.*))?", line)
        if not current or not m or std_name(m.group(1)) not in STD:
            continue
        header = std_name(m.group(1))
        names = [n.strip() for n in (m.group(2) or "").split(",")]
        names = [n for n in names
                 if n and "<>" not in n and not n.startswith("__") and n not in NOISE]
        have = provided(current, dirs, set()) if names else set()
        if names and header not in have and not all(ANY_OF.get(n, set()) & have for n in names):
            missing.append((os.path.relpath(current, root),
                            "#include <%s> missing (for %s)" % (header, ", ".join(names))))
    return missing

with ThreadPoolExecutor(jobs) as pool:
    failures = [f for fs in pool.map(compile_unit, units) for f in fs]
    failures += [f for fs in pool.map(compile_header, headers) for f in fs]
    missing = sorted(set(m for ms in pool.map(run_iwyu, units) for m in ms))
for name, err in failures:
    lines = [l for l in err.splitlines() if l.strip()][:30]
    print("FAIL %s (libc++)\n  %s" % (name, "\n  ".join(lines)))
for name, what in missing:
    print("FAIL %s (iwyu): %s" % (name, what))
bad = len(set(n for n, _ in failures) | set(n for n, _ in missing))
print("include check: %d translation units, %d headers alone; %d files fail "
      "(%d libc++ errors, %d missing standard includes)"
      % (len(units), len(headers), bad, len(failures), len(missing)))
sys.exit(1 if bad else 0)
PY
