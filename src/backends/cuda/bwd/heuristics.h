/* The CUDA backward's choices, in one place: store or recompute (the memory budget), the dQ mode (atomic or
 * deterministic), the kernels (a tensor-core record, or the CUDA-core record of the head dim), and the search space
 * that configs() lists for a backward problem (the default first). cuda_backward.cu validates, asks these, and
 * runs the plan they return.
 *
 * Configuration names of a backward problem (fw_config.name; the cuda-flash table's configs() lists them):
 *   "bwd-materialize"             the store strategy (materialize.h)
 *   "bwd-atomic:<record>"         recompute, dQ by atomics, the kernels of that record (kernels.tsv)
 *   "bwd-deterministic:<record>"  recompute, the deterministic dQ pass, the kernels of that record (not a fuse
 *                                 record's: those add dQ up by atomics in their dK/dV kernel)
 *   "bwd-atomic", "bwd-deterministic"  that dQ mode, the record the heuristics choose (FW_CUDA_BWD_CONFIG first)
 *   "" (or a name outside "bwd-": a forward configuration, handed by a table whose configs() lists only those)
 *                                 the defaults
 * A "bwd-" name that names nothing that runs here is FW_ERR_INVALID_VALUE. A ragged (varlen) batch runs the records
 * with ragged kernels (kernels.tsv's varlen option; the CUDA-core records of every head dim have them) and never
 * the store strategy. */
#ifndef FW_BWD_HEURISTICS_H
#define FW_BWD_HEURISTICS_H

#include "backends/cuda/bwd/params.h"
#include "backends/cuda/common/cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if the CUDA backward (bwd/cuda_backward.cu: fw_cuda_backward, the backward() of cuda-flash and cuda-flash-f32)
 * can run p, a dense or ragged backward problem; else 0 with the reason. */
int fw_cuda_backward_supports(const fw_problem *p, char *why, size_t why_len);

/* What fw_cuda_backward runs. */
typedef struct fw_bwd_plan {
    int materialize;             /* the store strategy; the fields below are the recompute's */
    int atomic;                  /* dQ by atomics into an f32 accumulator (else the deterministic dQ pass) */
    const fw_bwd_record *record; /* the kernels: a tensor-core record, or the head dim's CUDA-core one */
} fw_bwd_plan;

/* The rows of p's tensors: (batch entries, query rows, key rows) of a dense call; of a ragged (varlen) one the
 * packed tensors' (1, total_q, total_k). */
static inline void fw_bwd_extents(const fw_problem *p, int64_t *nb, int64_t *rows_q, int64_t *rows_k)
{
    const int packed = p->kind == FW_CALL_VARLEN;
    *nb = packed ? 1 : p->batch;
    *rows_q = packed ? p->total_q : p->seqlen_q;
    *rows_k = packed ? p->total_k : p->seqlen_k;
}

/* The padded head dim whose records run head_dim d (64, 128 or 256), or 0 above 256. */
int fw_bwd_padded_dim(int64_t d);
/* The records of padded head dim dpad (contiguous in fw_bwd_records), their count in *n; NULL if none. */
const fw_bwd_record *fw_bwd_records_of(int dpad, int *n);
/* The record of padded head dim dpad called name, or NULL. */
const fw_bwd_record *fw_bwd_record_named(int dpad, const char *name);

/* Does record r's atomic mode accumulate dQ inside its dK/dV kernel, in the tiled layout (params.h: dq_acc_tile,
 * dq_acc_seq_tiles)? kernels.tsv's fuse (launch.cuh: fused_dq), where a refused tensor map runs the wg kernel's row
 * atomics instead. */
int fw_bwd_fuses_dq(const fw_bwd_record *r);
/* Can the tensor-core records run p: f16/bf16, head_dim a multiple of 8 up to 128, sequences below 2^28, every
 * row 16-byte aligned, and the knobs allow them (FW_CUDA_BWD_TC unset or 1). Else 0 with the reason. */
int fw_bwd_tensor_cores_take(const fw_problem *p, const fw_knobs *k, char *why, size_t why_len);
/* Can the tf32 records run p: f32 in precision tf32 or 3xtf32, head_dim a multiple of 4 up to 128, sequences below
 * 2^28, every row 16-byte aligned, and the knobs allow tensor cores. Else 0 with the reason. */
int fw_bwd_tf32_take(const fw_problem *p, const fw_knobs *k, char *why, size_t why_len);
/* 1 when p runs the store strategy: the configuration names it, or none names a recompute and the memory-budget
 * rule picks it (materialize.h). */
int fw_bwd_materialize_wanted(const fw_problem *p, const fw_config *cfg);
/* The recompute's plan for p under cfg on the device (cfg NULL or empty: the defaults). FW_OK; else
 * FW_ERR_INVALID_VALUE (cfg names no configuration that runs here) or FW_ERR_UNSUPPORTED (the CUDA-core kernels
 * of the head dim do not fit the device's shared memory), with the reason in why. */
fw_status fw_bwd_recompute_plan(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                const fw_knobs *k, fw_bwd_plan *plan, char *why, size_t why_len);
/* configs() for a backward problem (p->dq set): the plan the defaults choose first, then every other that runs for
 * p (no atomic one where p asks for determinism), then "bwd-materialize" where its workspace plan fits; at least
 * one entry (a zeroed one where the device cannot be queried). */
int fw_bwd_configs(const fw_problem *p, fw_config *out, int max);

#ifdef __cplusplus
}
#endif
#endif
