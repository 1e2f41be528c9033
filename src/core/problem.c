/* Arithmetic on a validated problem (problem.h): visible pairs and the exact FLOP count. */
#include "problem.h"

double fw_problem_pairs(const fw_problem *p)
{
    if (p->kind != FW_CALL_DENSE) return fw_serving_pairs(p) / (double)p->batch;
    if (!p->has_window) return (double)p->seqlen_q * (double)p->seqlen_k;
    double pairs = 0;
    for (int64_t i = 0; i < p->seqlen_q; i++) {
        int64_t lo, hi;
        fw_key_range(p, i, &lo, &hi);
        if (hi > lo) pairs += (double)(hi - lo);
    }
    return pairs;
}

double fw_problem_flops(const fw_problem *p)
{
    if (p->kind != FW_CALL_DENSE) return 4.0 * (double)p->head_dim * fw_serving_pairs(p) * (double)p->heads;
    return 4.0 * (double)p->head_dim * fw_problem_pairs(p) * (double)p->batch * (double)p->heads;
}
