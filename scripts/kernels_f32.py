"""cuda-flash-f32's family (f32.*) of scripts/gen_kernels.py: its records' options, names and checks, the shared
memory of their kernels per precision form (exact, or tf32 and 3xtf32), and the files generated/f32_d<D>.cu and
f32_records.cu."""
import re

from kernels_common import ARCH, HEADER, check_unique, fail, ident

KERNEL = {"f32.exact": "FW_F32_EXACT", "f32.mma": "FW_F32_MMA", "f32.wg": "FW_F32_WG", "f32.wg1": "FW_F32_WG1",
          "f32.ws": "FW_F32_WS"}
FORMS = {"f32.exact": ("exact",), "f32.mma": ("tf32", "tf32x3"), "f32.wg": ("tf32", "tf32x3"),
         "f32.wg1": ("tf32", "tf32x3"), "f32.ws": ("tf32", "tf32x3")}
LAUNCH = {"f32.exact": "exact_launch", "f32.mma": "mma_launch", "f32.wg": "wg_launch", "f32.wg1": "wg1_launch",
          "f32.ws": "ws_launch"}
INCLUDE = {"f32.exact": "kernel_exact.cuh", "f32.mma": "kernel_mma.cuh", "f32.wg": "kernel_wg.cuh",
           "f32.wg1": "kernel_wg1.cuh", "f32.ws": "kernel_ws.cuh"}
PROTO = ("cudaError_t {}(const fw_f32_params *a, const fw_f32_plan *plan, int batch, cudaStream_t stream, "
         "const fw_knobs *k)")


def defaults(r):
    """cuda-flash-f32's fields before the options."""
    return dict(tm=0, kv1=False, unroll=4, few=0, local=0, persist=False, short=False, fallback=None)


def option(r, o):
    """Parses option o of an f32 record into r; False where it does not apply to the record's family."""
    fam = r["family"]
    if fam == "f32.exact" and re.fullmatch(r"tm\d+", o):
        r["tm"] = int(o[2:])
    elif fam == "f32.exact" and o == "kv1":
        r["kv1"] = True
    elif fam == "f32.exact" and re.fullmatch(r"unr\d+", o):
        r["unroll"] = int(o[3:])
    elif fam == "f32.exact" and re.fullmatch(r"few=\d+", o):
        r["few"] = int(o[4:])
    elif fam == "f32.ws" and re.fullmatch(r"local=\d+", o):
        r["local"] = int(o[6:])
    elif fam == "f32.ws" and o == "persist":
        r["persist"] = True
    elif fam == "f32.ws" and o == "short":
        r["short"] = True
    elif fam == "f32.ws" and o.startswith("fallback="):
        r["fallback"] = o[len("fallback="):]
    else:
        return False
    return True


def derived_name(r):
    """The configuration names as cuda-flash-f32 has always spelled them (tuning tables hold them)."""
    fam = r["family"]
    if fam == "f32.exact":
        return f"bm{r['bm']}-bn{r['bn']}-tm{r['tm']}" + ("-kv1" if r["kv1"] else "")
    if fam == "f32.mma":
        return f"bm{r['bm']}-bn{r['bn']}-w{r['warps']}"
    if fam == "f32.ws":
        kind = "ws" + ("f" if r["local"] else "") + ("p" if r["persist"] else "") + ("s" if r["short"] else "")
        return f"{kind}-bm{r['bm']}-bn{r['bn']}"
    return f"{fam[4:]}-bm{r['bm']}-bn{r['bn']}"


