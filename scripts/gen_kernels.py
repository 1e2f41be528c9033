#!/usr/bin/env python3
"""Generates the CUDA kernel instantiations and their C table of records from src/backends/cuda/kernels.tsv.

  python3 scripts/gen_kernels.py            rewrite src/backends/cuda/generated/
  python3 scripts/gen_kernels.py --check    generate into a temporary folder and fail (exit 1) where the
                                            committed files differ (ctest: generated_kernels)

This file reads the table, hands each record to its family's module and writes or checks the files; the families:
Forward (fwd.*, kernels_fwd.py): per padded head dim, generated/fwd_d<D>.cu holds a configuration struct (named
fields, no positional flags) and an extern "C" launch function per element type for every record, and
generated/fwd_d<D>_varlen.cu the same for the ragged (varlen) records; generated/fwd_records.cu holds the tables
of records (fwd/params.h: fw_fwd_record), the dense one and the ragged one, that the heuristics choose from.
Backward (bwd.*, kernels_bwd.py): per padded head dim, generated/bwd_tc_d<D>.cu (tensor cores) and
bwd_cores_d<D>.cu (CUDA cores) hold one configuration struct per distinct kernel shape (a shape that several
records share is instantiated once) and the launch functions of every record, and bwd_tc_d<D>_varlen.cu,
bwd_cores_d<D>_varlen.cu the ragged launch functions of the records with the varlen option;
generated/bwd_records.cu is its table (bwd/params.h).
f32 (f32.*, cuda-flash-f32, kernels_f32.py): generated/f32_d<D>.cu (a launch function per precision form: exact,
or tf32 and 3xtf32) and generated/f32_records.cu (f32/params.h: fw_f32_record).
What they share is kernels_common.py's. Each instantiation file asserts that the kernels' shared memory is the
record's, so the table and the kernels cannot drift."""
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # ctest runs this in the source tree: leave no __pycache__ there
import kernels_bwd  # noqa: E402 (after the line above)
import kernels_f32  # noqa: E402
import kernels_fwd  # noqa: E402
from kernels_common import ARCH, GENERATED, TABLE, base_record, fail  # noqa: E402

# Each family module has KERNEL (its families' C enums), defaults(r), option(r, o) (False where o does not apply),
# check_record(r), check_table(recs) and files(recs) (its generated files by name).
FAMILIES = (kernels_fwd, kernels_f32, kernels_bwd)


def read_table():
    """Each family module's records, checked, head dims ascending and in the table's order within one (the
    heuristics' tie order)."""
    recs = {m: [] for m in FAMILIES}
    for n, line in enumerate(open(TABLE), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 9:
            fail(f"kernels.tsv:{n}: 9 columns expected, got {len(fields)}")
        family, arch, options = fields[0], fields[2], fields[8]
        m = next((m for m in FAMILIES if family in m.KERNEL), None)
        if not m:
            fail(f"kernels.tsv:{n}: unknown family {family}")
        if arch not in ARCH:
            fail(f"kernels.tsv:{n}: unknown arch {arch}")
        r = base_record(n, fields)
        r.update(m.defaults(r))
        for o in ([] if options == "-" else options.split(",")):
            if not m.option(r, o):
                fail(f"kernels.tsv:{n}: option {o} does not apply to {family}")
        m.check_record(r)
        recs[m].append(r)
    for m in FAMILIES:
        m.check_table(recs[m])
    return {m: sorted(some, key=lambda r: r["d"]) for m, some in recs.items()}


def generate(dest):
    files = {}
    for m, recs in read_table().items():
        files.update(m.files(recs))
    for name, text in files.items():
        with open(os.path.join(dest, name), "w") as f:
            f.write(text)
    return files


def main():
    if sys.argv[1:] == ["--check"]:
        tmp = tempfile.mkdtemp(prefix="fw_gen_kernels_")
        try:
            files = generate(tmp)
            bad = [n for n in files
                   if not os.path.exists(os.path.join(GENERATED, n)) or
                   open(os.path.join(GENERATED, n)).read() != open(os.path.join(tmp, n)).read()]
            stale = [n for n in os.listdir(GENERATED) if n not in files]
        finally:
            shutil.rmtree(tmp)
        if bad or stale:
            fail("src/backends/cuda/generated/ is not what kernels.tsv generates (run python3 scripts/gen_kernels.py): "
                 + ", ".join(bad + [n + " (stale)" for n in stale]))
        print(f"gen_kernels.py: {len(files)} generated files up to date")
    elif not sys.argv[1:]:
        os.makedirs(GENERATED, exist_ok=True)
        files = generate(GENERATED)
        for n in os.listdir(GENERATED):
            if n not in files:
                os.remove(os.path.join(GENERATED, n))
        print(f"gen_kernels.py: wrote {len(files)} files to src/backends/cuda/generated/")
    else:
        fail("usage: gen_kernels.py [--check]")


if __name__ == "__main__":
    main()
