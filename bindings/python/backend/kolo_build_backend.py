"""PEP 517 build backend of kolo: checks the build environment, then hands
every hook to scikit-build-core, which builds the wheel through the
project's CMake (pyproject.toml names this module with backend-path).

kolo's torch extension (kolo._kolo_torch, behind kolo.torch) is compiled
against the LibTorch of the torch installed in the environment it is built
in: `pip install --no-build-isolation .` (with build isolation pip builds
in a fresh environment without torch). Without torch there, kolo is built
without it: `import kolo` (the array API, kolo.run, kolo.ray, kolo.spark)
works, kolo.torch says it needs torch. Anything missing stops the build
with one line saying what to install."""
import os
import shutil
import sys

# The supported torch range (docs/install.md); kept in
# step with cmake/KoloTorch.cmake.
MIN_TORCH = (1, 13)
INSTALL_HINT = "pip install --no-build-isolation ."


class BuildEnvironmentError(Exception):
    """The environment cannot build kolo; the message says what to do."""


def _version_tuple(version):
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_torch_version(version):
    """Raises BuildEnvironmentError when torch `version` is older than kolo supports."""
    if _version_tuple(version) < MIN_TORCH:
        raise BuildEnvironmentError(
            "kolo needs torch >= %d.%d but this environment has torch %s: "
            "pip install --upgrade 'torch>=%d.%d', then %s"
            % (MIN_TORCH + (version,) + MIN_TORCH + (INSTALL_HINT,)))


def _find_nvcc():
    """nvcc where cmake/KoloCuda.cmake looks for it, or None."""
    candidates = [shutil.which("nvcc")]
    for var in ("CUDACXX",):
        candidates.append(os.environ.get(var))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


def check_environment():
    """Raises BuildEnvironmentError naming the first thing missing."""
    if any("build-env" in entry for entry in sys.path):
        # pip's (or python -m build's) isolated build environment.
        raise BuildEnvironmentError(
            "kolo builds against the torch installed in your environment, which an "
            "isolated build hides: install torch there first, then %s" % INSTALL_HINT)
    try:
        import torch
    except ImportError:
        torch = None  # built without torch: the framework-free package only
    if torch is not None:
        check_torch_version(torch.__version__)
    if torch is not None and getattr(torch.version, "cuda", None) and not _find_nvcc():
        raise BuildEnvironmentError(
            "this environment has a CUDA build of torch (%s, CUDA %s), and building against "
            "it needs the CUDA toolkit (nvcc), which was not found: install it (or set "
            "CUDA_HOME), or use torch's CPU build (pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu), then %s"
            % (torch.__version__, torch.version.cuda, INSTALL_HINT))
    missing = []
    for module, package in (("scikit_build_core", "scikit-build-core"),
                            ("pybind11", "pybind11")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if shutil.which("cmake") is None:
        try:
            import cmake  # noqa: F401  (the cmake wheel)
        except ImportError:
            missing.append("cmake")
    if missing:
        # Without torch as well, say so in the same line: kolo.torch needs it.
        torch_note = "" if torch is not None else (
            " (and for kolo.torch: %s cannot import torch: install it first (pip install "
            "torch), then %s)" % (sys.executable, INSTALL_HINT))
        raise BuildEnvironmentError(
            "building kolo needs %s in %s's environment: pip install %s, then %s%s"
            % (", ".join(missing), sys.executable, " ".join(missing), INSTALL_HINT, torch_note))
    if torch is None:
        print("kolo: %s has no torch: building kolo without kolo.torch (import kolo, its array "
              "API, kolo.run, kolo.ray and kolo.spark work); install torch and rebuild for "
              "kolo.torch" % sys.executable, file=sys.stderr)


def _backend():
    try:
        check_environment()
    except BuildEnvironmentError as e:
        # One line for the user; pip adds its own "subprocess-exited-with-error".
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
    from scikit_build_core import build
    return build


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _backend().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _backend().build_sdist(sdist_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _backend().build_editable(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_wheel(config_settings=None):
    return _backend().get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):
    return _backend().get_requires_for_build_sdist(config_settings)


def get_requires_for_build_editable(config_settings=None):
    return _backend().get_requires_for_build_editable(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _backend().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _backend().prepare_metadata_for_build_editable(metadata_directory, config_settings)
