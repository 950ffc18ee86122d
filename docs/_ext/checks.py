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
"""
import importlib
import inspect
import pathlib
import re
import sys
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
            raise
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
    print("unknown check %r\n%s" % (cmd, __doc__), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
