"""``python -m flashwatt [info]``: which library is loaded and what it can run."""
import sys

import flashwatt

USAGE = "usage: python -m flashwatt [info]\n  info (the default): the package, the library it loaded, backends, GPUs, telemetry"


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


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in ([], ["info"]):
        info()
        return 0
    if args in (["-h"], ["--help"], ["help"]):
        print(USAGE)
        return 0
    print(f"python -m flashwatt: unknown arguments {' '.join(args)!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
