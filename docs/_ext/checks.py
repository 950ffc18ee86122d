#!/usr/bin/env python3
"""The docs checks that are not the Sphinx build itself (scripts/docs.sh
runs them). Each prints what is missing, naming the file or the name, and
exits non-zero when something is.

    checks.py docstrings [MODULE...]   every public Python name has a docstring
    checks.py doxygen WARNINGS_FILE    every public C++ declaration has a doc comment
    checks.py readme-links             README.md's relative links and anchors resolve
    checks.py kolorun-flags HTML       every flag kolorun defines is in --help and the page
    checks.py environment HTML         every KOLO_* variable the code reads is on the page
    checks.py version HTML             the site shows VERSION
    checks.py benchmark-sources        every benchmark figure names its commit and program
"""
import importlib
import inspect
import pathlib
import re
import shutil
import subprocess
import sys
import traceback
import types

import kolo_source

ROOT = kolo_source.ROOT
PUBLIC_MODULES = ["kolo", "kolo.torch", "kolo.torch.elastic", "kolo.torch.distributed", "kolo.ray"]
# Public modules that land with other changes: checked when present.
OPTIONAL_MODULES = ["kolo.run", "kolo.spark"]


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and
                 not isinstance(v, types.ModuleType) and
                 (getattr(v, "__module__", "") or "").startswith("kolo")]
    return sorted(names)


def _documentable(obj):
    return inspect.isclass(obj) or inspect.isroutine(obj) or isinstance(obj, property) or \
        type(obj).__name__ in ("builtin_function_or_method", "instancemethod")


def _has_doc(obj):
    doc = obj.__doc__ if not isinstance(obj, property) else (obj.fget.__doc__ if obj.fget else None)
    doc = (doc or "").strip()
    # pybind11 gives undocumented functions only their signature.
    return bool(doc) and not re.fullmatch(r"[\w.]+\(.*\)\s*->\s*[\w.\[\], ]+", doc)


def check_docstrings(modules):
    missing = []
    count = 0
    checked = []
    mocked = False
    try:
        import ray  # noqa: F401
    except ImportError:
        # kolo.ray imports Ray at import time; without it (the system Python
        # has no Ray) its docstrings are read against Sphinx's stand-in
        # module, as autodoc does for the API page.
        from sphinx.ext.autodoc.mock import mock
        mocked = mock(["ray"])  # kept: the stand-in lives as long as this object
        mocked.__enter__()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if name in OPTIONAL_MODULES and e.name in (name, name.rpartition(".")[0] or name):
                continue
            print("docstrings: cannot import %s: %s" % (name, e), file=sys.stderr)
            return 2
        except Exception as e:  # a module that fails on import is not a missing docstring
            traceback.print_exc()
            print("docstrings: cannot import %s: %s" % (name, e), file=sys.stderr)
            return 2
        checked.append(name)
        count += 1
        if not (module.__doc__ or "").strip():
            missing.append("%s: the module has no docstring" % name)
        for attr in _public_names(module):
            if not hasattr(module, attr):
                missing.append("%s.__all__ names %s, which it does not define" % (name, attr))
                continue
            obj = getattr(module, attr)
            if not _documentable(obj):
                continue
            count += 1
            if not _has_doc(obj):
                missing.append("%s.%s has no docstring" % (name, attr))
            if inspect.isclass(obj) and (obj.__module__ or "").startswith("kolo"):
                for member, value in vars(obj).items():
                    # pybind11 enums' own name/value properties.
                    if member.startswith("_") or (hasattr(obj, "__members__") and
                                                  member in ("name", "value")):
                        continue
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if not _documentable(value):
                        continue
                    count += 1
                    if not _has_doc(value):
                        missing.append("%s.%s.%s has no docstring" % (name, attr, member))
    for m in sorted(set(missing)):
        print("docstrings: " + m, file=sys.stderr)
    print("docstrings: %d public Python names checked in %s%s, %d without a docstring"
          % (count, ", ".join(checked), " (Ray mocked)" if mocked is not False else "", len(set(missing))))
    return 1 if missing else 0


def check_doxygen(warnings_file):
    lines = [l for l in pathlib.Path(warnings_file).read_text().splitlines() if l.strip()]
    undocumented = [l for l in lines if "is not documented" in l]
    for l in lines:
        print("doxygen: " + l.replace(str(ROOT) + "/", ""), file=sys.stderr)
    print("doxygen: %d warnings, %d of them undocumented public declarations "
          "(add /// doc comments)" % (len(lines), len(undocumented)))
    return 1 if lines else 0


