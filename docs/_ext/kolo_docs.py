"""Sphinx directives that generate kolo's reference pages from the code, so
they cannot drift from it:

``kolo-kolorun-help``
    the output of ``kolorun --help`` (the binary at $KOLO_KOLORUN, default
    build/default/launcher/kolorun), with one anchor per flag
    (``kolorun-<flag>``, e.g. ``kolorun-num-proc``; link with
    ``[](#kolorun-num-proc)`` from reference/kolorun or
    ``{ref}`kolorun-num-proc``` from anywhere).
``kolo-environment``
    every KOLO_* variable the code reads (scanned from the source), with the
    values Config accepts (from config.cc) and the default and meaning from
    docs/reference/environment.toml; a variable on one side only is an error.
    One anchor per variable (``env-kolo-timeout``).
``kolo-cpp-header``
    the C++ reference of one public header (argument: its include path,
    ``kolo/engine.h``) from Doxygen's XML: one Breathe directive per
    documented entity Doxygen places in that header (``doxygenclass``,
    ``doxygenfunction`` with the parameters where a name is overloaded,
    ...), grouped by kind, in the header's order. ``:only:`` or
    ``:exclude:`` (qualified names) split a large header over several
    pages. Each entity is declared in one header, so it is declared once on
    the site (Sphinx's C++ domain rejects a second declaration); one that no
    page renders (a new header, a name left out) fails the build.
``kolo-cpp-namespaces``
    each public namespace once (its description; the pages above name
    members by qualified name, whose qualifiers link there).
``kolo-toctree``
    Sphinx's ``toctree`` (always ``:glob:``), minus the entries that match no
    page yet: sections whose pages land in later changes build meanwhile.
``kolo-python-modules``
    ``automodule`` for each module named in its content; a module marked
    ``(optional)`` that is not in this build is left out with a note in
    the build log (it lands with another change).
"""
import importlib.util
import os
import pathlib
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.directives.other import TocTree
from sphinx.util import logging
from sphinx.util.matching import patfilter
from sphinx.util.docutils import SphinxDirective

import kolo_source

logger = logging.getLogger(__name__)


def _anchor(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class _Generated(SphinxDirective):
    """A directive whose output is Markdown/reST text parsed in place."""

    def emit(self, lines, source):
        # Headings in the text become sections of the page (MyST attaches
        # them to the page's section tree itself); the rest lands in
        # container, returned in place of the directive.
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=source), self.content_offset, container,
                                match_titles=True)
        return container.children

    def error(self, message):
        # A warning (fails the build under -W) at the directive's line.
        logger.warning(message, location=(self.env.docname, self.lineno))
        return []


class KolorunHelp(_Generated):
    has_content = False

    def run(self):
        self.env.note_dependency(kolo_source.kolorun_path())
        try:
            text = kolo_source.kolorun_help()
        except (OSError, RuntimeError) as e:
            return self.error(str(e))
        flags = kolo_source.kolorun_flags(text)
        out = [nodes.literal_block(text, text, language="text")]
        # The flags, each with an anchor of its own (the long name where it
        # has one), in the order --help lists them.
        seen = set()
        items = nodes.bullet_list()
        for line in text.splitlines():
            m = re.match(r"\s{2}((?:-{1,2}[A-Za-z][\w-]*,?\s?)+)(.*)", line)
            if not m:
                continue
            names = re.findall(r"-{1,2}[A-Za-z][\w-]*", m.group(1))
            key = next((n for n in names if n.startswith("--")), names[0])
            label = "kolorun-" + _anchor(key)
            if label in seen:
                continue
            seen.add(label)
            para = nodes.paragraph()
            para += nodes.literal(", ".join(names), ", ".join(names))
            desc = re.sub(r"\s+", " ", m.group(2)).strip()
            if desc:
                para += nodes.Text(" " + desc)
            item = nodes.list_item("", para, ids=[label])
            self.env.app.env.domaindata["std"]["labels"][label] = (
                self.env.docname, label, "kolorun " + key)
            self.env.app.env.domaindata["std"]["anonlabels"][label] = (self.env.docname, label)
            items += item
        if not flags:
            return self.error("kolorun --help lists no flags; has its format changed? "
                              "(docs/_ext/kolo_source.py kolorun_flags)")
        section = nodes.rubric("", "Every flag")
        return out + [section, items]


