"""The optional C++ autograd nodes for PyTorch (``_csrc/torch_autograd.cpp``: flashwatt.attention and
flashwatt.attention_varlen), built on demand.

flashwatt's torch path is Python over ctypes; what a Python ``autograd.Function`` costs the host alone is more
than SDPA's whole call on a small problem (docs/PERF.md, host overhead). The extension does the same
forward and backward with the autograd node in C++. It is compiled against the torch that imports it (its
C++ ABI), so it cannot ship prebuilt: ``python -m flashwatt build-torch-ext`` compiles it once (a C++
compiler and ninja needed; about a minute) into a cache keyed by the torch version and the sources, and
every later process loads it from there. ``FLASHWATT_TORCH_EXT``: ``0`` never uses it, ``1`` builds it on
first use where it is missing; unset, it is used where already built. Without it the Python path runs, the
same results either way.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from typing import Any, List, Optional

from . import _lib

_NAME = "flashwatt_torch_ext"
_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "_csrc", "torch_autograd.cpp")

_module: Any = None
_tried = False


def include_dirs() -> List[str]:
    """Where flashwatt.h and its generated flashwatt_version.h are: the package's own copy (pip install), or
    the checkout's include/ and the library's build directory (FLASHWATT_LIBRARY=build/libflashwatt.so)."""
    lib_dir = os.path.dirname(os.path.abspath(_lib.library_path()))
    dirs = [os.path.join(_HERE, "include"), os.path.join(lib_dir, "include"),
            os.path.join(_HERE, "..", "..", "include")]
    return [os.path.normpath(d) for d in dirs if os.path.isdir(d)]


def _header(name: str) -> Optional[str]:
    for d in include_dirs():
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def build_dir() -> str:
    """The cache directory of this torch and these sources ($FLASHWATT_CACHE, else ~/.cache/flashwatt)."""
    import torch

    h = hashlib.sha256(torch.__version__.encode() + sys.version.encode())
    for path in (_SOURCE, _header("flashwatt.h"), _header("flashwatt_version.h")):
        if path is None:
            raise RuntimeError("flashwatt's torch extension needs flashwatt.h and flashwatt_version.h; looked in "
                               + ", ".join(include_dirs() or ["(no include directory found)"]))
        with open(path, "rb") as f:
            h.update(f.read())
    root = os.environ.get("FLASHWATT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "flashwatt")
    return os.path.join(root, "torch_ext", h.hexdigest()[:16])


def _built_path(directory: str) -> Optional[str]:
    for f in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if f.startswith(_NAME) and f.endswith(".so"):
            return os.path.join(directory, f)
    return None


def _init(mod: Any) -> Any:
    import ctypes

    lib = _lib.load()

    def addr(name: str) -> int:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0

    mod.init(addr("fw_attention_forward"), addr("fw_attention_backward"), addr("fw_attention_varlen_forward"),
             addr("fw_attention_varlen_backward"), addr("fw_context_set_stream"), addr("fw_context_last_error"),
             addr("fw_context_create"), addr("fw_context_destroy"), addr("fw_status_string"))
    return mod


def _import(path: str) -> Any:
    import torch  # noqa: F401  (its libraries must be loaded before the extension's)

    spec = importlib.util.spec_from_file_location(_NAME, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return _init(mod)


def build(verbose: bool = False) -> Any:
    """Compiles the extension into build_dir() (a no-op where it is there) and returns it loaded."""
    global _module, _tried
    from torch.utils import cpp_extension

    directory = build_dir()
    os.makedirs(directory, exist_ok=True)
    mod = cpp_extension.load(name=_NAME, sources=[_SOURCE], extra_include_paths=include_dirs(),
                             extra_cflags=["-O2"], build_directory=directory, verbose=verbose)
    _module, _tried = _init(mod), True
    return _module


def get() -> Any:
    """The loaded extension, or None where it is not to be used (see the module's docstring)."""
    global _module, _tried
    if _tried:
        return _module
    _tried = True
    mode = os.environ.get("FLASHWATT_TORCH_EXT", "")
    if mode == "0":
        return None
    try:
        path = _built_path(build_dir())
        if path is not None:
            _module = _import(path)
        elif mode == "1":
            build()
    except Exception as e:  # noqa: BLE001  (the Python path serves; say why once)
        print(f"flashwatt: the torch extension is not used: {e}", file=sys.stderr)
        _module = None
    return _module
