/* cpu-naive: the seeds' baseline. Per (batch, head): S = scale·Q·Kᵀ into a materialised Lq×Lk
 * float matrix, a row softmax over it, then O = P·V — three passes, O(L²) memory. */
#include <math.h>
#include <stdlib.h>
#include "cpu_common.h"

static int naive_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (fw_problem_ragged_backward(p)) return fw_why(why, why_len, "%s", FW_RAGGED_BACKWARD_WHERE);
    if (p->device.kind != FW_DEVICE_CPU) return fw_why(why, why_len, "tensors are not on the cpu");
    if (p->precision != FW_PRECISION_EXACT)
        return fw_why(why, why_len, "runs float32/float64 arithmetic only; no reduced precision mode");
    if (p->kind != FW_CALL_DENSE)
        return fw_why(why, why_len, "cpu-naive runs the dense call only; ragged batches and KV caches run on "
                                    "cpu-flash and cpu-ref");
    const double bytes = (double)p->seqlen_q * (double)p->seqlen_k * 4.0;
    if (bytes > 8.0 * 1024 * 1024 * 1024)
        return fw_why(why, why_len, "the %lld x %lld score matrix needs %.1f GiB, above cpu-naive's 8 GiB limit",
                      (long long)p->seqlen_q, (long long)p->seqlen_k, bytes / (1u << 30));
    return 1;
}

static fw_status naive_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    const int64_t D = p->head_dim, Lq = p->seqlen_q, Lk = p->seqlen_k, BH = p->batch * p->heads;
    const int threads = fw_cpu_threads(ex, BH);
    size_t slice = fw_cpu_bytes(Lq * Lk, sizeof(float)); /* supports() bounds Lq·Lk */
    slice = fw_cpu_bytes_add(slice, fw_cpu_bytes(Lq * D, sizeof(float)));
    slice = fw_cpu_bytes_add(slice, 2 * fw_cpu_bytes(Lk * D, sizeof(float)));
    slice = fw_cpu_bytes_add(slice, fw_cpu_bytes(D, sizeof(float)) + fw_cpu_bytes(D, sizeof(double)));
    fw_cpu_scratch scratch;
    fw_status st = fw_cpu_scratch_alloc(&scratch, threads, slice, ex, "cpu-naive");
    if (st != FW_OK) return st;
#pragma omp parallel num_threads(threads)
    {
        char *cur = fw_cpu_scratch_mine(&scratch);
        float *S = (float *)fw_cpu_carve(&cur, Lq * Lk, sizeof(float));
        float *Q = (float *)fw_cpu_carve(&cur, Lq * D, sizeof(float));
        float *K = (float *)fw_cpu_carve(&cur, Lk * D, sizeof(float));
        float *V = (float *)fw_cpu_carve(&cur, Lk * D, sizeof(float));
        float *O = (float *)fw_cpu_carve(&cur, D, sizeof(float));
        double *acc = (double *)fw_cpu_carve(&cur, D, sizeof(double));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t b = bh / p->heads, h = bh % p->heads, hk = h / p->group;
            for (int64_t i = 0; i < Lq; i++) fw_cpu_load_row(Q + i * D, p->q, p->dtype, fw_off(p->q_stride, b, h, i), D);
            for (int64_t j = 0; j < Lk; j++) {
                fw_cpu_load_row(K + j * D, p->k, p->dtype, fw_off(p->k_stride, b, hk, j), D);
                fw_cpu_load_row(V + j * D, p->v, p->dtype, fw_off(p->v_stride, b, hk, j), D);
            }
            /* pass 1: S = scale · Q Kᵀ, masked entries -inf */
            for (int64_t i = 0; i < Lq; i++) {
                int64_t lo, hi;
                fw_key_range(p, i, &lo, &hi);
                float *srow = S + i * Lk;
                for (int64_t j = 0; j < Lk; j++) {
                    if (j < lo || j >= hi) { srow[j] = -INFINITY; continue; }
                    float dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += Q[i * D + d] * K[j * D + d];
                    srow[j] = dot * p->scale;
                }
            }
            /* pass 2: row softmax in place; LSE on the side */
            for (int64_t i = 0; i < Lq; i++) {
                float *srow = S + i * Lk;
                float m = -INFINITY;
                int has_nan = 0;
                for (int64_t j = 0; j < Lk; j++) {
                    if (srow[j] != srow[j]) has_nan = 1;
                    else if (srow[j] > m) m = srow[j];
                }
                double l = 0; /* in double: a float sum of 2^24 ones stops growing */
                const float mm = m == -INFINITY ? 0.0f : m;
                for (int64_t j = 0; j < Lk; j++) { srow[j] = expf(srow[j] - mm); l += srow[j]; }
                /* a +inf logit makes m = +inf and its weight inf - inf = NaN: the row is NaN (flashwatt.h) */
                const int nan_row = has_nan || l != l;
                const float inv = l > 0 ? (float)(1.0 / l) : 0.0f;
                for (int64_t j = 0; j < Lk; j++) srow[j] = nan_row ? NAN : srow[j] * inv;
                if (p->lse) p->lse[bh * Lq + i] = nan_row ? NAN : (l > 0 ? (float)(mm + log(l)) : -INFINITY);
            }
            /* pass 3: O = P · V, accumulated in double like the row sum (long rows of small weights) */
            for (int64_t i = 0; i < Lq; i++) {
                const float *prow = S + i * Lk;
                int64_t lo, hi;
                fw_key_range(p, i, &lo, &hi);
                for (int64_t d = 0; d < D; d++) acc[d] = 0;
                /* the visible keys only, so a masked key's inf/NaN in V cannot make 0·inf; a visible key's
                 * weight that underflowed to 0 still multiplies its NaN in (flashwatt.h) */
                for (int64_t j = lo; j < hi; j++) {
                    const float w = prow[j];
                    for (int64_t d = 0; d < D; d++) acc[d] += (double)w * V[j * D + d];
                }
                for (int64_t d = 0; d < D; d++) O[d] = (float)acc[d];
                fw_cpu_store_row(p->o, p->dtype, fw_off(p->o_stride, b, h, i), O, D);
            }
        }
    }
    fw_cpu_scratch_free(&scratch);
    return FW_OK;
}

const fw_backend fw_backend_cpu_naive = {
    .name = "cpu-naive",
    .description = "three passes over a materialised Lq x Lk score matrix (the seeds' baseline)",
    .device = FW_DEVICE_CPU,
    .available = fw_cpu_available,
    .supports = naive_supports,
    .configs = NULL,
    .forward = naive_forward,
    .backward = NULL,
};
