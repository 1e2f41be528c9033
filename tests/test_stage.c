/* cuda-flash's staging rule (src/backends/cuda/common/stage.h) on the host, no GPU needed: which problems stage
 * which tensors (head dims off the multiples of 8, base pointers and strides off 16 bytes; not size-1 dimensions'
 * strides, f32, the CPU, KV caches or head dims above 256), the staged problem's shape (head dim rounded up to 8,
 * contiguous (B, S, H, Dp) strides, packed tensors with total rows, 16-byte aligned placeholders, the tensors read
 * in place untouched), when the backward stages (where the tensor cores then take the problem, and only then), and
 * the refusal of a forward that would stage under a context workspace. The GPU tests run the staged calls
 * (tests/attention --section headdims, gpu_serving, python/tests/test_fa_grid.py). A CPU-only build has no staging. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

#ifndef FW_HAVE_CUDA
int main(void)
{
    fwt_skip("test_stage: built without CUDA: cuda-flash and its staging are not compiled in");
    return fwt_finish("test_stage", 0.0);
}
#else
#include "backends/cuda/common/stage.h"

#include "fake_problem.h"

/* A dense f16 forward (backward: with dout, dq, dk, dv too). */
static fw_problem dense(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, int backward)
{
    return fake_dense(B, H, Hkv, Lq, Lk, D, FW_F16, backward);
}