class Environment(_Generated):
    has_content = False

    def run(self):
        for rel in (kolo_source.ENV_TABLE, kolo_source.CONFIG_CC):
            self.env.note_dependency(str(kolo_source.ROOT / rel))
        problems = kolo_source.env_mismatches()
        for p in problems:
            self.error(p)
        code = kolo_source.scan_variables()
        accepted = kolo_source.config_accepted()
        table = kolo_source.env_table()
        lines = []
        for section in table["section"]:
            lines += ["(%s)=" % section["anchor"], "## " + section["title"], ""]
            lines += section["intro"].strip().splitlines() + [""]
            for var in section["variable"]:
                name = var["name"]
                lines += ["(env-%s)=" % _anchor(name), "### `%s`" % name, ""]
                lines += [var["meaning"], ""]
                lines += ["- Default: %s" % var["default"]]
                if name in accepted:
                    lines += ["- Accepted: %s" % _code_list(accepted[name])]
                files = code.get(name, [])
                if files:
                    lines += ["- Read or set in: " + ", ".join("`%s`" % f for f in files)]
                lines += [""]
        return self.emit(lines, "<kolo-environment>")


def _code_list(text):
    if text == "any string":
        return text
    return "`%s`" % text


# The kinds of declaration a header's page lists, in the page's order:
# (section title, Breathe directive per Doxygen kind).
_CPP_SECTIONS = [
    ("Classes", {"class": "doxygenclass", "struct": "doxygenstruct"}),
    ("Functions", {"function": "doxygenfunction"}),
    ("Enumerations", {"enum": "doxygenenum"}),
    ("Type aliases", {"typedef": "doxygentypedef"}),
    ("Constants", {"variable": "doxygenvariable"}),
    ("Macros", {"define": "doxygendefine"}),
]
# The role that links to each kind (a section starts with links to its
# entries: the page's table of contents lists headings only).
_CPP_ROLES = {"class": "cpp:class", "struct": "cpp:struct", "function": "cpp:func",
              "enum": "cpp:enum", "typedef": "cpp:type", "variable": "cpp:var",
              "define": "c:macro"}


_cpp_cache = {}


def cpp_declarations(xml_dir):
    """_cpp_declarations(xml_dir), read once per version of the XML."""
    key = (xml_dir, os.stat(os.path.join(xml_dir, "index.xml")).st_mtime_ns)
    if key not in _cpp_cache:
        _cpp_cache.clear()
        _cpp_cache[key] = _cpp_declarations(xml_dir)
    return _cpp_cache[key]


