/* cpu-ref backward: gradients of attention accumulated in float64, the oracle for every backward,
 * dense and ragged. It recomputes the softmax itself in float64 (the o and lse it is given are not
 * trusted), so its answer does not inherit a forward's rounding. Work is split over (sequence, kv
 * head), which owns its dk/dv rows, so the GQA sum over the query heads of a group needs no atomics. */
#include <math.h>
#include <stdlib.h>
#include "cpu_common.h"

fw_status fw_cpu_ref_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

static void load_row_f64(double *dst, const void *base, fw_dtype t, int64_t off, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = (double)fw_load_f32(base, t, off + i);
}

/* A thread's float64 buffers: keys, values and their gradients of one sequence's kv head (up to
 * seqlen_k rows, the longest sequence's), and one query row's scores and vectors. */
typedef struct ref_buffers {
    double *K, *V, *dK, *dV, *P, *dP, *q, *dout, *dq;
    float *row;
} ref_buffers;

/* Sequence b's kv head hk: the dk, dv rows of its keys and the dq rows of the query heads of its
 * group. Every call kind through the per-sequence accessors (a dense problem's sequences are its
 * batch entries, all of Lq queries and Lk keys), so the ragged backward is this same code. */
static void kv_head(const fw_problem *p, int64_t b, int64_t hk, const ref_buffers *w)
{
    const int64_t D = p->head_dim;
    double *K = w->K, *V = w->V, *dK = w->dK, *dV = w->dV, *P = w->P, *dP = w->dP;
    double *q = w->q, *dout = w->dout, *dq = w->dq;
    float *row = w->row;
    int64_t row0, lq;
    fw_seq_q(p, b, &row0, &lq);
    const int64_t lk = fw_seq_k_len(p, b);
    for (int64_t j = 0; j < lk; j++) {
        load_row_f64(K + j * D, p->k, p->dtype, fw_key_offset(p, p->k_stride, b, hk, j), D);
        load_row_f64(V + j * D, p->v, p->dtype, fw_key_offset(p, p->v_stride, b, hk, j), D);
    }
    for (int64_t x = 0; x < lk * D; x++) dK[x] = dV[x] = 0;
    for (int64_t h = hk * p->group; h < (hk + 1) * p->group; h++) {
        for (int64_t i = 0; i < lq; i++) {
            int64_t lo, hi;
            fw_seq_key_range(p, lq, lk, i, &lo, &hi);
            load_row_f64(q, p->q, p->dtype, fw_row_offset(p, p->q_stride, b, h, i), D);
            load_row_f64(dout, p->dout, p->dtype, fw_row_offset(p, p->do_stride, b, h, i), D);
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
            fw_cpu_store_row(p->dq, p->dtype, fw_row_offset(p, p->dq_stride, b, h, i), row, D);
        }
    }
    for (int64_t j = 0; j < lk; j++) {
        for (int64_t d = 0; d < D; d++) row[d] = (float)dK[j * D + d];
        fw_cpu_store_row(p->dk, p->dtype, fw_key_offset(p, p->dk_stride, b, hk, j), row, D);
        for (int64_t d = 0; d < D; d++) row[d] = (float)dV[j * D + d];
        fw_cpu_store_row(p->dv, p->dtype, fw_key_offset(p, p->dv_stride, b, hk, j), row, D);
    }
}

fw_status fw_cpu_ref_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    const int64_t D = p->head_dim, Lk = p->seqlen_k; /* Lk bounds every sequence's keys */
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
        ref_buffers w;
        w.K = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        w.V = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        w.dK = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        w.dV = (double *)fw_cpu_carve(&cur, Lk * D, sizeof(double));
        w.P = (double *)fw_cpu_carve(&cur, Lk, sizeof(double));
        w.dP = (double *)fw_cpu_carve(&cur, Lk, sizeof(double));
        w.q = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        w.dout = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        w.dq = (double *)fw_cpu_carve(&cur, D, sizeof(double));
        w.row = (float *)fw_cpu_carve(&cur, D, sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bhk = 0; bhk < BHk; bhk++) kv_head(p, bhk / p->kv_heads, bhk % p->kv_heads, &w);
    }
    fw_cpu_scratch_free(&scratch);
    return FW_OK;
}