static int aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* Is tensor ptr of s staged as a contiguous (nb, ns, nh, dp) tensor (not at its caller's address `was`)? */
static int staged_as(const void *ptr, const int64_t *st, const void *was, int64_t nh, int64_t ns, int64_t dp)
{
    return ptr != was && aligned16(ptr) && st[0] == ns * nh * dp && st[1] == dp && st[2] == nh * dp && st[3] == 1;
}

static int same_strides(const int64_t *a, const int64_t *b) { return !memcmp(a, b, 4 * sizeof *a); }

static void which_problems(void)
{
    fw_problem p = dense(2, 4, 2, 100, 120, 64, 0);
    fwt_case(!fw_stage_needed(&p), "D 64, aligned rows: read in place");
    p = dense(2, 4, 2, 100, 120, 59, 0);
    fwt_case(fw_stage_needed(&p), "D 59: staged");
    p.dtype = FW_F32;
    fwt_case(!fw_stage_needed(&p), "D 59 f32: not staged (cuda-flash-f32 reads any head dim)");
    p = dense(2, 4, 2, 100, 120, 59, 0);
    p.device.kind = FW_DEVICE_CPU;
    fwt_case(!fw_stage_needed(&p), "D 59 on the CPU: not staged");
    p = dense(2, 4, 2, 100, 120, 264, 0);
    fwt_case(!fw_stage_needed(&p), "D 264: not staged (above cuda-flash's 256)");
    p = dense(2, 4, 2, 100, 120, 59, 0);
    p.kind = FW_CALL_KVCACHE;
    fwt_case(!fw_stage_needed(&p), "D 59 KV cache: not staged (the cache is used in place)");
    p = dense(2, 4, 2, 100, 120, 64, 0);
    p.q_stride[2] = 67;
    fwt_case(fw_stage_needed(&p), "D 64, q row stride 67: staged");
    p = dense(2, 4, 2, 100, 120, 64, 0);
    p.v = ADDR(0x300002);
    fwt_case(fw_stage_needed(&p), "D 64, v one element past a 16-byte boundary: staged");
    p = dense(1, 1, 1, 100, 120, 64, 0);
    p.q_stride[0] = p.q_stride[1] = 12345;
    fwt_case(!fw_stage_needed(&p), "D 64, odd strides of size-1 batch and head dims (never used): read in place");
    p = dense(2, 4, 2, 100, 120, 64, 1);
    p.dq_stride[1] = 100 * 64 + 4;
    fwt_case(fw_stage_needed(&p), "backward D 64, dq head stride off 8 elements: staged");
}

static void staged_shapes(void)
{
    fw_problem p = dense(2, 4, 2, 100, 120, 59, 1), s;
    fw_stage_shape(&p, &s);
    fwt_case(s.head_dim == 64 && s.seqlen_q == 100 && s.seqlen_k == 120 && s.scale == p.scale &&
                 staged_as(s.q, s.q_stride, p.q, 4, 100, 64) && staged_as(s.o, s.o_stride, p.o, 4, 100, 64) &&
                 staged_as(s.dout, s.do_stride, p.dout, 4, 100, 64) && staged_as(s.dq, s.dq_stride, p.dq, 4, 100, 64) &&
                 staged_as(s.k, s.k_stride, p.k, 2, 120, 64) && staged_as(s.v, s.v_stride, p.v, 2, 120, 64) &&
                 staged_as(s.dk, s.dk_stride, p.dk, 2, 120, 64) && staged_as(s.dv, s.dv_stride, p.dv, 2, 120, 64) &&
                 s.lse == p.lse,
             "backward D 59: every tensor staged as contiguous (B, S, H, 64), the scale and LSE kept");
    fwt_case(!fw_stage_needed(&s), "the staged problem needs no staging");
    p = dense(2, 4, 2, 100, 120, 200, 0);
    p.q_stride[2] = 4 * 203; /* a BSHD-like row stride: 203 elements a head, 406 bytes */
    p.q_stride[1] = 203;
    p.q_stride[0] = 100 * 4 * 203;
    fw_stage_shape(&p, &s);
    fwt_case(s.head_dim == 200 && staged_as(s.q, s.q_stride, p.q, 4, 100, 200) && s.k == p.k && s.v == p.v &&
                 s.o == p.o && same_strides(s.k_stride, p.k_stride) && same_strides(s.o_stride, p.o_stride),
             "D 200, q head stride 203: q staged alone, k, v, o read and written in place");
    p = dense(3, 4, 2, 50, 60, 3, 0);
    p.kind = FW_CALL_VARLEN;
    p.cu_seqlens_q = (const int32_t *)ADDR(0x900000);
    p.cu_seqlens_k = (const int32_t *)ADDR(0x910000);
    p.total_q = 77;
    p.total_k = 91;
    contiguous(p.q_stride, 4, 77, 3); contiguous(p.o_stride, 4, 77, 3);
    contiguous(p.k_stride, 2, 91, 3); contiguous(p.v_stride, 2, 91, 3);
    fw_stage_shape(&p, &s);
    fwt_case(fw_stage_needed(&p) && s.head_dim == 8 && staged_as(s.q, s.q_stride, p.q, 4, 77, 8) &&
                 staged_as(s.k, s.k_stride, p.k, 2, 91, 8) && s.cu_seqlens_q == p.cu_seqlens_q && s.total_q == 77,
             "ragged D 3: packed tensors staged with their total rows (1, total, H, 8), the offsets kept");
}

static void backward_choice(void)
{
    const fw_knobs *k = &fw_knobs_defaults;
    fw_knobs cores = fw_knobs_defaults;
    cores.cuda_bwd_tensor_cores = 0;
    fw_problem p = dense(2, 4, 2, 100, 120, 59, 1);
    fwt_case(fw_stage_backward_wanted(&p, k), "backward D 59: staged for the tensor cores");
    fwt_case(!fw_stage_backward_wanted(&p, &cores), "backward D 59 with FW_CUDA_BWD_TC=0: the CUDA cores, in place");
    p = dense(2, 4, 2, 100, 120, 111, 1);
    fwt_case(fw_stage_backward_wanted(&p, k), "backward D 111: staged (as 112) for the tensor cores");
    p = dense(2, 4, 2, 100, 120, 255, 1);
    fwt_case(fw_stage_needed(&p) && !fw_stage_backward_wanted(&p, k),
             "backward D 255: the CUDA cores read it in place (no tensor cores above 128)");
    p = dense(2, 4, 2, 100, 120, 64, 1);
    fwt_case(!fw_stage_backward_wanted(&p, k), "backward D 64, aligned: in place");
    p.o_stride[2] = 65;
    p.o_stride[1] = 100 * 65;
    p.o_stride[0] = 4 * 100 * 65;
    fwt_case(fw_stage_needed(&p) && !fw_stage_backward_wanted(&p, k),
             "backward D 64, o rows off 16 bytes: in place (the tensor cores do not read o)");
    p = dense(2, 4, 2, 100, 120, 64, 1);
    p.dk = ADDR(0x700008);
    fwt_case(fw_stage_backward_wanted(&p, k), "backward D 64, dk 8 bytes off: staged");
    p = dense(2, 4, 2, 100, 120, 59, 1);
    p.dtype = FW_F32;
    fwt_case(!fw_stage_backward_wanted(&p, k), "backward D 59 f32: in place");
}

static void workspace_refusal(void)
{
    char why[512] = "";
    fw_problem p = dense(2, 4, 2, 100, 120, 59, 0);
    p.workspace = ADDR(0xa00000);
    p.workspace_bytes = 1 << 20;
    const int ok = fw_stage_allowed(&p, why, sizeof why);
    fwt_case(!ok && fwt_contains(why, "head_dim 59") && fwt_contains(why, "workspace"),
             "forward D 59 under a context workspace: refused: %s", why);
    p = dense(2, 4, 2, 100, 120, 64, 0);
    p.workspace = ADDR(0xa00000);
    fwt_case(fw_stage_allowed(&p, why, sizeof why), "forward D 64 under a context workspace: nothing to stage");
    p = dense(2, 4, 2, 100, 120, 59, 1);
    p.workspace = ADDR(0xa00000);
    fwt_case(fw_stage_allowed(&p, why, sizeof why),
             "backward D 59 under a context workspace: allowed (the backward's workspace is allocated anyway)");
    p = dense(2, 4, 2, 100, 120, 59, 0);
    fwt_case(fw_stage_allowed(&p, why, sizeof why), "forward D 59 without a workspace: allowed");
}

int main(void)
{
    const double t0 = fw_now_seconds();
    which_problems();
    staged_shapes();
    backward_choice();
    workspace_refusal();
    return fwt_finish("test_stage", fw_now_seconds() - t0);
}
#endif