def github_anchor(heading):
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def check_readme_links():
    readme = (ROOT / "README.md").read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#+\s+(.*)$", readme, re.M)}
    problems = []
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        if path and not (ROOT / path).exists():
            problems.append("README.md links to %s, which is not in the repository" % path)
        elif not path and anchor not in anchors:
            problems.append("README.md links to #%s, which no heading of it makes" % anchor)
        elif path.endswith(".md") and anchor:
            heads = re.findall(r"^#+\s+(.*)$", (ROOT / path).read_text(), re.M)
            if anchor not in {github_anchor(h) for h in heads}:
                problems.append("README.md links to %s#%s: no such heading there" % (path, anchor))
    # The README's commands are the quick starts' (whose marked blocks are
    # run or checked): each command line of its sh blocks is in one of them.
    import blocks
    marked = set()
    for page in sorted((ROOT / "docs/quickstart").glob("*.md")):
        for b in blocks.parse(page.relative_to(ROOT).as_posix()):
            if any(c in b.classes for c in ("kolo-run", "kolo-ci")):
                marked |= set(blocks.commands(b.body))
    for body in re.findall(r"^```sh\n(.*?)^```", readme, re.M | re.S):
        for cmd in blocks.commands(body):
            if cmd not in marked:
                problems.append("README.md runs %r, which no quick start's kolo-run or kolo-ci "
                                "block has (docs/quickstart/*.md)" % cmd)
    for p in problems:
        print("readme: " + p, file=sys.stderr)
    print("readme: %d relative links checked, %d broken"
          % (len([t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"[a-z]+:", t)]),
             len(problems)))
    return 1 if problems else 0


def check_kolorun_flags(html):
    help_text = kolo_source.kolorun_help()
    page = pathlib.Path(html).read_text()
    defined = []
    src = (ROOT / "launcher/options.cc").read_text()
    for spec in re.findall(r"add_(?:option|flag)\(\s*\"([^\"]+)\"", src):
        defined += [n if n.startswith("-") else "--" + n for n in spec.split(",") if n]
    problems = []
    for flag in defined:
        if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), help_text):
            problems.append("%s is defined in launcher/options.cc but not in kolorun --help" % flag)
    for flag in kolo_source.kolorun_flags(help_text):
        if flag not in page:
            problems.append("%s is in kolorun --help but not on %s" % (flag, html))
    for p in problems:
        print("kolorun: " + p, file=sys.stderr)
    print("kolorun: %d flags defined, %d on the reference page, %d missing"
          % (len(defined), len(kolo_source.kolorun_flags(help_text)), len(problems)))
    return 1 if problems else 0


def check_environment(html):
    page = pathlib.Path(html).read_text()
    problems = kolo_source.env_mismatches()
    code = kolo_source.scan_variables()
    for name in sorted(code):
        if name not in page:
            problems.append("%s is read by %s but not on %s" % (name, ", ".join(code[name]), html))
    for p in problems:
        print("environment: " + p, file=sys.stderr)
    print("environment: %d KOLO_* variables in the code, %d missing from the reference"
          % (len(code), len(problems)))
    return 1 if problems else 0


def check_version(html):
    want = kolo_source.version()
    if ("kolo %s" % want) not in pathlib.Path(html).read_text():
        print("version: %s does not show kolo %s (VERSION)" % (html, want), file=sys.stderr)
        return 1
    print("version: the docs show kolo %s" % want)
    return 0


# The files whose measured figures must say where they come from, and the
# marker that opens each one's results part (it runs to the end of the file).
BENCHMARK_FILES = ("docs/benchmarks.md", "benchmarks/README.md")
RESULTS_MARKER = "<!-- benchmark-sources:"
PROVENANCE_REACH = 2  # blocks; see check_benchmark_sources
_FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ns|us|µs|ms|s|min|GB/s|MB/s|%)(?![\w/])"  # with a unit
    r"|(?<![\w.])\d+\.\d+(?![\w.])")                                              # a ratio
_COMMIT = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
# After "Measured at" or "commit" a hash counts even when it has no letter.
_MEASURED_AT = re.compile(r"[Mm]easured at (?:commit )?([0-9a-f]{7,40})(?![\w-])")
_COMMIT_WORD = re.compile(r"\bcommit ([0-9a-f]{7,40})(?![\w-])")
_TREE_PATH = re.compile(r"(?<![\w./-])(?:benchmarks|scripts|examples)/[\w./-]*\w")


