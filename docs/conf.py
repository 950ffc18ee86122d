"""Sphinx configuration of kolo's documentation (built by scripts/docs.sh).

The reference pages are generated from the code (docs/_ext/kolo_docs.py):
the C++ API from Doxygen's XML of the public headers (through Breathe), the
Python API from docstrings (autodoc: needs the built module, build/default's
by default, or $KOLO_PYTHONPATH), kolorun's flags from `kolorun --help`, and
the KOLO_* variables from the source that reads them.
"""
import os
import pathlib
import sys

_docs = pathlib.Path(__file__).resolve().parent
_root = _docs.parent
sys.path.insert(0, str(_docs / "_ext"))
sys.path.insert(0, os.environ.get("KOLO_PYTHONPATH", str(_root / "build/default/python")))

project = "kolo"
author = "the kolo authors"
copyright = "the kolo authors; Apache License 2.0"
# The one version (VERSION at the root), as kolorun, kolo.__version__ and the
# CMake package have it.
release = version = (_root / "VERSION").read_text().strip()

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "breathe",
    "kolo_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Doxyfile", "**/*.toml"]

# MyST: headings up to level 4 get GitHub-style anchors (`#my-heading`), so
# [text](page.md#my-heading) links are checked like any reference.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
myst_substitutions = {"version": release}

# Every reference must resolve. Names from other projects (torch, ray, the
# standard libraries) have no inventory here (no network in CI): ignored.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|ray|numpy|typing|collections|concurrent|contextlib|abc)(\..*)?"),
    (r"py:.*", r"(Any|Optional|Union|List|Dict|Tuple|Callable|Sequence|Iterable|Mapping)(\[.*)?"),
    (r"py:class", r"(int|float|str|bool|bytes|object|list|dict|tuple|callable|None|optional)"),
    # pybind11's base class; torch.nn.Module as autodoc abbreviates a base.
    (r"py:class", r"(pybind11_builtins\..*|Module)"),
    # The types of Compression.none/fp16/bf16 (horovod.torch's Compressor
    # classes), which are not API of their own.
    (r"py:class", r"kolo\.torch\.compression\.\w+Compressor"),
    (r"cpp:identifier", r"(::)?(std|torch|at|c10|c10d|gloo|ncclComm_t|cudaStream_t|int\d+_t|uint\d+_t|size_t)(::.*|<.*)?"),
    # kolo's implementation details, named in public headers' private parts.
    (r"cpp:identifier", r"(detail|detail::.*|Impl|HandleState)"),
    # The device runtime seam Config::deviceRuntime points to: internal
    # (docs/developers/device-runtime.md), only tests set it.
    (r"cpp:identifier", r"device::Runtime"),
    # The standard library's types (no intersphinx: the build is offline),
    # and the handle type sparse_allreduce_async returns (not exported).
    (r"py:class", r"(os\.PathLike|SparseHandle)"),
]

autodoc_mock_imports = []
try:
    import ray  # noqa: F401
except ImportError:
    # kolo.ray imports Ray at import time; without Ray the API pages are
    # generated against Sphinx's stand-in module (docstrings only).
    autodoc_mock_imports.append("ray")
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

breathe_projects = {"kolo": os.environ.get("KOLO_DOXYGEN_XML", str(_root / "build/docs/doxygen/xml"))}
breathe_default_project = "kolo"
breathe_default_members = ("members",)
# No "#include" line per declaration: it links to a per-file page, and the
# reference renders namespaces, not files (docs/_ext/kolo_docs.py).
breathe_show_include = False
cpp_index_common_prefix = ["kolo::"]

html_theme = "furo"
html_title = "kolo %s" % release
html_static_path = ["_static"]
html_copy_source = False
html_show_sourcelink = False
