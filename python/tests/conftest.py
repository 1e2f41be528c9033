"""pytest setup: import the package from this checkout and find a libflashwatt built here.

Order: $FLASHWATT_LIBRARY if set; else <repo>/build/libflashwatt.so; else the newest
<repo>/build*/libflashwatt.so. The library in use is printed in pytest's header.
"""
import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))


def _find_library() -> None:
    if os.environ.get("FLASHWATT_LIBRARY"):
        return
    default = REPO / "build" / "libflashwatt.so"
    if default.exists():
        os.environ["FLASHWATT_LIBRARY"] = str(default)
        return
    found = sorted(REPO.glob("build*/libflashwatt.so"), key=lambda p: p.stat().st_mtime, reverse=True)
    if found:
        os.environ["FLASHWATT_LIBRARY"] = str(found[0])


_find_library()


def pytest_report_header(config):
    try:
        import flashwatt

        names = ", ".join(f"{b.name}{'' if b.usable else ' (not usable)'}" for b in flashwatt.backends())
        return [f"flashwatt library: {flashwatt.library_path()} (version {flashwatt.version()})",
                f"flashwatt backends: {names}"]
    except OSError as e:  # reported again by every test that needs it
        return [f"flashwatt library: NOT FOUND ({e})"]


@pytest.fixture(scope="session")
def fw():
    import flashwatt

    flashwatt._lib.load()
    return flashwatt


def cpu_backend_names():
    """CPU backends the library lists as usable (evaluated at collection)."""
    try:
        import flashwatt

        return [b.name for b in flashwatt.backends() if b.device == "cpu" and b.usable]
    except OSError:
        return []