def _results_blocks(text):
    """The results part of a page (from RESULTS_MARKER on) as (line, kind,
    text) blocks: runs of non-blank lines, a fenced code block whole, a
    heading alone; HTML comments dropped."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith(RESULTS_MARKER)), None)
    if start is None:
        return None
    blocks, cur, fence, comment = [], [], None, False
    for n, line in enumerate(lines[start:], start + 1):
        if comment or (fence is None and line.lstrip().startswith("<!--")):
            comment = "-->" not in line
            continue
        if fence is not None:
            cur[1].append(line)
            if line.strip().startswith(fence):
                blocks.append((cur[0], "code", cur[1]))
                cur, fence = [], None
            continue
        if line.startswith(("```", "~~~")):
            if cur:
                blocks.append((cur[0], "text", cur[1]))
            cur, fence = [n, [line]], line[:3]
        elif not line.strip() or re.match(r"#+\s", line) or re.match(r"\(\S+\)=$", line):
            if cur:
                blocks.append((cur[0], "text", cur[1]))
            cur = []
            if re.match(r"#+\s", line):
                blocks.append((n, "heading", [line]))
        elif cur:
            cur[1].append(line)
        else:
            cur = [n, [line]]
    if cur:
        blocks.append((cur[0], "code" if fence else "text", cur[1]))
    return blocks


def _figures(kind, lines):
    text = "\n".join(lines)
    # Options and settings are not measurements: `--seconds 0.2`,
    # KOLO_CYCLE_TIME=0.5, and (in prose) whatever is in a code span.
    text = re.sub(r"--[\w-]+[ =]\S+|\b[A-Z_]+=\S+", " ", text)
    if kind == "text":
        text = re.sub(r"`[^`]*`", " ", text)
    return _FIGURE.findall(text)


def check_benchmark_sources():
    """Every measured figure in the results part of docs/benchmarks.md and
    benchmarks/README.md says where it comes from.

    The results part of each file runs from its line starting with
    `<!-- benchmark-sources:` to the end of the file. It is cut into blocks:
    runs of non-blank lines (a paragraph, a table, a whole list), a fenced
    code block, a heading. A block has a figure when it holds a number with
    a unit of time, bandwidth or percent (12.0 us, 3.9 GB/s, +16.9 %) or a
    decimal number (a ratio: 0.52); command-line options (--seconds 0.2),
    VAR=value settings and, in prose, `code spans` do not count. A
    provenance block holds "Measured at <commit>" (7 to 40 lowercase hex
    digits) and a path under benchmarks/, scripts/ or examples/ that exists
    in the tree (the program that reproduces the figure); by convention it
    also gives the command in a code span. Every block with a figure must
    be a provenance block or lie at most PROVENANCE_REACH blocks from one,
    with no heading in between.

    Every commit named anywhere in those files must exist (git cat-file -e
    HASH^{commit}). A commit is a word of 7 to 40 lowercase hex digits with
    at least one a-f and one 0-9, or any such word right after "Measured
    at" or "commit". That part is skipped, with a notice, outside a git
    checkout or in a shallow clone.
    """
    problems = []
    commits = {}  # hash -> the files that name it
    for rel in BENCHMARK_FILES:
        text = (ROOT / rel).read_text()
        for pattern in (_COMMIT, _MEASURED_AT, _COMMIT_WORD):
            for c in pattern.findall(text):
                commits.setdefault(c, set()).add(rel)
        blocks = _results_blocks(text)
        if blocks is None:
            problems.append("%s has no results marker (a line starting %r)" % (rel, RESULTS_MARKER))
            continue
        sources = {}
        for i, (line, kind, body) in enumerate(blocks):
            joined = "\n".join(body)
            if kind != "text" or not _MEASURED_AT.search(joined):
                continue
            paths = sorted({p.rstrip(".") for p in _TREE_PATH.findall(joined)})
            missing = [p for p in paths if not (ROOT / p).exists()]
            for p in missing:
                problems.append("%s:%d: the provenance names %s, which is not in the tree"
                                % (rel, line, p))
            if len(paths) > len(missing):
                sources[i] = line
            elif not paths:
                problems.append("%s:%d: the provenance names no program (a path under benchmarks/, "
                                "scripts/ or examples/)" % (rel, line))
        headings = [i for i, b in enumerate(blocks) if b[1] == "heading"]
        for i, (line, kind, body) in enumerate(blocks):
            figures = kind != "heading" and _figures(kind, body)
            if not figures:
                continue
            near = [j for j in sources if abs(j - i) <= PROVENANCE_REACH and
                    not any(min(i, j) < h < max(i, j) for h in headings)]
            if not near:
                shown = ", ".join(" ".join(f.split()) for f in figures[:3])
                problems.append("%s:%d: figures (%s) with no \"Measured at <commit> ... "
                                "<program>\" block within %d blocks under the same heading"
                                % (rel, line, shown, PROVENANCE_REACH))
    checked = len(commits)
    if not (ROOT / ".git").exists() or not shutil.which("git"):
        print("benchmark-sources: no git checkout here: the %d named commits were not looked up"
              % checked)
        checked = 0
    elif subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                        capture_output=True, text=True).stdout.strip() == "true":
        print("benchmark-sources: a shallow clone: the %d named commits were not looked up"
              % checked)
        checked = 0
    else:
        for c in sorted(commits):
            found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", c + "^{commit}"],
                                   capture_output=True)
            if found.returncode != 0:
                problems.append("%s: names commit %s, which this repository does not have"
                                % (" and ".join(sorted(commits[c])), c))
    for p in problems:
        print("benchmark-sources: " + p, file=sys.stderr)
    print("benchmark-sources: %s; %d commits looked up, %d problems"
          % (", ".join(BENCHMARK_FILES), checked, len(problems)))
    return 1 if problems else 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[0], argv[1:]
    if cmd == "docstrings":
        return check_docstrings(args or PUBLIC_MODULES + OPTIONAL_MODULES)
    if cmd == "doxygen":
        return check_doxygen(args[0])
    if cmd == "readme-links":
        return check_readme_links()
    if cmd == "kolorun-flags":
        return check_kolorun_flags(args[0])
    if cmd == "environment":
        return check_environment(args[0])
    if cmd == "version":
        return check_version(args[0])
    if cmd == "benchmark-sources":
        return check_benchmark_sources()
    print("unknown check %r\n%s" % (cmd, __doc__), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
