/* cpu-ref: attention accumulated in float64 — the oracle every other backend is tested against.
 * Straightforward on purpose: two passes over the visible keys of each query row. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "cpu_common.h"

static int ref_supports(const fw_problem *p, char *why, size_t why_len)
{
    if (p->device.kind != FW_DEVICE_CPU) return fw_why(why, why_len, "tensors are not on the cpu");
    if (p->precision != FW_PRECISION_EXACT)
        return fw_why(why, why_len, "runs float32/float64 arithmetic only; no reduced precision mode");
    return 1;
}

/* q·k and the logit scale·q·k as the float32 backends hold them: beyond float32's range they are
 * ±inf (the overflow rule of flashwatt.h), though this backend sums in double. */
static double float_range(double x) { return fabs(x) > FLT_MAX ? copysign(INFINITY, x) : x; }

/* One loop over (sequence, head, row) through the per-sequence accessors: dense, ragged and cached
 * problems alike (a dense problem is B sequences of Lq queries and Lk keys). */
static fw_status ref_forward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    const int64_t D = p->head_dim, Lk = p->seqlen_k; /* Lk bounds every sequence's keys */
    const int64_t BH = p->batch * p->heads;
    const int threads = fw_cpu_threads(ex, BH);
    size_t slice = fw_cpu_bytes(Lk > 0 ? Lk : 1, sizeof(double));
    slice = fw_cpu_bytes_add(slice, 2 * fw_cpu_bytes(D, sizeof(double)));
    slice = fw_cpu_bytes_add(slice, fw_cpu_bytes(D, sizeof(float)));
    fw_cpu_scratch scratch;
    fw_status st = fw_cpu_scratch_alloc(&scratch, threads, slice, ex, "cpu-ref");
    if (st != FW_OK) return st;
    fw_cpu_kvcache_append(p);
#pragma omp parallel num_threads(threads)
    {
        char *cur = fw_cpu_scratch_mine(&scratch);
        double *s = (double *)fw_cpu_carve(&cur, Lk > 0 ? Lk : 1, sizeof(double));
        double *acc = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        double *qr = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        float *orow = (float *)fw_cpu_carve(&cur, D, sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t b = bh / p->heads, h = bh % p->heads, hk = h / p->group;
            int64_t row0, lq;
            fw_seq_q(p, b, &row0, &lq);
            const int64_t lk = fw_seq_k_len(p, b);
            for (int64_t i = 0; i < lq; i++) {
                int64_t lo, hi;
                fw_seq_key_range(p, lq, lk, i, &lo, &hi);
                const int64_t qo = fw_row_offset(p, p->q_stride, b, h, i);
                for (int64_t d = 0; d < D; d++) qr[d] = fw_load_f32(p->q, p->dtype, qo + d);
                double m = -INFINITY;
                for (int64_t j = lo; j < hi; j++) {
                    const int64_t ko = fw_key_offset(p, p->k_stride, b, hk, j);
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += qr[d] * (double)fw_load_f32(p->k, p->dtype, ko + d);
                    s[j] = float_range(float_range(dot) * (double)p->scale);
                    m = fmax(m, s[j]);
                }
                for (int64_t d = 0; d < D; d++) acc[d] = 0;
                double l = 0;
                if (hi > lo && m == -INFINITY) m = 0; /* every logit -inf: weights all 0 */
                for (int64_t j = lo; j < hi; j++) {
                    const double w = exp(s[j] - m);
                    l += w;
                    const int64_t vo = fw_key_offset(p, p->v_stride, b, hk, j);
                    for (int64_t d = 0; d < D; d++) acc[d] += w * (double)fw_load_f32(p->v, p->dtype, vo + d);
                }
                const double inv = l > 0 ? 1.0 / l : 0.0;
                if (l != l) { /* NaN logits: the row is NaN, as the math says */
                    for (int64_t d = 0; d < D; d++) orow[d] = NAN;
                } else {
                    for (int64_t d = 0; d < D; d++) orow[d] = (float)(acc[d] * inv);
                }
                fw_cpu_store_row(p->o, p->dtype, fw_row_offset(p, p->o_stride, b, h, i), orow, D);
                if (p->lse)
                    p->lse[fw_lse_index(p, b, h, i)] = l > 0 ? (float)(m + log(l)) : (l != l ? NAN : -INFINITY);
            }
        }
    }
    fw_cpu_scratch_free(&scratch);
    return FW_OK;
}

fw_status fw_cpu_ref_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

const fw_backend fw_backend_cpu_ref = {
    .name = "cpu-ref",
    .description = "float64 reference (the test oracle)",
    .device = FW_DEVICE_CPU,
    .available = fw_cpu_available,
    .supports = ref_supports,
    .configs = NULL,
    .forward = ref_forward,
    .backward = fw_cpu_ref_backward,
};
