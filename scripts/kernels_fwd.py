"""The f16/bf16 forward's family (fwd.*, cuda-flash) of scripts/gen_kernels.py: its records' options, names and
checks, their shared memory, and the files generated/fwd_d<D>.cu, fwd_d<D>_varlen.cu and fwd_records.cu."""
import re

from kernels_common import ARCH, DTYPES, HEADER, check_unique, fail, ident

KERNEL = {"fwd.mma": "FW_FWD_MMA", "fwd.wg": "FW_FWD_WG", "fwd.ws": "FW_FWD_WS"}
LAUNCH = {"fwd.mma": "mma_launch", "fwd.wg": "wg_launch", "fwd.ws": "ws_launch"}
PROTO = "cudaError_t {}(const fw_fwd_params *p, int batch, const fw_cuda_seqs *{}, cudaStream_t stream)"


def defaults(r):
    """The forward's fields before the options."""
    return dict(qr=False, sub=r["bn"], pp=False, varlen=False, persist=False, fallback=None)


def option(r, o):
    """Parses option o of a forward record into r; False where it does not apply to the record's family."""
    fam = r["family"]
    if o == "qr" and fam == "fwd.mma":
        r["qr"] = True
    elif re.fullmatch(r"sb\d+", o) and fam == "fwd.mma":
        r["sub"] = int(o[2:])
    elif o == "pp" and fam == "fwd.ws":
        r["pp"] = True
    elif o == "varlen" and fam == "fwd.ws":
        r["varlen"] = True
    elif o == "persist" and fam == "fwd.ws":
        r["persist"] = True
    elif o.startswith("fallback=") and fam == "fwd.ws":
        r["fallback"] = o[len("fallback="):]
    else:
        return False
    return True


def derived_name(r):
    """The configuration names as cuda-flash has always spelled them (tuning tables hold them)."""
    if r["family"] == "fwd.ws":
        return (f"ws{'p' if r['persist'] else ''}-bm{r['bm']}-bn{r['bn']}-s{r['stages']}" + ("-pp" if r["pp"] else "") +
                ("-varlen" if r["varlen"] else ""))
    if r["family"] == "fwd.wg":
        return f"wg-bm{r['bm']}-bn{r['bn']}-s{r['stages']}"
    sub = f"-sb{r['sub']}" if r["sub"] != r["bn"] else ""
    return f"bm{r['bm']}-bn{r['bn']}-w{r['warps']}-s{r['stages']}" + ("-qr" if r["qr"] else "") + sub


def check_record(r):
    where = f"kernels.tsv:{r['line']}"
    if r["name"] != derived_name(r):
        fail(f"{where}: the name of these fields is {derived_name(r)}, not {r['name']}")
    if r["family"] == "fwd.mma":
        if r["arch"] != "sm80" or r["bm"] % (16 * r["warps"]) or r["bn"] % r["sub"] or r["sub"] % 16:
            fail(f"{where}: an mma record is sm80, bm a multiple of 16 warps, sb dividing bn")
    else:
        nwg = r["warps"] // 4 - (1 if r["family"] == "fwd.ws" else 0)
        if (r["arch"] != "sm90a" or r["d"] % 64 or r["bn"] % (32 if r["bm"] == 192 else 64) or r["bm"] != 64 * nwg
                or r["warps"] % 4):
            fail(f"{where}: a wgmma record is sm90a, d and bn multiples of 64 (bn of 32 at bm 192), bm 64 per consumer "
                 "warpgroup")
        if r["family"] == "fwd.ws" and (r["bm"] not in (128, 192) or bool(r["fallback"]) == r["varlen"]):
            fail(f"{where}: a ws record has two or three consumer warpgroups (bm 128 or 192) and a fallback, unless "
                 "it is a ragged (varlen) one: those have none (the serving kernel runs where TMA cannot)")
        if r["family"] == "fwd.ws" and r["pp"] and r["bm"] != 128:
            fail(f"{where}: ping-pong takes turns between two consumer warpgroups (bm 128)")
        if r["family"] == "fwd.ws" and r["persist"] and r["varlen"]:
            fail(f"{where}: a ragged (varlen) ws record takes its tile from its grid slot: not persist")


def check_table(recs):
    """The checks across records: unique names, and each dense ws record's fallback a wg record of its head dim."""
    by_name = check_unique(recs)
    for r in recs:
        if r["family"] == "fwd.ws" and not r["varlen"]:
            f = by_name.get((r["d"], r["fallback"]))
            if not f or f["family"] != "fwd.wg":
                fail(f"kernels.tsv:{r['line']}: fallback {r['fallback']} is not a wg record of head dim {r['d']}")
            r["fallback_ident"] = ident(f)


def smem(r):
    if r["family"] == "fwd.mma":
        return (r["bm"] + 2 * r["stages"] * r["bn"]) * (r["d"] + 8) * 2
    wg = (r["bm"] + 2 * r["stages"] * r["bn"]) * r["d"] * 2 + 1024
    if r["family"] != "fwd.ws":
        return wg
    own_stage = r["bm"] * (r["d"] + 8) * 2  # persist: O's staging area, where it fits (else it stages in Q)
    return wg + 256 + (own_stage if r["persist"] and wg + 256 + own_stage <= 232448 else 0)


