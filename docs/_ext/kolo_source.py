"""What the docs generate from kolo's source tree, shared by the Sphinx
extension (kolo_docs.py) and the checks (checks.py): the KOLO_* variables
the code reads, what Config accepts for each, kolorun's flags, and the
public headers.

Nothing here imports kolo; it reads files and runs `kolorun --help`.
"""
import os
import pathlib
import re
import subprocess
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Where KOLO_* variables are read or set: a variable counts when it appears
# as a whole string literal ("KOLO_X" or 'KOLO_X') in the library, the
# launcher or the bindings, or as $KOLO_X / ${KOLO_X in an example script.
# Messages that mention a variable ("KOLO_GPU_OPERATIONS=gloo") are not
# whole literals and do not count.
_LITERAL_DIRS = ("core/src", "launcher", "bindings", "examples", "tools")
_LITERAL_SUFFIXES = {".cc", ".h", ".cu", ".py"}
_LITERAL = re.compile(r"""["'](KOLO_[A-Z0-9_]+)["']""")
_SHELL = re.compile(r"\$\{?(KOLO_[A-Z0-9_]+)")
CONFIG_CC = "core/src/common/config.cc"
ENV_TABLE = "docs/reference/environment.toml"


def read(rel):
    return (ROOT / rel).read_text()


def scan_variables():
    """{name: sorted list of files (relative to the root) that read or set it}."""
    found = {}
    for top in _LITERAL_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file():
                continue
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in _LITERAL_SUFFIXES:
                names = _LITERAL.findall(path.read_text(errors="replace"))
            elif path.suffix == ".sh" and top == "examples":
                names = _SHELL.findall(path.read_text(errors="replace"))
            else:
                continue
            for name in names:
                found.setdefault(name, set()).add(rel)
    return {k: sorted(v) for k, v in found.items()}


_PARSE_BOOL = "1/0, true/false, yes/no or on/off"
_PARSE_AUTO = "auto, 1/0, true/false, yes/no or on/off"


def config_accepted():
    """{name: accepted values} for every variable Config::fromEnv reads, taken
    from the parse call in config.cc (the same text its error message shows)."""
    src = read(CONFIG_CC)
    body = src[src.index("Config Config::fromEnv"):]
    accepted = {}
    # Each variable's statement runs from its env("...") to the next one.
    starts = [(m.start(), m.group(1)) for m in
              re.finditer(r'(?:env\(|reader\.get\(|parseAuto\((?:env|reader),\s*)'
                          r'"(KOLO_[A-Z0-9_]+)"', body)]
    for i, (pos, name) in enumerate(starts):
        if name in accepted:
            continue
        end = starts[i + 1][0] if i + 1 < len(starts) else len(body)
        stmt = body[pos:end]
        m = re.search(r'parse(?:Int|Number)\([^;]*?"([^"]+)"\s*\)', stmt, re.S)
        if m:
            accepted[name] = m.group(1)
        elif re.search(r'parse(?:Choice|Backend)\(', stmt):
            choices = re.search(r'parse(?:Choice|Backend)\([^{]*\{([^}]*)\}', stmt, re.S)
            accepted[name] = " | ".join(re.findall(r'"([^"]+)"', choices.group(1)))
        elif re.search(r'parseLogLevel\(', stmt):
            accepted[name] = "trace | debug | info | warning | error | off"
        elif re.search(r'parse(?:Bool|Switch)\(', stmt):
            accepted[name] = _PARSE_BOOL
        elif stmt.startswith("parseAuto"):
            accepted[name] = _PARSE_AUTO
        elif re.search(r"=\s*(?:\*v|v->value)\s*;", stmt):
            accepted[name] = "any string"
        else:
            raise ValueError("%s: cannot tell how %s reads %s; extend "
                             "docs/_ext/kolo_source.py config_accepted()" % (CONFIG_CC, name, name))
    return accepted


def env_table():
    """The hand-written half of the environment reference: default and
    meaning per variable, grouped in sections (docs/reference/environment.toml)."""
    with open(ROOT / ENV_TABLE, "rb") as f:
        return tomllib.load(f)


def env_mismatches():
    """Differences between the variables the code reads and the table, each a
    message naming the variable and what to do; empty when they agree."""
    code = scan_variables()
    table = env_table()
    documented = {v["name"] for s in table["section"] for v in s["variable"]}
    problems = []
    for name in sorted(set(code) - documented):
        problems.append("%s is read in %s but not documented: add it to %s"
                        % (name, ", ".join(code[name]), ENV_TABLE))
    for name in sorted(documented - set(code)):
        problems.append("%s is documented in %s but no code reads it: remove it"
                        % (name, ENV_TABLE))
    return problems


def kolorun_path():
    """The kolorun binary the reference is generated from: $KOLO_KOLORUN, or
    build/default's."""
    return os.environ.get("KOLO_KOLORUN", str(ROOT / "build/default/launcher/kolorun"))


def kolorun_help():
    exe = kolorun_path()
    if not os.access(exe, os.X_OK):
        raise FileNotFoundError(
            "kolorun not found at %s: build it (cmake --build --preset default --target "
            "kolorun) or set KOLO_KOLORUN to its path" % exe)
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s --help failed (%d): %s" % (exe, out.returncode, out.stderr))
    return out.stdout


def kolorun_flags(help_text):
    """Every long flag (--name) and short flag (-x, -np) in the options part
    of kolorun --help, in order of first appearance."""
    flags = []
    for line in help_text.splitlines():
        m = re.match(r"\s{2}((?:-{1,2}[A-Za-z][\w-]*,?\s?)+)", line)
        if not m:
            continue
        for flag in re.findall(r"-{1,2}[A-Za-z][\w-]*", m.group(1)):
            if flag not in flags:
                flags.append(flag)
    return flags


HEADER_DIRS = ("core/include/kolo", "adapters/torch/include/kolo")


def public_headers():
    """Public headers as a user includes them (kolo/engine.h), as Doxygen
    sees them (docs/Doxyfile: build_config.h is generated, not API)."""
    out = []
    for d in HEADER_DIRS:
        for p in sorted((ROOT / d).rglob("*.h")):
            out.append(p.relative_to((ROOT / d).parent).as_posix())
    return out


def public_namespaces(xml_dir):
    """The namespaces of the public headers, as Doxygen's XML index lists
    them, outermost first, without implementation-detail ones (`detail`)."""
    import xml.etree.ElementTree as ET
    index = ET.parse(os.path.join(xml_dir, "index.xml")).getroot()
    found = [c.findtext("name") for c in index.findall("compound") if c.get("kind") == "namespace"]
    found = [n for n in found if n.split("::")[0] == "kolo" and "detail" not in n.split("::")]
    return sorted(found, key=lambda n: (n.count("::"), n))


def version():
    return read("VERSION").strip()