def _cpp_declarations(xml_dir):
    """{header: [(kind, line, name, args)]}: the documented entities of each
    public header, as Doxygen's XML in xml_dir places them. header is the
    include path ("kolo/engine.h", "kolo/torch/optimizer.h"); args is the
    parameter list where a function's name is overloaded in its namespace
    (doxygenfunction needs it to pick one), else "". Classes nested in a
    class are rendered by their enclosing class and not listed; neither is
    what is internal (detail namespaces, macros the header #undefs again)."""
    import xml.etree.ElementTree as ET

    def header_of(location):
        path = (location.get("file") or "").replace("\\", "/")
        m = re.search(r"(?:^|/)include/(kolo/.+\.h)$", path)
        return (m.group(1), path) if m else (None, path)

    def public(name):
        return "detail" not in name.split("::")

    index = ET.parse(os.path.join(xml_dir, "index.xml")).getroot()
    compounds = [(c.get("kind"), c.findtext("name"), c.get("refid"))
                 for c in index.findall("compound")]
    class_names = {name for kind, name, _ in compounds if kind in ("class", "struct", "union")}
    found = {}
    functions = []  # (header, line, qualified name, args): args decided below

    for kind, name, refid in compounds:
        if kind not in ("class", "struct", "namespace", "file"):
            continue
        if kind != "file" and (name.split("::")[0] != "kolo" or not public(name)):
            continue
        compound = ET.parse(os.path.join(xml_dir, refid + ".xml")).getroot().find("compounddef")
        if kind in ("class", "struct"):
            if name.rpartition("::")[0] in class_names or compound.get("prot", "public") != "public":
                continue  # nested (its enclosing class renders it) or private
            location = compound.find("location")
            header, _ = header_of(location) if location is not None else (None, "")
            if header:
                found.setdefault(header, []).append((kind, int(location.get("line", 0)), name, ""))
            continue
        for member in compound.iter("memberdef"):
            mkind = member.get("kind")
            location = member.find("location")
            if location is None:
                continue
            header, path = header_of(location)
            if not header:
                continue
            line = int(location.get("line", 0))
            if kind == "file":
                if mkind != "define":
                    continue  # namespace members: listed under their namespace
                mname = member.findtext("name")
                source = kolo_source.ROOT / path
                if source.is_file() and re.search(r"^\s*#\s*undef\s+%s\b" % re.escape(mname),
                                                  source.read_text(), re.M):
                    continue  # a helper the header undefines again
                found.setdefault(header, []).append((mkind, line, mname, ""))
                continue
            if mkind not in ("function", "enum", "typedef", "variable"):
                continue
            qualified = "%s::%s" % (name, member.findtext("name"))
            if mkind == "function":
                functions.append((header, line, qualified, member.findtext("argsstring") or ""))
            else:
                found.setdefault(header, []).append((mkind, line, qualified, ""))

    overloads = {}
    for _, _, qualified, _ in functions:
        overloads[qualified] = overloads.get(qualified, 0) + 1
    for header, line, qualified, args in functions:
        if overloads[qualified] > 1:
            # The parameter list alone: no trailing return type, const, ...
            args = args[:_closing_paren(args) + 1] if args.startswith("(") else args
        else:
            args = ""
        found.setdefault(header, []).append(("function", line, qualified, args))
    for entries in found.values():
        entries.sort(key=lambda e: e[1])
    return found


def _closing_paren(text):
    """Index of the parenthesis that closes text's first one."""
    depth = 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def _cpp_xml_dir(config):
    return config.breathe_projects["kolo"]


class CppHeader(_Generated):
    has_content = False
    required_arguments = 1
    option_spec = {"only": directives.unchanged, "exclude": directives.unchanged}

    def run(self):
        header = self.arguments[0].strip()
        xml_dir = _cpp_xml_dir(self.config)
        try:
            declarations = cpp_declarations(xml_dir)
        except OSError as e:
            return self.error("no Doxygen XML at %s (%s): scripts/docs.sh runs Doxygen first"
                              % (xml_dir, e))
        # Read again when Doxygen ran again (scripts/docs.sh runs it each time).
        self.env.note_dependency(os.path.join(xml_dir, "index.xml"))
        entries = declarations.get(header)
        if not entries:
            return self.error("kolo-cpp-header: Doxygen documents nothing in %r (public "
                              "headers: %s)" % (header, ", ".join(sorted(declarations))))
        # :only: / :exclude: (qualified names, all overloads of each) split a
        # large header over several pages.
        names = {e[2] for e in entries}
        only = self.options.get("only", "").split()
        exclude = self.options.get("exclude", "").split()
        for name in only + exclude:
            if name not in names:
                self.error("kolo-cpp-header: %s declares no %s" % (header, name))
        entries = [e for e in entries
                   if (not only or e[2] in only) and e[2] not in exclude]
        rendered = self.env.__dict__.setdefault("kolo_cpp_rendered", {})
        for _, _, name, args in entries:
            rendered.setdefault((header, name + args), set()).add(self.env.docname)
        lines = []
        for title, kinds in _CPP_SECTIONS:
            picked = [e for e in entries if e[0] in kinds]
            if not picked:
                continue
            lines += ["## " + title, ""]
            links = []
            for kind, _, name, _ in picked:
                link = "{%s}`%s <%s>`" % (_CPP_ROLES[kind], name.rpartition("::")[2], name)
                if link not in links:
                    links.append(link)  # overloads: one link
            lines += [" · ".join(links), ""]
            for kind, _, name, args in picked:
                lines += ["```{%s} %s%s" % (kinds[kind], name, args), ":project: kolo"]
                if kind in ("class", "struct"):
                    lines += [":members:"]
                lines += ["```", ""]
        return self.emit(lines, "<kolo-cpp-header %s>" % header)


