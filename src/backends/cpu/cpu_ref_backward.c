/* cpu-ref backward: gradients of attention accumulated in float64, the oracle for every backward.
 * It recomputes the softmax itself in float64 (the o and lse it is given are not trusted), so its
 * answer does not inherit a forward's rounding. Work is split over (batch, kv head), which owns its
 * dk/dv rows, so the GQA sum over the query heads of a group needs no atomics. */
#include <math.h>
#include <stdlib.h>
#include "cpu_common.h"

fw_status fw_cpu_ref_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

static void load_row_f64(double *dst, const void *base, fw_dtype t, int64_t off, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = (double)fw_load_f32(base, t, off + i);
}

fw_status fw_cpu_ref_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    const int64_t D = p->head_dim, Lq = p->seqlen_q, Lk = p->seqlen_k;
    const int64_t BHk = p->batch * p->kv_heads;
    const int threads = fw_cpu_threads(ex, BHk);
    size_t slice = 4 * fw_cpu_bytes(Lk * D, sizeof(double));
    slice = fw_cpu_bytes_add(slice, 2 * fw_cpu_bytes(Lk, sizeof(double)));
    slice = fw_cpu_bytes_add(slice, 3 * fw_cpu_bytes(D, sizeof(double)) + fw_cpu_bytes(D, sizeof(float)));
    fw_cpu_scratch scratch;
    fw_status st = fw_cpu_scratch_alloc(&scratch, threads, slice, ex, "cpu-ref backward");
    if (st != FW_OK) return st;
#pragma omp parallel num_threads(threads)
    {
        char *cur = fw_cpu_scratch_mine(&scratch);
        double *K = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        double *V = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        double *dK = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        double *dV = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        double *P = (double *)fw_cpu_carve(&cur, Lk, sizeof(double));
        double *dP = (double *)fw_cpu_carve(&cur, Lk, sizeof(double));
        double *q = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        double *dout = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        double *dq = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        float *row = (float *)fw_cpu_carve(&cur, D, sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bhk = 0; bhk < BHk; bhk++) {
            const int64_t b = bhk / p->kv_heads, hk = bhk % p->kv_heads;
            for (int64_t j = 0; j < Lk; j++) {
                load_row_f64(K + j * D, p->k, p->dtype, fw_off(p->k_stride, b, hk, j), D);
                load_row_f64(V + j * D, p->v, p->dtype, fw_off(p->v_stride, b, hk, j), D);
            }
            for (int64_t x = 0; x < Lk * D; x++) dK[x] = dV[x] = 0;
            for (int64_t h = hk * p->group; h < (hk + 1) * p->group; h++) {
                for (int64_t i = 0; i < Lq; i++) {
                    int64_t lo, hi;
                    fw_key_range(p, i, &lo, &hi);
                    load_row_f64(q, p->q, p->dtype, fw_off(p->q_stride, b, h, i), D);
                    load_row_f64(dout, p->dout, p->dtype, fw_off(p->do_stride, b, h, i), D);
                    double m = -INFINITY;
                    for (int64_t j = lo; j < hi; j++) {
                        double s = 0;
                        for (int64_t d = 0; d < D; d++) s += q[d] * K[j * D + d];
                        P[j] = s * (double)p->scale;
                        m = fmax(m, P[j]);
                    }
                    double l = 0;
                    for (int64_t j = lo; j < hi; j++) { P[j] = exp(P[j] - m); l += P[j]; }
                    double Di = 0; /* rowsum(P ∘ dP) = dO · O */
                    for (int64_t j = lo; j < hi; j++) {
                        P[j] /= l;
                        double s = 0;
                        for (int64_t d = 0; d < D; d++) s += dout[d] * V[j * D + d];
                        dP[j] = s;
                        Di += P[j] * s;
                    }
                    for (int64_t d = 0; d < D; d++) dq[d] = 0;
                    for (int64_t j = lo; j < hi; j++) {
                        const double dS = P[j] * (dP[j] - Di) * (double)p->scale;
                        for (int64_t d = 0; d < D; d++) {
                            dq[d] += dS * K[j * D + d];
                            dK[j * D + d] += dS * q[d];
                            dV[j * D + d] += P[j] * dout[d];
                        }
                    }
                    for (int64_t d = 0; d < D; d++) row[d] = (float)dq[d];
                    fw_cpu_store_row(p->dq, p->dtype, fw_off(p->dq_stride, b, h, i), row, D);
                }
            }
            for (int64_t j = 0; j < Lk; j++) {
                for (int64_t d = 0; d < D; d++) row[d] = (float)dK[j * D + d];
                fw_cpu_store_row(p->dk, p->dtype, fw_off(p->dk_stride, b, hk, j), row, D);
                for (int64_t d = 0; d < D; d++) row[d] = (float)dV[j * D + d];
                fw_cpu_store_row(p->dv, p->dtype, fw_off(p->dv_stride, b, hk, j), row, D);
            }
        }
    }
    fw_cpu_scratch_free(&scratch);
    return FW_OK;
}
