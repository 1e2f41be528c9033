"""The backward's family (bwd.*, cuda-flash's backward) of scripts/gen_kernels.py: its records' options, names and
checks, the shared memory of their kernels, the configuration structs of their kernel shapes, and the files
generated/bwd_tc_d<D>.cu, bwd_cores_d<D>.cu, bwd_tf32_d<D>.cu, their _varlen.cu forms and bwd_records.cu."""
import re

from kernels_common import ARCH, DTYPES, HEADER, check_unique, fail, ident

KERNEL = {"bwd.cores": "FW_BWD_CORES", "bwd.mma": "FW_BWD_MMA", "bwd.mma2d": "FW_BWD_MMA2D", "bwd.wg": "FW_BWD_WG",
          "bwd.ws": "FW_BWD_WS", "bwd.tf32": "FW_BWD_TF32"}
DQ_KERNEL = {"mma": "FW_BWD_DQ_MMA", "wg": "FW_BWD_DQ_WG", "ws": "FW_BWD_DQ_WS", "tf32": "FW_BWD_DQ_TF32"}
DTYPES_CORES = (("f32", "float"),) + DTYPES  # the CUDA-core kernels also take f32; the tensor-core ones DTYPES
CONFIG_NAME_ROOM = 47 - len("bwd-deterministic:")  # fw_config.name holds "bwd-<mode>:<record>"
PROTO = "cudaError_t {}(const fw_bwd_args *a, int atomic_dq, cudaStream_t stream)"


def defaults(r):
    """The backward's fields before the options."""
    return dict(qs=r["bm"], ovl=False, dq=None, varlen=False, fuse=False)


def option(r, o):
    """Parses option o of a backward record into r; False where it does not apply to the record's family."""
    fam = r["family"]
    m = re.fullmatch(r"dq=(?:w(\d+)-mt(\d+)-bn(\d+)|(wg|ws)-bn(\d+))", o)
    if re.fullmatch(r"qs\d+", o) and fam in ("bwd.mma", "bwd.tf32"):
        r["qs"] = int(o[2:])
    elif o == "ovl" and fam == "bwd.wg":
        r["ovl"] = True
    elif o == "varlen":
        r["varlen"] = True
    elif o == "fuse" and fam == "bwd.ws":
        r["fuse"] = True
    elif m and fam != "bwd.cores":
        r["dq"] = (dict(kind="tf32" if fam == "bwd.tf32" else "mma", warps=int(m[1]), mt=int(m[2]), bn=int(m[3])) if m[1]
                   else dict(kind=m[4], warps=8 if m[4] == "wg" else 12, mt=0, bn=int(m[5])))
    else:
        return False
    return True


def derived_name(r):
    """A record's name from its fields: the dK/dV kernel's, then the dQ kernel's (tuning tables hold them)."""
    f = r["family"]
    if f == "bwd.cores":  # the head dim's first is named "cores" (check_table), the others by their tile
        return f"cores-bm{r['bm']}-bn{r['bn']}"
    kv = {"bwd.mma": f"bm{r['bm']}-w{r['warps']}" + (f"-qs{r['qs']}" if r["qs"] != r["bm"] else ""),
          "bwd.mma2d": f"bm{r['bm']}-w{r['warps']}-2d",
          "bwd.wg": f"wg-bm{r['bm']}" + ("-ovl" if r["ovl"] else ""),
          "bwd.ws": f"ws-bm{r['bm']}",
          "bwd.tf32": f"tf32-bm{r['bm']}-w{r['warps']}" + (f"-qs{r['qs']}" if r["qs"] != r["bm"] else "")}[f]
    q = r["dq"]
    dq = (f"dq-w{q['warps']}-mt{q['mt']}-bn{q['bn']}" if q["kind"] == "mma"
          else f"dq-mt{q['mt']}-bn{q['bn']}" if q["kind"] == "tf32"  # 4 warps (check_record)
          else f"dq-{q['kind']}-bn{q['bn']}")
    return kv + "-" + dq


