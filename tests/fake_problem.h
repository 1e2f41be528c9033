/* Problems for the host-side tests of cuda-flash's rules (test_stage, test_bwd_plan): tensors at fake device
 * addresses, which the rules read and never dereference. Header-only; everything is static. */
#ifndef FW_TEST_FAKE_PROBLEM_H
#define FW_TEST_FAKE_PROBLEM_H

#include <stdint.h>
#include <string.h>
#include "core/problem.h"

#define ADDR(n) ((void *)(uintptr_t)(n))

/* Strides of a contiguous (B, H, L, D) tensor. */
static inline void contiguous(int64_t *s, int64_t h, int64_t l, int64_t d)
{
    s[0] = h * l * d;
    s[1] = l * d;
    s[2] = d;
    s[3] = 1;
}

/* A dense forward of dtype on cuda:0, contiguous (B, H, L, D) tensors at 256-byte aligned addresses; backward: with
 * dout, dq, dk, dv too. */
static inline fw_problem fake_dense(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype dtype,
                                    int backward)
{
    fw_problem p;
    memset(&p, 0, sizeof p);
    p.batch = B; p.heads = H; p.kv_heads = Hkv; p.group = H / Hkv;
    p.seqlen_q = Lq; p.seqlen_k = Lk; p.head_dim = D;
    p.dtype = dtype;
    p.device.kind = FW_DEVICE_CUDA;
    p.kind = FW_CALL_DENSE;
    p.q = ADDR(0x100000); p.k = ADDR(0x200000); p.v = ADDR(0x300000); p.o = ADDR(0x400000);
    contiguous(p.q_stride, H, Lq, D); contiguous(p.o_stride, H, Lq, D);
    contiguous(p.k_stride, Hkv, Lk, D); contiguous(p.v_stride, Hkv, Lk, D);
    if (backward) {
        p.dout = ADDR(0x500000); p.dq = ADDR(0x600000); p.dk = ADDR(0x700000); p.dv = ADDR(0x800000);
        contiguous(p.do_stride, H, Lq, D); contiguous(p.dq_stride, H, Lq, D);
        contiguous(p.dk_stride, Hkv, Lk, D); contiguous(p.dv_stride, Hkv, Lk, D);
    }
    return p;
}

#endif
