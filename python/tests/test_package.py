"""The package around the binding: its version (CMake's project(VERSION), the one definition) agrees
with the library's, and ``python -m flashwatt`` runs. (tests/pip_install_test.sh installs the package
with pip in a fresh environment and uses it from elsewhere.)"""
import os
import re
import subprocess
import sys
from pathlib import Path

import flashwatt as fw

REPO = Path(__file__).resolve().parents[2]


def test_versions_agree():
    cmake = (REPO / "CMakeLists.txt").read_text()
    project = re.search(r"project\(flashwatt VERSION ([0-9]+\.[0-9]+\.[0-9]+)", cmake).group(1)
    assert fw.__version__ == project
    assert fw.version() == project  # the library in use was built from this checkout


def _module(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "flashwatt", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_python_m_flashwatt_info():
    for args in ((), ("info",)):
        r = _module(*args)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"flashwatt {fw.__version__} (library {fw.version()}) at ")
        assert re.search(r"^  cpu-ref +cpu +usable$", r.stdout, re.M), r.stdout
        assert "telemetry: " in r.stdout
        assert re.search(r"^torch extension: ", r.stdout, re.M), r.stdout
    r = _module("bogus")
    assert r.returncode == 2 and "usage: python -m flashwatt" in r.stderr


def test_package_copy_is_searched_before_the_checkout_build(monkeypatch):
    monkeypatch.delenv("FLASHWATT_LIBRARY", raising=False)
    paths = fw._lib.candidate_paths()
    package_copy = str(Path(fw._lib.__file__).resolve().parent / "libflashwatt.so")
    assert paths[0] == package_copy
    assert paths.index(package_copy) < next(i for i, p in enumerate(paths) if p.endswith("build/libflashwatt.so"))


def test_build_torch_ext_without_torch_says_so():
    """Where torch is absent the command fails with a reason (where it is, test_torch_ext.py builds it)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        r = _module("build-torch-ext")
        assert r.returncode == 1 and "torch is not installed" in r.stderr, r.stderr
    else:
        import pytest

        pytest.skip("torch is installed here: test_torch_ext.py builds the extension")