def config_struct(r):
    i, b = ident(r), "true" if r["qr"] else "false"
    if r["family"] == "fwd.mma":
        return (f"struct {i} {{\n"
                f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}, WARPS = {r['warps']}, "
                f"STAGES = {r['stages']}, SUB_N = {r['sub']};\n"
                f"    static constexpr bool Q_IN_REGS = {b};\n}};\n"
                f"static_assert(mma_smem_bytes<{i}>() == {smem(r)}, \"kernels.tsv: shared memory\");\n")
    if r["family"] == "fwd.wg":
        return (f"struct {i} {{\n"
                f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}, WARPGROUPS = {r['warps'] // 4}, "
                f"STAGES = {r['stages']};\n}};\n"
                f"static_assert(wg_smem_bytes<{i}>() == {smem(r)}, \"kernels.tsv: shared memory\");\n")
    fallback = "" if r["varlen"] else f"    using FALLBACK = {r['fallback_ident']};\n"
    return (f"struct {i} {{\n"
            f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}, STAGES = {r['stages']};\n"
            f"    static constexpr bool PINGPONG = {'true' if r['pp'] else 'false'};\n"
            f"    static constexpr bool VARLEN = {'true' if r['varlen'] else 'false'};\n"
            f"    static constexpr bool PERSISTENT = {'true' if r['persist'] else 'false'};\n"
            f"{fallback}}};\n"
            f"static_assert(ws_smem_bytes<{i}>() == {smem(r)}, \"kernels.tsv: shared memory\");\n")


def launch_name(r, dt):
    return f"fw_fwd_{ident(r)}_{dt}"


def proto(r, dt, decl=False):
    """The launch function's prototype; seqs is named only where the kernel reads it (no unused parameter)."""
    return PROTO.format(launch_name(r, dt), "seqs" if r["family"] == "fwd.ws" or decl else "")


def instantiation_file(d, recs):
    fams = {r["family"] for r in recs}
    what = "ragged (varlen) " if recs[0]["varlen"] else ""
    out = [f"/* {HEADER}\n * The f16/bf16 forward's {what}instantiations for padded head dim {d}: per record a configuration and a\n"
           " * launch function per element type (fwd/params.h: fw_fwd_record, generated/fwd_records.cu). */"]
    if "fwd.mma" in fams:
        out.append('#include "backends/cuda/fwd/kernel_mma.cuh"')
    if "fwd.ws" in fams:
        out.append('#include "backends/cuda/fwd/kernel_ws.cuh"')
    elif "fwd.wg" in fams:
        out.append('#include "backends/cuda/fwd/kernel_wg.cuh"')
    out.append("\nnamespace fwfwd {\n")
    for r in recs:
        out.append(config_struct(r))
    out.append("} /* namespace fwfwd */\n")
    for r in recs:
        seqs = "seqs, " if r["family"] == "fwd.ws" else ""
        for dt, T in DTYPES:
            out.append(f'extern "C" {proto(r, dt)}\n'
                       f"{{\n    return fwfwd::{LAUNCH[r['family']]}<{T}, fwfwd::{ident(r)}>(p, batch, {seqs}stream);\n}}")
    return "\n".join(out) + "\n"


def records_file(recs):
    out = [f"/* {HEADER}\n * The f16/bf16 forward's records (fwd/params.h), head dims ascending, in the table's order within one:\n"
           " * the dense calls' table and the ragged (varlen) calls' table. */",
           '#include "backends/cuda/fwd/params.h"', "", 'extern "C" {']
    for r in recs:
        for dt, _ in DTYPES:
            out.append(proto(r, dt, decl=True) + ";")
    out.append("}")
    for table, count, varlen in (("fw_fwd_records", "fw_fwd_nrecords", False),
                                 ("fw_fwd_varlen_records", "fw_fwd_nvarlen_records", True)):
        out.append("\n/* name, kernel, arch, d, bm, bn, warps, stages, q_in_regs, sub_n, pingpong, persistent, smem, f16, bf16 */")
        out.append(f'extern "C" const fw_fwd_record {table}[] = {{')
        for r in (r for r in recs if r["varlen"] == varlen):
            out.append(f'    {{"{r["name"]}", {KERNEL[r["family"]]}, {ARCH[r["arch"]]}, {r["d"]}, {r["bm"]}, {r["bn"]}, '
                       f'{r["warps"]}, {r["stages"]}, {int(r["qr"])}, {r["sub"]}, {int(r["pp"])}, {int(r["persist"])}, {smem(r)},\n'
                       f'     {launch_name(r, "f16")}, {launch_name(r, "bf16")}}},')
        out.append("};")
        out.append(f'extern "C" const int {count} = (int)(sizeof {table} / sizeof {table}[0]);')
    return "\n".join(out) + "\n"


def files(recs):
    """The forward's generated files by name: per head dim the dense and the ragged instantiations, and the records."""
    out = {}
    for d in sorted({r["d"] for r in recs}):
        for varlen, suffix in ((False, ""), (True, "_varlen")):
            some = [r for r in recs if r["d"] == d and r["varlen"] == varlen]
            if some:
                out[f"fwd_d{d}{suffix}.cu"] = instantiation_file(d, some)
    out["fwd_records.cu"] = records_file(recs)
    return out
