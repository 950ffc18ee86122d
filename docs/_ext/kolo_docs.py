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
``kolo-cpp-headers``
    one Breathe ``doxygenfile`` section per public header.
``kolo-toctree``
    Sphinx's ``toctree`` (always ``:glob:``), minus the entries that match no
    page yet: sections whose pages land in later changes build meanwhile.
``kolo-python-modules``
    ``automodule`` for each module named in its content; a module marked
    ``(optional)`` that is not in this build is left out with a note in
    the build log (it lands with another change).
"""
import importlib.util
import re

from docutils import nodes
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


class CppHeaders(_Generated):
    has_content = False

    def run(self):
        # One page of namespaces (Doxygen's per-file view repeats each
        # namespace once per header, which Sphinx's C++ domain rejects).
        xml_dir = self.config.breathe_projects["kolo"]
        try:
            namespaces = kolo_source.public_namespaces(xml_dir)
        except OSError as e:
            return self.error("no Doxygen XML at %s (%s): scripts/docs.sh runs Doxygen first"
                              % (xml_dir, e))
        # The outermost namespace renders the nested ones (kolo::torch,
        # kolo::elastic, ...) itself.
        lines = []
        for ns in [n for n in namespaces if "::" not in n]:
            lines += ["```{doxygennamespace} %s" % ns,
                      ":project: kolo", ":members:", "```", ""]
        return self.emit(lines, "<kolo-cpp-headers>")


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


def _importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def setup(app):
    app.add_directive("kolo-kolorun-help", KolorunHelp)
    app.add_directive("kolo-environment", Environment)
    app.add_directive("kolo-cpp-headers", CppHeaders)
    app.add_directive("kolo-python-modules", PythonModules)
    app.add_directive("kolo-toctree", GlobToctree)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