class CppNamespaces(_Generated):
    has_content = False

    def run(self):
        # Each namespace once, description only: the pages of the headers
        # declare their members by qualified name (kolo::torch::allreduce),
        # whose qualifiers link here.
        xml_dir = _cpp_xml_dir(self.config)
        try:
            namespaces = kolo_source.public_namespaces(xml_dir)
        except OSError as e:
            return self.error("no Doxygen XML at %s (%s): scripts/docs.sh runs Doxygen first"
                              % (xml_dir, e))
        self.env.note_dependency(os.path.join(xml_dir, "index.xml"))
        lines = []
        for ns in sorted(namespaces):
            lines += ["### `%s`" % ns, "", "```{doxygennamespace} %s" % ns, ":project: kolo",
                      ":desc-only:", "```", ""]
        return self.emit(lines, "<kolo-cpp-namespaces>")


def _cpp_purge(app, env, docname):
    for pages in getattr(env, "kolo_cpp_rendered", {}).values():
        pages.discard(docname)


def _cpp_merge(app, env, docnames, other):
    mine = env.__dict__.setdefault("kolo_cpp_rendered", {})
    for key, pages in getattr(other, "kolo_cpp_rendered", {}).items():
        mine.setdefault(key, set()).update(pages)


def _cpp_check(app, env):
    """Every documented declaration of every public header is on exactly one
    page (kolo-cpp-header): a new header or class cannot drop out of the
    reference unnoticed."""
    rendered = getattr(env, "kolo_cpp_rendered", {})
    if not any(rendered.values()):
        return  # no C++ reference in this build (a partial one)
    try:
        declarations = cpp_declarations(_cpp_xml_dir(app.config))
    except OSError:
        return  # reported by the directives
    for header, entries in sorted(declarations.items()):
        missing = [e[2] + e[3] for e in entries if not rendered.get((header, e[2] + e[3]))]
        if len(missing) == len(entries):
            logger.warning("kolo docs: no page of the C++ reference renders %s: add "
                           "docs/reference/cpp/<page>.md with a kolo-cpp-header directive "
                           "for it and list the page in docs/reference/cpp.md" % header)
        elif missing:
            logger.warning("kolo docs: no page of the C++ reference renders %s of %s (a "
                           "kolo-cpp-header directive's :only: or :exclude: leaves it out)"
                           % (", ".join(missing), header))