def check_record(r):
    where = f"kernels.tsv:{r['line']}"
    if r["name"] != derived_name(r):
        fail(f"{where}: the name of these fields is {derived_name(r)}, not {r['name']}")
    fam, d = r["family"], r["d"]
    if d not in (32, 64, 128, 256):
        fail(f"{where}: an f32 record's head dim is 32, 64, 128 or 256")
    if fam == "f32.exact":
        if (r["arch"] != "sm80" or not r["tm"] or r["bm"] % r["tm"] or r["bm"] // r["tm"] * 8 != 32 * r["warps"]
                or r["bn"] % 8 or r["stages"] != (1 if r["kv1"] else 2)):
            fail(f"{where}: an exact record is sm80 with tmN, warps = bm / tm / 4, bn a multiple of 8, stages 1 (kv1) or 2")
    elif fam == "f32.mma":
        if r["arch"] != "sm80" or r["bm"] % 64 or r["warps"] != 4 or r["bn"] % 8 or r["stages"] != 2:
            fail(f"{where}: an mma record is sm80, 4 warps of bm / 64 m16 tiles, 2 stages")
    else:
        shape = {"f32.wg": (128, 8, 2), "f32.wg1": (64, 4, 1), "f32.ws": (128, 12, 2)}[fam]
        if r["arch"] != "sm90a" or d != 64 or r["bn"] != 64 or (r["bm"], r["warps"], r["stages"]) != shape:
            fail(f"{where}: a {fam} record is sm90a, d 64, bn 64, bm/warps/stages {shape}")
        if fam == "f32.ws" and (r["persist"] and r["local"] or r["short"] != bool(r["fallback"])
                                or r["short"] and not r["persist"]):
            fail(f"{where}: a ws record is local=N or persist (short with a fallback)")


def check_table(recs):
    """The checks across records: unique names, and each short ws record's fallback a persistent ws record (not
    short) of its head dim."""
    by_name = check_unique(recs)
    for r in recs:
        if r["family"] == "f32.ws" and r["fallback"]:
            f = by_name.get((r["d"], r["fallback"]))
            if not f or f["family"] != "f32.ws" or f["short"] or not f["persist"]:
                fail(f"kernels.tsv:{r['line']}: fallback {r['fallback']} is not a persistent f32.ws record of head dim {r['d']}")


def smem(r, form):
    """Dynamic shared memory of the record's kernel in one precision form, as the kernel's geometry computes it."""
    fam, d, bm, bn = r["family"], r["d"], r["bm"], r["bn"]
    if fam == "f32.exact":
        kvb = 1 if r["kv1"] else 2
        return (bm * (d + 4) + 2 * kvb * bn * (d + 4) + bm * (bn + 8)) * 4
    if fam == "f32.mma":
        return (bm * (d + 8) + 2 * bn * (d + 8) + 2 * bn * (d + 4)) * 4
    raw, part = 2 * 64 * 64 * 4, 64 * 64 * 4
    kst = (2 if form == "tf32x3" else 1) * part
    if fam == "f32.wg":
        return 2 * raw + 2 * kst + 3 * kst + 1024
    if fam == "f32.wg1":
        return raw + kst + max(kst, 64 * 68 * 4) + 1024
    off_bar = 2 * kst + 3 * kst + ((1 if kst >= raw else 2) * raw if r["local"] or r["persist"] else 0)
    return off_bar + 128 + (128 * 64 * 4 if r["persist"] else 0) + 1024


def launch_name(r, form):
    return f"fw_f32_{ident(r)}_{form}"


