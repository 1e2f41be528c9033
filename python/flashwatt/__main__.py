"""``python -m flashwatt [info | build-torch-ext]``: which library is loaded and what it can run; build the
optional torch extension."""
import os
import sys
import time

import flashwatt

USAGE = ("usage: python -m flashwatt [info | build-torch-ext]\n"
         "  info (the default): the package, the library it loaded, backends, GPUs, telemetry, the torch extension\n"
         "  build-torch-ext: compile the C++ autograd node for the installed torch (once; see flashwatt/_torch_ext.py)")


def info() -> None:
    print(f"flashwatt {flashwatt.__version__} (library {flashwatt.version()}) at {flashwatt.library_path()}")
    print(f"cpu simd: {flashwatt.cpu_simd_level()}, cuda devices: {flashwatt.cuda_device_count()}")
    for b in flashwatt.backends():
        state = "usable" if b.usable else f"not usable: {b.why_not}"
        print(f"  {b.name:<18} {b.device:<5} {state}")
    snap = flashwatt.telemetry()
    print(f"telemetry: {snap.description}")
    for g in snap.gpus:
        print(f"  gpu {g.gpu} {g.name}: power {g.power_instant_w} W, energy {g.energy_mj} mJ, "
              f"temperature {g.temperature_c} C, throttle {g.throttle_reasons}")
    print(f"torch extension: {torch_ext_state()}")


def torch_ext_state() -> str:
    """Whether the C++ autograd node is in use, and where it is or how to get it."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return "n/a (no torch)"
    from flashwatt import _torch_ext

    mod = _torch_ext.get()
    if mod is not None:
        return f"in use ({mod.__file__})"
    if os.environ.get("FLASHWATT_TORCH_EXT") == "0":
        return "off (FLASHWATT_TORCH_EXT=0)"
    return "not built (python -m flashwatt build-torch-ext)"


def build_torch_ext() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("python -m flashwatt build-torch-ext: torch is not installed", file=sys.stderr)
        return 1
    from flashwatt import _torch_ext

    t0 = time.time()
    try:
        mod = _torch_ext.build(verbose=False)
    except Exception as e:  # noqa: BLE001  (a compiler or ninja missing: say so)
        print(f"python -m flashwatt build-torch-ext: the build failed: {e}", file=sys.stderr)
        return 1
    print(f"built {mod.__file__} in {time.time() - t0:.0f} s")
    return 0


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in ([], ["info"]):
        info()
        return 0
    if args == ["build-torch-ext"]:
        return build_torch_ext()
    if args in (["-h"], ["--help"], ["help"]):
        print(USAGE)
        return 0
    print(f"python -m flashwatt: unknown arguments {' '.join(args)!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