def check_record(r):
    where, f, d, q = f"kernels.tsv:{r['line']}", r["family"], r["d"], r["dq"]
    if f != "bwd.cores" and not q:
        fail(f"{where}: a tensor-core backward record names its dQ kernel (dq=...)")
    if r["name"] != derived_name(r) and not (f == "bwd.cores" and r["name"] == "cores"):
        fail(f"{where}: the name of these fields is {derived_name(r)}, not {r['name']}")
    if len(r["name"]) > CONFIG_NAME_ROOM:
        fail(f"{where}: {r['name']} is longer than {CONFIG_NAME_ROOM} characters (fw_config.name)")
    hopper = f in ("bwd.wg", "bwd.ws") or (q and q["kind"] not in ("mma", "tf32"))
    if r["arch"] != ("sm90a" if hopper else "sm80"):
        fail(f"{where}: a record with wgmma kernels is sm90a, else sm80")
    ok = {"bwd.cores": d in (64, 128, 256) and r["warps"] == 8 and r["stages"] == 1 and r["bm"] % 16 == 0
                       and r["bn"] % 16 == 0 and r["bn"] // 16 in (1, 2, 4),
          "bwd.mma": d in (64, 128) and r["bn"] == 16 * r["warps"] and r["stages"] == 2 and r["qs"] % 16 == 0
                     and r["bm"] % r["qs"] == 0,
          "bwd.mma2d": d in (64, 128) and (r["bm"], r["bn"], r["warps"], r["stages"]) == (64, 128, 8, 2),
          "bwd.wg": d in (64, 128) and r["bm"] in (64, 128) and (r["bn"], r["warps"]) == (128, 8)
                    and r["stages"] == (3 if r["ovl"] else 2),
          "bwd.ws": d in (64, 128) and r["bm"] in (64, 128) and (r["bn"], r["warps"], r["stages"]) == (128, 12, 3),
          "bwd.tf32": d in (64, 128) and r["bn"] == 16 * r["warps"] and r["stages"] == 2 and r["qs"] % 8 == 0
                      and r["bm"] % r["qs"] == 0 and r["dq"]["kind"] == "tf32" and r["dq"]["warps"] == 4}[f]
    if not ok:
        fail(f"{where}: fields outside what {f}'s kernel takes (see the table's header)")
    step = {"mma": 16, "tf32": 8}.get(q["kind"], 64) if q else 0
    if q and q["bn"] % step:
        fail(f"{where}: the dQ kernel's keys per step must be a multiple of {step}")


def check_table(recs):
    """The checks across records: unique names, and every head dim's CUDA-core records (the fallback of its head dim,
    dense and ragged: the first that fits the device's shared memory) with the varlen option, the first named
    "cores"."""
    check_unique(recs)
    for d in {r["d"] for r in recs}:
        cores = [r for r in recs if r["d"] == d and r["family"] == "bwd.cores"]
        if not cores:
            fail(f"kernels.tsv: head dim {d} has backward records but no bwd.cores record (the fallback)")
        if cores[0]["name"] != "cores":
            fail(f"kernels.tsv:{cores[0]['line']}: head dim {d}'s first bwd.cores record is named cores")
        for r in cores:
            if not r["varlen"]:
                fail(f"kernels.tsv:{r['line']}: a bwd.cores record needs the varlen option (every ragged backward's fallback)")


def wg_smem(d, bm, st, atomic):
    return (1024 + 2 * 128 * d * 2 + 2 * st * bm * d * 2 + ((st * 2 * bm * 4 + 1023) & ~1023)
            + (2 * 64 * bm * 2 if atomic else 0))


def kv_smem(r, atomic):
    f, d, bm = r["family"], r["d"], r["bm"]
    if f == "bwd.tf32":  # f32 rows of d + 8 floats: K, V; two stages of Q, dO and of lse2, delta
        return 2 * r["bn"] * (d + 8) * 4 + 2 * (2 * bm * (d + 8) * 4) + 2 * (2 * bm * 4)
    if f == "bwd.cores":
        ld, ldp, bn = d + 4, r["bn"] + 16, r["bn"]
        return 4 * (2 * bn * ld + 2 * bm * ld + 2 * bm * ldp + 2 * bm)
    if f == "bwd.mma":
        bn, sd = 16 * r["warps"], d + 8
        return 2 * bn * sd * 2 + 2 * (2 * bm * sd * 2) + 2 * (2 * bm * 4) + (bn * (bm + 8) * 2 if atomic else 0)
    if f == "bwd.mma2d":
        sd = d + 8
        return 2 * 128 * sd * 2 + 2 * (2 * 64 * sd * 2) + 2 * (2 * 64 * 4) + 2 * 128 * 72 * 2
    a = wg_smem(d, bm, 2 if atomic else r["stages"], atomic)  # ws: its cp.async fallback's
    if f == "bwd.ws" and atomic and r["fuse"]:  # launch.cuh: fused_dq, the producer-warpgroup kernel with dQ in it
        a = max(a, 1024 + 2 * 128 * d * 2 + 2 * 2 * bm * d * 2 + ((2 * 2 * bm * 4 + 1023) & ~1023)
                + 2 * 2 * 64 * bm * 2 + 2 * 64 * 64 * 4 + 256)
    return a


