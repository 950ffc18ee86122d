"""The pip build backend's environment checks (bindings/python/backend):
pure version logic, and real pip runs in fresh venvs that lack torch or the
build tools, which must stop at once with one line saying what to do.

    python -m pytest -q tests/package/test_build_backend.py
"""
import os
import subprocess
import sys
import venv

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "backend"))
import kolo_build_backend as backend  # noqa: E402


@pytest.mark.parametrize("version", ["1.12.1", "1.9.0+cu111", "0.4.1"])
def test_older_torch_is_refused_with_what_to_do(version):
    with pytest.raises(backend.BuildEnvironmentError) as e:
        backend.check_torch_version(version)
    message = str(e.value)
    assert "torch >= 1.13" in message and version in message
    assert "pip install --upgrade 'torch>=1.13'" in message
    assert "\n" not in message


@pytest.mark.parametrize("version", ["1.13.0a0", "1.13.1", "2.0.0", "2.11.0+cu130", "10.0"])
def test_supported_torch_passes(version):
    backend.check_torch_version(version)


def pip_install(env_dir, system_site_packages):
    """pip install --no-build-isolation <checkout> in a fresh venv; returns
    (exit status, the backend's error lines)."""
    venv.EnvBuilder(with_pip=True, system_site_packages=system_site_packages).create(env_dir)
    python = os.path.join(env_dir, "bin", "python")
    run = subprocess.run(
        [python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", ROOT],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    errors = [line.strip() for line in run.stdout.splitlines()
              if line.strip().startswith("error: ") and "subprocess" not in line
              and "metadata-generation-failed" not in line]
    return run.returncode, errors, run.stdout


def test_pip_install_without_torch_or_build_tools_names_both(tmp_path):
    # torch is optional (kolo builds without kolo.torch), the build tools are
    # not: a fresh venv has neither, and the one error line names the tools
    # and what kolo.torch would need. The build without torch itself is
    # python.without_torch (check_without_torch.sh).
    rc, errors, out = pip_install(str(tmp_path / "v"), system_site_packages=False)
    assert rc != 0, out
    assert len(errors) == 1, out
    assert "building kolo needs scikit-build-core, pybind11" in errors[0], out
    assert "(and for kolo.torch: " in errors[0], out
    assert "cannot import torch: install it first (pip install torch), then " \
           "pip install --no-build-isolation ." in errors[0], out


def test_pip_install_without_build_tools_names_them(tmp_path):
    # The system interpreter's site-packages give the venv Debian's torch,
    # but no scikit-build-core or pybind11 module.
    probe = subprocess.run([sys.base_prefix + "/bin/python3", "-c",
                            "import torch; import scikit_build_core"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if "No module named 'torch'" in probe.stderr or probe.returncode == 0:
        pytest.skip("needs a base interpreter with torch and without scikit-build-core")
    rc, errors, out = pip_install(str(tmp_path / "v"), system_site_packages=True)
    assert rc != 0, out
    assert len(errors) == 1, out
    assert "building kolo needs scikit-build-core" in errors[0], out
    assert "pip install scikit-build-core" in errors[0], out