def config_struct(r):
    i, fam = ident(r), r["family"]
    if fam == "f32.exact":
        body = (f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}, TM = {r['tm']}, "
                f"UNROLL = {r['unroll']};\n"
                f"    static constexpr bool SINGLE_KV = {'true' if r['kv1'] else 'false'};\n")
        asserts = [f"exact_geom<{i}>::SMEM == {smem(r, 'exact')} && exact_geom<{i}>::NT == {32 * r['warps']}"]
    elif fam == "f32.ws":
        body = (f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}, LOCAL_TILES = {r['local']};\n"
                f"    static constexpr bool PERSISTENT = {'true' if r['persist'] else 'false'}, "
                f"SHORT_KEYS = {'true' if r['short'] else 'false'};\n")
        asserts = [f"ws_geom<fwparts::{f}, {i}>::SMEM == {smem(r, f)}" for f in FORMS[fam]]
    else:
        body = f"    static constexpr int D = {r['d']}, BM = {r['bm']}, BN = {r['bn']}" + \
               (f", WARPS = {r['warps']};\n" if fam == "f32.mma" else ";\n")
        geom = {"f32.mma": "mma_geom<{i}>", "f32.wg": "wg_geom<fwparts::{f}>", "f32.wg1": "wg1_geom<fwparts::{f}>"}[fam]
        asserts = [f"{geom.format(i=i, f=f)}::SMEM == {smem(r, f)}" for f in FORMS[fam]]
        if fam == "f32.mma":
            asserts = asserts[:1]
    return (f"struct {i} {{\n{body}}};\n" +
            "".join(f"static_assert({a}, \"kernels.tsv: shared memory\");\n" for a in asserts))


def instantiation_file(d, recs):
    out = [f"/* {HEADER}\n * cuda-flash-f32's instantiations for padded head dim {d}: per record a configuration and a launch\n"
           " * function per precision form (f32/params.h: fw_f32_record, generated/f32_records.cu). */"]
    for fam in INCLUDE:
        if any(r["family"] == fam for r in recs):
            out.append(f'#include "backends/cuda/f32/{INCLUDE[fam]}"')
    out.append("\nnamespace fwf32 {\n")
    for r in recs:
        out.append(config_struct(r))
    out.append("} /* namespace fwf32 */\n")
    for r in recs:
        for f in FORMS[r["family"]]:
            targs = (f"fwf32::{ident(r)}" if r["family"] == "f32.exact" else f"fwparts::{f}, fwf32::{ident(r)}")
            out.append(f'extern "C" {PROTO.format(launch_name(r, f))}\n'
                       f"{{\n    return fwf32::{LAUNCH[r['family']]}<{targs}>(a, plan, batch, stream, k);\n}}")
    return "\n".join(out) + "\n"


def records_file(recs):
    out = [f"/* {HEADER}\n * cuda-flash-f32's records (f32/params.h), head dims ascending, in the table's order within one. */",
           '#include "backends/cuda/f32/params.h"', "", 'extern "C" {']
    for r in recs:
        for f in FORMS[r["family"]]:
            out.append(PROTO.format(launch_name(r, f)) + ";")
    out.append("}\n")
    out.append("/* name, kernel, arch, d, bm, bn, warps, stages, tm, few_blocks, local_tiles, persistent, short_keys,\n"
               " * fallback, then {launch, smem} for exact, tf32, 3xtf32 */")
    out.append('extern "C" const fw_f32_record fw_f32_records[] = {')
    for r in recs:
        forms = ", ".join(f"{{{launch_name(r, f)}, {smem(r, f)}}}" if f in FORMS[r["family"]] else "{NULL, 0}"
                          for f in ("exact", "tf32", "tf32x3"))
        fallback = f'"{r["fallback"]}"' if r["fallback"] else "NULL"
        out.append(f'    {{"{r["name"]}", {KERNEL[r["family"]]}, {ARCH[r["arch"]]}, {r["d"]}, {r["bm"]}, {r["bn"]}, '
                   f'{r["warps"]}, {r["stages"]}, {r["tm"]}, {r["few"]}, {r["local"]}, {int(r["persist"])}, '
                   f'{int(r["short"])}, {fallback},\n     {forms}}},')
    out.append("};")
    out.append('extern "C" const int fw_f32_nrecords = (int)(sizeof fw_f32_records / sizeof fw_f32_records[0]);')
    return "\n".join(out) + "\n"


def files(recs):
    """cuda-flash-f32's generated files by name: per head dim the instantiations, and the records."""
    out = {}
    for d in sorted({r["d"] for r in recs}):
        out[f"f32_d{d}.cu"] = instantiation_file(d, [r for r in recs if r["d"] == d])
    out["f32_records.cu"] = records_file(recs)
    return out