def smem(r, atomic):
    """The larger of a mode's kernels (launch.cuh: tc_smem)."""
    a = kv_smem(r, atomic)
    d, q = r["d"], r["dq"]
    if r["family"] == "bwd.tf32":  # one mode's kernels whatever the mode (launch_tf32.cuh: tf32_smem)
        return max(a, (2 * 16 * q["warps"] * q["mt"] + 4 * q["bn"]) * (d + 8) * 4)
    if atomic or r["family"] == "bwd.cores":
        return a
    if r["family"] == "bwd.ws":
        a = max(a, 1024 + 2 * 128 * d * 2 + 2 * 3 * r["bm"] * d * 2 + 3 * 2 * r["bm"] * 4 + 256)
    if q["kind"] == "mma":
        b = (2 * 16 * q["warps"] * q["mt"] + 4 * q["bn"]) * (d + 8) * 2
    else:
        b = 1024 + 2 * 128 * d * 2 + 2 * 3 * q["bn"] * d * 2 + (256 if q["kind"] == "ws" else 0)
    return max(a, b)


def launch_name(r, dt, varlen=False):
    return f"fw_bwd_{ident(r)}_{dt}" + ("_varlen" if varlen else "")


def structs(r):
    """The configuration structs a record's launch needs, as (name, order, text), its own two (kv, dq) first."""
    d, f, out = r["d"], r["family"], []
    pre = f"    static constexpr int D = {d}, "

    def wg(bm, st, ovl):
        name = f"d{d}_kv_wg_bm{bm}_s{st}" + ("_ovl" if ovl else "")
        plain = f"d{d}_kv_wg_bm{bm}_s2"
        return (name, 3 if ovl else 2,
                f"struct {name} {{\n    static constexpr kv_kernel KIND = kv_kernel::wg;\n{pre}BM = {bm}, STAGES = {st};\n"
                f"    static constexpr bool OVERLAP = {'true' if ovl else 'false'};\n    using ATOMIC_KV = {plain};\n}};\n")

    if f == "bwd.tf32":
        q = r["dq"]
        kv, dq = f"d{d}_kv_tf32_bm{r['bm']}_w{r['warps']}_qs{r['qs']}", f"d{d}_dq_tf32_w{q['warps']}_mt{q['mt']}_bn{q['bn']}"
        return [(kv, 0, f"struct {kv} {{\n{pre}BM = {r['bm']}, WARPS = {r['warps']}, QS = {r['qs']};\n}};\n"),
                (dq, 1, f"struct {dq} {{\n{pre}WARPS = {q['warps']}, MT = {q['mt']}, BN = {q['bn']};\n}};\n")]
    if f == "bwd.cores":
        name = f"d{d}_cores_bm{r['bm']}_bn{r['bn']}"
        return [(name, 0, f"struct {name} {{\n    static constexpr kv_kernel KIND = kv_kernel::cores;\n"
                          f"{pre}BM = {r['bm']}, BN = {r['bn']};\n}};\n")]
    if f == "bwd.mma":
        name = f"d{d}_kv_mma_bm{r['bm']}_w{r['warps']}_qs{r['qs']}"
        out.append((name, 0, f"struct {name} {{\n    static constexpr kv_kernel KIND = kv_kernel::mma;\n"
                             f"{pre}BM = {r['bm']}, WARPS = {r['warps']}, QS = {r['qs']};\n}};\n"))
    elif f == "bwd.mma2d":
        name = f"d{d}_kv_mma2d"
        out.append((name, 1, f"struct {name} {{\n    static constexpr kv_kernel KIND = kv_kernel::mma2d;\n"
                             f"{pre}BM = 64, WARPS = 8;\n}};\n"))
    elif f == "bwd.wg":
        out.append(wg(r["bm"], r["stages"], r["ovl"]))
        if r["ovl"]:
            out.append(wg(r["bm"], 2, False))
    else:
        name = f"d{d}_kv_ws_bm{r['bm']}_s{r['stages']}" + ("_fuse" if r["fuse"] else "")
        out.append((name, 4, f"struct {name} {{\n    static constexpr kv_kernel KIND = kv_kernel::ws;\n"
                             f"{pre}BM = {r['bm']}, STAGES = {r['stages']};\n"
                             f"    static constexpr bool FUSE_DQ = {'true' if r['fuse'] else 'false'};\n"
                             f"    using FALLBACK = d{d}_kv_wg_bm{r['bm']}_s3_ovl;\n"
                             f"    using ATOMIC_KV = d{d}_kv_wg_bm{r['bm']}_s2;\n}};\n"))
        out += [wg(r["bm"], 3, True), wg(r["bm"], 2, False)]
    q = r["dq"]
    if q["kind"] == "mma":
        name = f"d{d}_dq_mma_w{q['warps']}_mt{q['mt']}_bn{q['bn']}"
        dq = [(name, 5, f"struct {name} {{\n    static constexpr dq_kernel KIND = dq_kernel::mma;\n"
                        f"{pre}WARPS = {q['warps']}, MT = {q['mt']}, BN = {q['bn']};\n}};\n")]
    else:
        wgq = f"d{d}_dq_wg_bn{q['bn']}_s3"
        dq = [] if q["kind"] == "wg" else [(f"d{d}_dq_ws_bn{q['bn']}_s3", 7,
                                            f"struct d{d}_dq_ws_bn{q['bn']}_s3 {{\n    static constexpr dq_kernel KIND = dq_kernel::ws;\n"
                                            f"{pre}BN = {q['bn']}, STAGES = 3;\n    using FALLBACK = {wgq};\n}};\n")]
        dq.append((wgq, 6, f"struct {wgq} {{\n    static constexpr dq_kernel KIND = dq_kernel::wg;\n"
                           f"{pre}BN = {q['bn']}, STAGES = 3;\n}};\n"))
    return out[:1] + dq[:1] + out[1:] + dq[1:]


