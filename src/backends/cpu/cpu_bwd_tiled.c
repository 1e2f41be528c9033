/* The tiled CPU backward (FlashAttention-2's algorithm): per (sequence, kv head) and key tile, recompute
 * P = exp(scale·Q·Kᵀ − LSE) tile by tile from the forward's LSE, accumulate dV = Pᵀ·dO and
 * dK = scale·dSᵀ·Q in a tile-sized buffer, and add scale·dS·K into a per-head dQ — never more than a
 * tile of scores alive. dS = P ∘ (dP − Δ) with Δ_i = dO_i · O_i. Float32 accumulation; each (sequence,
 * kv head) is owned by one thread, so results are deterministic (no atomics). Dense and ragged
 * problems alike (a dense problem's sequences are its batch entries). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_common.h"

#define BWD_TILE 64

fw_status fw_cpu_tiled_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex);

typedef struct {
    float *K, *V, *dK, *dV, *Q, *dO, *S, *dP, *dQ, *delta, *row;
} bwd_scratch;

/* A thread's buffers: bytes of its slice (count = 0) or carved from it (cursor). */
static size_t carve_scratch(bwd_scratch *s, char **cursor, int64_t Lq, int64_t Lk, int64_t D)
{
    const int64_t tile = (int64_t)BWD_TILE * D, kd = Lk * D, qd = Lq * D, tt = (int64_t)BWD_TILE * BWD_TILE;
    const int64_t n[11] = {tile, tile, kd, kd, qd, qd, tt, tt, qd, Lq, D};
    float **dst[11] = {&s->K, &s->V, &s->dK, &s->dV, &s->Q, &s->dO, &s->S, &s->dP, &s->dQ, &s->delta, &s->row};
    size_t bytes = 0;
    for (int i = 0; i < 11; i++) {
        if (cursor) *dst[i] = (float *)fw_cpu_carve(cursor, n[i], sizeof(float));
        bytes = fw_cpu_bytes_add(bytes, fw_cpu_bytes(n[i], sizeof(float)));
    }
    return bytes;
}

/* One query head h of sequence b (lq queries, lk keys) against key tile [j0, j1): accumulates into
 * rows j0.. of s->dK/dV (f32 over the whole kv head, so the GQA sum stays in f32) and into s->dQ. */
static void head_tile(const fw_problem *p, bwd_scratch *s, int64_t b, int64_t h, int64_t lq, int64_t lk, int64_t j0,
                      int64_t j1)
{
    const int64_t D = p->head_dim, nj = j1 - j0;
    const float scale = p->scale;
    for (int64_t i0 = 0; i0 < lq; i0 += BWD_TILE) {
        const int64_t i1 = i0 + BWD_TILE < lq ? i0 + BWD_TILE : lq;
        /* skip query tiles that see none of these keys */
        int64_t lo_first, hi_first, lo_last, hi_last;
        fw_seq_key_range(p, lq, lk, i0, &lo_first, &hi_first);
        fw_seq_key_range(p, lq, lk, i1 - 1, &lo_last, &hi_last);
        if (lo_first >= j1 && lo_last >= j1) continue;
        if (hi_first <= j0 && hi_last <= j0) continue;
        for (int64_t i = i0; i < i1; i++) {
            const float lse = p->lse[fw_lse_index(p, b, h, i)];
            int64_t lo, hi;
            fw_seq_key_range(p, lq, lk, i, &lo, &hi);
            const float *q = s->Q + i * D, *dout = s->dO + i * D;
            float *Srow = s->S + (i - i0) * BWD_TILE, *dProw = s->dP + (i - i0) * BWD_TILE;
            for (int64_t jj = 0; jj < nj; jj++) {
                const int64_t j = j0 + jj;
                if (j < lo || j >= hi || lse == -INFINITY) { Srow[jj] = 0; dProw[jj] = 0; continue; }
                const float *k = s->K + jj * D, *v = s->V + jj * D;
                float dot = 0, dp = 0;
                for (int64_t d = 0; d < D; d++) { dot += q[d] * k[d]; dp += dout[d] * v[d]; }
                const float P = expf(dot * scale - lse);
                Srow[jj] = P;
                dProw[jj] = P * (dp - s->delta[i]); /* dS */
            }
        }
        for (int64_t i = i0; i < i1; i++) {
            const float *Srow = s->S + (i - i0) * BWD_TILE, *dSrow = s->dP + (i - i0) * BWD_TILE;
            const float *q = s->Q + i * D, *dout = s->dO + i * D;
            float *dq = s->dQ + i * D;
            for (int64_t jj = 0; jj < nj; jj++) {
                const float P = Srow[jj], dS = dSrow[jj] * scale;
                if (P == 0.0f && dS == 0.0f) continue;
                float *dk = s->dK + (j0 + jj) * D, *dv = s->dV + (j0 + jj) * D;
                const float *k = s->K + jj * D;
                for (int64_t d = 0; d < D; d++) {
                    dv[d] += P * dout[d];
                    dk[d] += dS * q[d];
                    dq[d] += dS * k[d];
                }
            }
        }
    }
}

