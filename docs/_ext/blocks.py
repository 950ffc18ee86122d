#!/usr/bin/env python3
"""The code blocks of the quick starts, checked and run.

Pages mark their code blocks with MyST's ``{code-block}`` directive and a
class (the marking convention; docs/developers pages and CONTRIBUTING.md
describe it too):

``:class: kolo-run``
    Shell commands a reader types. Run by ``blocks.py run`` (scripts/docs.sh
    runs every such block of a page in order, in one bash with ``set -euo
    pipefail``, from the repository root, with HOME a scratch folder and
    build/default's ``kolorun`` and ``kolo`` first on PATH and PYTHONPATH).
    A block with ``:name: ID`` that a CI script runs itself (``blocks.py run
    PAGE --name ID``, e.g. after an install) is left to that script. A
    command that is CI's entry point (what ``.ci/run`` runs, i.e.
    scripts/test.sh) is not run again: CI is running it.
``:class: kolo-ci``
    Shell commands CI runs elsewhere, too costly or needing the network to
    run twice. Each command must be a line of a script CI runs (.ci/run,
    scripts/*.sh, tests/**/*.sh; ``exec`` and a trailing ``"$@"`` aside), or
    the block has ``:name: ID`` and such a script says ``docs-block: ID``
    beside the commands that do the same.
``:class: kolo-file`` with ``:caption: PATH``
    A file of this repository, shown whole: the block must equal PATH
    character for character.

    blocks.py check PAGE...          # classes, files, ci commands, every kolo-run block has a runner
    blocks.py run PAGE [--name ID] [--build-dir DIR] [--timeout S]
"""
import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLASSES = ("kolo-run", "kolo-ci", "kolo-file")
# Where a CI script may run a named block itself.
CI_SCRIPTS = ("scripts", "tests", ".ci")

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\{code-block\}[ \t]*(?P<lang>\S*)[ \t]*\n", re.M)


class Block:
    def __init__(self, page, line, lang, options, body):
        self.page, self.line, self.lang, self.options, self.body = page, line, lang, options, body

    @property
    def classes(self):
        return self.options.get("class", "").split()

    @property
    def name(self):
        return self.options.get("name")

    def where(self):
        return "%s:%d" % (self.page, self.line)


def parse(page):
    """Every {code-block} of a MyST page, with its options and text."""
    text = (ROOT / page).read_text()
    blocks = []
    for m in _FENCE.finditer(text):
        fence = m.group("fence")
        end = text.find("\n" + fence + "\n", m.end() - 1)
        if end < 0:
            raise SystemExit("%s: unterminated code block at line %d"
                             % (page, text.count("\n", 0, m.start()) + 1))
        raw = text[m.end():end + 1]
        options = {}
        lines = raw.splitlines(keepends=True)
        while lines and re.match(r"^:[\w-]+:", lines[0]):
            key, _, value = lines.pop(0)[1:].partition(":")
            options[key.strip()] = value.strip()
        if lines and lines[0].strip() == "" and options:
            lines.pop(0)  # the blank line after the options
        blocks.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang"),
                            options, "".join(lines)))
    return blocks


def commands(body):
    """The command lines of a shell block: comments, blank lines and
    trailing comments dropped, continuation lines joined."""
    out, pending = [], ""
    for line in body.splitlines():
        line = pending + line
        pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        stripped = re.sub(r"\s+#\s.*$", "", line).strip()
        if stripped and not stripped.startswith("#"):
            out.append(stripped)
    return out


def runners():
    """{block name: file} for every CI script that runs a named block."""
    found = {}
    for top in CI_SCRIPTS:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in ("", ".sh", ".py", ".txt"):
                try:
                    text = path.read_text()
                except UnicodeDecodeError:
                    continue
                for name in re.findall(r"blocks\.py\"? run \S+ --name ([\w-]+)", text):
                    found[name] = path.relative_to(ROOT).as_posix()
    return found


def _normal(line):
    line = re.sub(r"^exec\s+", "", line.strip())
    return re.sub(r'\s+"\$@"$', "", line)


def ci_entry():
    """The commands .ci/run runs."""
    return {_normal(l) for l in commands((ROOT / ".ci/run").read_text())}


def ci_script_lines():
    """(every command line of the scripts CI runs, the docs-block names they mark)."""
    paths = [ROOT / ".ci/run"] + sorted((ROOT / "scripts").glob("*.sh")) + \
        sorted((ROOT / "tests").rglob("*.sh"))
    lines, markers = set(), set()
    for path in paths:
        text = path.read_text()
        lines |= {_normal(l) for l in commands(text)}
        markers |= set(re.findall(r"docs-block: ([\w-]+)", text))
    return lines, markers