def instantiation_file(d, recs, kind, varlen=False):
    """kind: "cores", "tc" (f16/bf16 tensor cores) or "tf32" (f32 tensor cores)."""
    cores, tf32 = kind == "cores", kind == "tf32"
    what = {"cores": "CUDA-core", "tc": "tensor-core", "tf32": "f32 tensor-core"}[kind]
    intro = (f" * The backward's {what} instantiations for padded head dim {d}: a configuration per kernel shape, and per\n"
             " * record a launch function per element type (bwd/params.h: fw_bwd_record, generated/bwd_records.cu). */")
    if varlen:
        intro = (f" * The backward's {what} instantiations for ragged (varlen) batches, padded head dim {d}: a configuration\n"
                 " * per kernel shape, and per record of the varlen option a ragged launch function per element type\n"
                 " * (bwd/params.h: fw_bwd_record's varlen_*, generated/bwd_records.cu). */")
    header = {"cores": "kernel_cores.cuh", "tc": "launch.cuh", "tf32": "launch_tf32.cuh"}[kind]
    out = [f"/* {HEADER}\n{intro}", f'#include "backends/cuda/bwd/{header}"',
           "\nnamespace fwbwd {\n"]
    shapes = {}  # a kernel shape that several records share is instantiated once
    for r in recs:
        for name, order, text in structs(r):
            shapes.setdefault(name, (order, len(shapes), text))
    for name, (order, _, text) in sorted(shapes.items(), key=lambda kv: kv[1][:2]):
        out.append(text)
    for r in ([] if varlen else recs):  # the dense file asserts the shared memory of both
        names = [n for n, _, _ in structs(r)]
        kv, dq = names[0], names[1] if not cores else None
        if cores:
            out.append(f"static_assert(cores_smem_bytes<{kv}>() == {smem(r, True)}, \"kernels.tsv: shared memory\");")
        elif tf32:
            out.append(f"static_assert(tf32_smem<{kv}, {dq}>() == {smem(r, False)}, \"kernels.tsv: shared memory of {r['name']}\");")
        else:
            out.append(f"static_assert(tc_smem<{kv}, {dq}>(dq_mode::atomic) == {smem(r, True)} &&\n"
                       f"                  tc_smem<{kv}, {dq}>(dq_mode::deterministic) == {smem(r, False)},\n"
                       f"              \"kernels.tsv: shared memory of {r['name']}\");")
    out.append("} /* namespace fwbwd */\n" if varlen else "\n} /* namespace fwbwd */\n")
    flag = ", true" if varlen else ""
    for r in recs:
        names = [n for n, _, _ in structs(r)]
        for dt, T in dtypes_of(r):
            call = (f"cores_launch<{T}, fwbwd::{names[0]}{flag}>" if cores
                    else f"tf32_launch<fwbwd::{names[0]}, fwbwd::{names[1]}{flag}>" if tf32
                    else f"tc_launch<{T}, fwbwd::{names[0]}, fwbwd::{names[1]}{flag}>")
            out.append(f'extern "C" {PROTO.format(launch_name(r, dt, varlen))}\n'
                       f"{{\n    return fwbwd::{call}(a, atomic_dq, stream);\n}}")
    return "\n".join(out) + "\n"