/* Sequence b's kv head hk: the dk, dv rows of its keys and the dq rows of the query heads of its
 * group. Every call kind through the per-sequence accessors (a dense problem's sequences are its
 * batch entries), so the ragged backward is this same code and gives a sequence the numbers the
 * dense call on it alone gives. */
static void kv_head(const fw_problem *p, bwd_scratch *s, int64_t b, int64_t hk)
{
    const int64_t D = p->head_dim;
    int64_t row0, lq;
    fw_seq_q(p, b, &row0, &lq);
    const int64_t lk = fw_seq_k_len(p, b);
    memset(s->dK, 0, (size_t)(lk * D) * sizeof(float));
    memset(s->dV, 0, (size_t)(lk * D) * sizeof(float));
    for (int64_t h = hk * p->group; h < (hk + 1) * p->group && lq > 0; h++) {
        /* Q, dO, dQ and Δ of this query head stay resident across the key tiles */
        for (int64_t i = 0; i < lq; i++) {
            fw_cpu_load_row(s->Q + i * D, p->q, p->dtype, fw_row_offset(p, p->q_stride, b, h, i), D);
            fw_cpu_load_row(s->dO + i * D, p->dout, p->dtype, fw_row_offset(p, p->do_stride, b, h, i), D);
            fw_cpu_load_row(s->row, p->o, p->dtype, fw_row_offset(p, p->o_stride, b, h, i), D);
            float delta = 0;
            for (int64_t d = 0; d < D; d++) delta += s->dO[i * D + d] * s->row[d];
            s->delta[i] = delta;
        }
        memset(s->dQ, 0, (size_t)(lq * D) * sizeof(float));
        for (int64_t j0 = 0; j0 < lk; j0 += BWD_TILE) {
            const int64_t j1 = j0 + BWD_TILE < lk ? j0 + BWD_TILE : lk;
            for (int64_t j = j0; j < j1; j++) {
                fw_cpu_load_row(s->K + (j - j0) * D, p->k, p->dtype, fw_key_offset(p, p->k_stride, b, hk, j), D);
                fw_cpu_load_row(s->V + (j - j0) * D, p->v, p->dtype, fw_key_offset(p, p->v_stride, b, hk, j), D);
            }
            head_tile(p, s, b, h, lq, lk, j0, j1);
        }
        for (int64_t i = 0; i < lq; i++)
            fw_cpu_store_row(p->dq, p->dtype, fw_row_offset(p, p->dq_stride, b, h, i), s->dQ + i * D, D);
    }
    for (int64_t j = 0; j < lk; j++) {
        fw_cpu_store_row(p->dk, p->dtype, fw_key_offset(p, p->dk_stride, b, hk, j), s->dK + j * D, D);
        fw_cpu_store_row(p->dv, p->dtype, fw_key_offset(p, p->dv_stride, b, hk, j), s->dV + j * D, D);
    }
}

fw_status fw_cpu_tiled_backward(const fw_problem *p, const fw_config *cfg, const fw_exec *ex)
{
    (void)cfg;
    const int64_t D = p->head_dim, Lq = p->seqlen_q, Lk = p->seqlen_k; /* bounds of every sequence's lengths */
    const int64_t BHk = p->batch * p->kv_heads;
    const int threads = fw_cpu_threads(ex, BHk);
    bwd_scratch s;
    fw_cpu_scratch scratch;
    fw_status st = fw_cpu_scratch_alloc(&scratch, threads, carve_scratch(&s, NULL, Lq, Lk, D), ex, "cpu-flash backward");
    if (st != FW_OK) return st;
#pragma omp parallel num_threads(threads) private(s)
    {
        char *cur = fw_cpu_scratch_mine(&scratch);
        carve_scratch(&s, &cur, Lq, Lk, D);
#pragma omp for schedule(dynamic, 1)
        for (int64_t bhk = 0; bhk < BHk; bhk++) kv_head(p, &s, bhk / p->kv_heads, bhk % p->kv_heads);
    }
    fw_cpu_scratch_free(&scratch);
    return FW_OK;
}