class PythonModules(_Generated):
    has_content = True

    def run(self):
        lines = []
        seen = {}  # id(object) -> the module that documents it
        for entry in self.content:
            entry = entry.strip()
            if not entry:
                continue
            optional = entry.endswith("(optional)")
            module = entry.replace("(optional)", "").strip()
            if optional and not _importable(module):
                logger.info("kolo docs: %s is not in this build; its reference is left out",
                            module)
                continue
            # autodoc writes reST: parsed as such inside eval-rst. Names a
            # package re-exports (kolo.torch's from its submodules and the
            # C++ module) are its API: imported-members. An object already
            # documented under an earlier module (kolo.torch.elastic's
            # HostsUpdatedInterrupt is kolo.torch's) is not repeated.
            repeated = []
            for name, obj in self._public(module):
                if id(obj) in seen:
                    repeated.append(name)
                else:
                    seen[id(obj)] = module
            lines += ["## `%s`" % module, "", "```{eval-rst}",
                      ".. automodule:: %s" % module, "   :members:", "   :undoc-members:",
                      "   :imported-members:", "   :show-inheritance:"]
            if repeated:
                lines += ["   :exclude-members: " + ", ".join(sorted(repeated))]
            lines += ["```", ""]
        return self.emit(lines, "<kolo-python-modules>")

    def _public(self, module):
        """(name, object) of the module's documented classes and functions."""
        from sphinx.ext.autodoc.mock import mock
        import inspect
        with mock(self.config.autodoc_mock_imports):
            mod = importlib.import_module(module)
            names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
            out = []
            for n in names:
                obj = getattr(mod, n, None)
                if inspect.isclass(obj) or inspect.isroutine(obj):
                    out.append((n, obj))
        return out


class GlobToctree(TocTree):
    def run(self):
        self.options["glob"] = None
        kept = []
        left = set(self.env.found_docs) - {self.env.docname}
        for entry in self.content:
            name = entry.strip()
            if not name:
                continue
            # Entries are relative to the root (index.md is the only user);
            # a glob takes only pages no earlier entry took.
            matches = patfilter(left, name)
            if matches:
                kept.append(name)
                left -= set(matches)
            else:
                logger.info("kolo docs: no page matches %r yet (%s)", name, self.env.docname)
        self.content = StringList(kept, source=self.content.source(0) if self.content else "")
        return super().run()


class CoreLayers(_Generated):
    """The core's folders as layers, drawn from scripts/layering-check.py's
    LAYERS (the list the check enforces), so the picture cannot drift."""

    has_content = False

    def run(self):
        from sphinx.ext.graphviz import graphviz

        path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "layering-check.py"
        self.env.note_dependency(str(path))
        spec = importlib.util.spec_from_file_location("kolo_layering_check", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            layers = list(module.LAYERS)
        except (OSError, AttributeError, SyntaxError) as e:
            return self.error("cannot read the layers from %s: %s" % (path, e))
        # Comments beside each name in LAYERS say what the folder holds.
        notes = dict(re.findall(r'^\s*"(\w+)",\s*#\s*(.*)$', path.read_text(), re.M))
        lines = ["digraph layers {", "  rankdir=BT; node [shape=box, fontsize=11];",
                 '  public [label="core/include/kolo\\npublic headers", style=dashed];']
        below = "public"
        for name in layers:
            label = "%s/\\n%s" % (name, notes.get(name, "")) if name in notes else name + "/"
            lines.append('  "%s" [label="%s"];' % (name, label.replace('"', "'")))
            lines.append('  "%s" -> "%s";' % (name, below))
            below = name
        lines.append('  adapters [label="adapters/ and bindings/\\n(torch, Python)", style=dashed];')
        lines.append('  adapters -> "%s";' % below)
        lines.append("}")
        node = graphviz()
        node["code"] = "\n".join(lines)
        node["options"] = {"docname": self.env.docname}
        node["alt"] = "the core's layers, bottom to top: " + ", ".join(layers)
        return [node]


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def setup(app):
    app.add_directive("kolo-kolorun-help", KolorunHelp)
    app.add_directive("kolo-environment", Environment)
    app.add_directive("kolo-cpp-header", CppHeader)
    app.add_directive("kolo-cpp-namespaces", CppNamespaces)
    app.connect("env-purge-doc", _cpp_purge)
    app.connect("env-merge-info", _cpp_merge)
    app.connect("env-check-consistency", _cpp_check)
    app.add_directive("kolo-python-modules", PythonModules)
    app.add_directive("kolo-toctree", GlobToctree)
    app.add_directive("kolo-core-layers", CoreLayers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