def dtypes_of(r):
    """The element types of a record's launches: CUDA cores all three, the tf32 records f32, the others f16/bf16."""
    return {"bwd.cores": DTYPES_CORES, "bwd.tf32": (("f32", "float"),)}.get(r["family"], DTYPES)


def records_file(recs):
    out = [f"/* {HEADER}\n * The backward's records (bwd/params.h), head dims ascending, in the table's order within one. */",
           '#include "backends/cuda/bwd/params.h"', "", 'extern "C" {']
    for r in recs:
        for varlen in (False, True) if r["varlen"] else (False,):
            for dt, _ in dtypes_of(r):
                out.append(PROTO.format(launch_name(r, dt, varlen)) + ";")
    out.append("}\n")
    out.append("/* name, kernel, arch, d, bm, bn, warps, stages, sub_m, dq_kernel, dq_warps, dq_mt, dq_bn, fuse_dq,\n"
               " * smem_atomic, smem_deterministic, f32, f16, bf16, varlen_f32, varlen_f16, varlen_bf16 */")
    out.append('extern "C" const fw_bwd_record fw_bwd_records[] = {')
    for r in recs:
        q = r["dq"] or dict(kind=None, warps=0, mt=0, bn=0)
        has = {dt for dt, _ in dtypes_of(r)}
        launches = ", ".join(launch_name(r, dt) if dt in has else "NULL" for dt in ("f32", "f16", "bf16"))
        ragged = ", ".join(launch_name(r, dt, True) if r["varlen"] and dt in has else "NULL"
                           for dt in ("f32", "f16", "bf16"))
        out.append(f'    {{"{r["name"]}", {KERNEL[r["family"]]}, {ARCH[r["arch"]]}, {r["d"]}, {r["bm"]}, {r["bn"]}, '
                   f'{r["warps"]}, {r["stages"]}, {r["qs"]}, {DQ_KERNEL.get(q["kind"], "FW_BWD_DQ_CORES")}, {q["warps"]}, '
                   f'{q["mt"]}, {q["bn"]}, {int(r["fuse"])},\n     {smem(r, True)}, {smem(r, False)}, {launches},\n'
                   f'     {ragged}}},')
    out.append("};")
    out.append('extern "C" const int fw_bwd_nrecords = (int)(sizeof fw_bwd_records / sizeof fw_bwd_records[0]);')
    return "\n".join(out) + "\n"


def files(recs):
    """The backward's generated files by name: per head dim the tensor-core and CUDA-core instantiations, dense and
    ragged, and the records."""
    out = {}
    kind = {"bwd.cores": "cores", "bwd.tf32": "tf32"}
    for d in sorted({r["d"] for r in recs}):
        for k in ("tc", "cores", "tf32"):
            some = [r for r in recs if r["d"] == d and kind.get(r["family"], "tc") == k]
            if some:
                out[f"bwd_{k}_d{d}.cu"] = instantiation_file(d, some, k)
            ragged = [r for r in some if r["varlen"]]
            if ragged:
                out[f"bwd_{k}_d{d}_varlen.cu"] = instantiation_file(d, ragged, k, True)
    out["bwd_records.cu"] = records_file(recs)
    return out