def check(pages):
    problems = []
    named = runners()
    counts = {c: 0 for c in CLASSES}
    for page in pages:
        for b in parse(page):
            marks = [c for c in b.classes if c.startswith("kolo-")]
            for c in marks:
                if c not in CLASSES:
                    problems.append("%s: unknown class %s (known: %s)" % (b.where(), c, ", ".join(CLASSES)))
                else:
                    counts[c] += 1
            if "kolo-file" in marks:
                path = b.options.get("caption")
                if not path or not (ROOT / path).is_file():
                    problems.append("%s: kolo-file block's :caption: %r is not a file of the "
                                    "repository" % (b.where(), path))
                elif (ROOT / path).read_text() != b.body:
                    problems.append("%s: the block differs from %s; copy the file into the page "
                                    "(character for character)" % (b.where(), path))
            if "kolo-ci" in marks:
                script_lines, markers = ci_script_lines()
                if not (b.name and b.name in markers):
                    for cmd in commands(b.body):
                        if cmd not in script_lines:
                            problems.append(
                                "%s: %r is in no script CI runs (.ci/run, scripts/*.sh, "
                                "tests/**/*.sh): run it there, or name the block (:name: ID) "
                                "and put 'docs-block: ID' beside the commands that do the "
                                "same" % (b.where(), cmd))
    for name, path in named.items():
        if not any(b.name == name and "kolo-run" in b.classes for p in pages for b in parse(p)):
            problems.append("%s runs docs block %r, which no page has (a kolo-run block with "
                            ":name: %s)" % (path, name, name))
    return problems, counts


def run(page, name=None, build_dir=None, timeout=600, python=None):
    """Runs the page's kolo-run blocks (or only the one called NAME) in one
    bash; returns its exit status."""
    named = runners()
    chosen = [b for b in parse(page) if "kolo-run" in b.classes and
              (b.name == name if name else b.name not in named)]
    if name and not chosen:
        raise SystemExit("%s has no kolo-run block named %s" % (page, name))
    if not chosen:
        print("blocks: %s has no block to run here" % page)
        return 0
    build_dir = build_dir or str(ROOT / "build/default")
    script = ["set -euo pipefail"]
    entry = ci_entry()
    for b in chosen:
        body = "\n".join(
            ": CI runs this itself, through .ci/run: %s" % l.split("#")[0].strip()
            if _normal(l.split(" #")[0]) in entry else l for l in b.body.splitlines())
        if build_dir != str(ROOT / "build/default"):
            body = body.replace("build/default", build_dir)
        script += ["echo '== %s'" % b.where().replace("'", ""), body]
    with tempfile.TemporaryDirectory(prefix="kolo-docs-blocks.") as home:
        # kolorun from the build, then the Python it was built for (python3).
        path = [build_dir + "/launcher"]
        if python:
            # A wrapper, not a symlink: a venv's interpreter started through
            # a symlink elsewhere does not find its pyvenv.cfg, and runs
            # as the base interpreter (another torch).
            wrapper = os.path.join(home, "python3")
            with open(wrapper, "w") as f:
                f.write('#!/bin/sh\nexec "%s" "$@"\n' % python)
            os.chmod(wrapper, 0o755)
            path.append(home)
        env = dict(os.environ, HOME=home,
                   PATH=":".join(path + [os.environ.get("PATH", "/usr/bin:/bin")]),
                   PYTHONPATH="%s/python" % build_dir, PYTHONDONTWRITEBYTECODE="1")
        env.setdefault("KOLO_TIMEOUT", "120")
        # Its own process group: a timeout ends every process the block
        # started (kolorun and its ranks), not only bash.
        proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=ROOT, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print("blocks: %s did not finish in %d s" % (page, timeout), file=sys.stderr)
            return 124
        done = proc
    if done.returncode != 0:
        print("blocks: a kolo-run block of %s failed (exit %d): the command a reader types "
              "does not work" % (page, done.returncode), file=sys.stderr)
    return done.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("pages", nargs="+")
    r = sub.add_parser("run")
    r.add_argument("page")
    r.add_argument("--name")
    r.add_argument("--build-dir")
    r.add_argument("--timeout", type=int, default=600)
    r.add_argument("--python", help="the interpreter `python3` runs in the blocks")
    args = ap.parse_args()
    if args.cmd == "check":
        problems, counts = check(args.pages)
        for p in problems:
            print("blocks: " + p, file=sys.stderr)
        print("blocks: %s" % ", ".join("%d %s" % (n, c) for c, n in counts.items()))
        return 1 if problems else 0
    return run(args.page, args.name, args.build_dir, args.timeout, args.python)


if __name__ == "__main__":
    sys.exit(main())
