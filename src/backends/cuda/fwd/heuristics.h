/* The f16/bf16 forward's choices, in one place: which records run on a device, the default record for a
 * problem, the search space that configs() lists (the default first), and the record a configuration
 * names. cuda_flash.cu validates, asks these, and launches what they return. */
#ifndef FW_FWD_HEURISTICS_H
#define FW_FWD_HEURISTICS_H

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/fwd/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The padded head dim that runs head_dim d (a multiple of 8 up to 256), or 0. */
int fw_fwd_padded_dim(int64_t d);
/* The records of padded head dim dpad (contiguous in fw_fwd_records), their count in *n; NULL if none. */
const fw_fwd_record *fw_fwd_records_of(int dpad, int *n);
/* Can the device run the record: its machine code runs there (sm_90a: compute capability 9.0, and the
 * knobs allow wgmma kernels) and its shared memory fits. */
int fw_fwd_record_runs(const fw_fwd_record *r, const fw_cuda_device_info *di, const fw_knobs *k);
/* p's lengths, window band (clamped so that the kernels' int sums cannot overflow) and query-block order, in the
 * fields of fw_fwd_params that hold them: Lq, Lk, wl, wr, off, has_window, reverse_m. */
void fw_fwd_band(const fw_problem *p, fw_fwd_params *a);
/* A persistent kernel's grid at most: one block an SM, or fewer where FW_CUDA_PERSIST_BLOCKS says so (tests: several
 * query blocks a block on small problems). */
int fw_fwd_persist_blocks(const fw_cuda_device_info *di, const fw_knobs *k);
/* The default record for p on the device (the knobs' cuda_flash_config first, where it names a record
 * that runs); NULL if none runs. */
const fw_fwd_record *fw_fwd_default(const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k);
/* configs(): the records that run for p, the default first; at least one entry (a zeroed one where none).
 * Ragged calls: the ragged records and the serving configurations (fw_fwd_varlen_choice's default first);
 * cached calls and dense decode shapes: the serving configurations. */
int fw_fwd_configs(const fw_problem *p, fw_config *out, int max);
/* The record cfg names (by name, or by block_m/block_n/warps/stages for an unnamed mma.sync configuration),
 * or the default for an empty cfg (or NULL); NULL with the reason in why if it names none that runs.
 * FW_CUDA_FLASH_CONFIG, where set, overrides cfg (as it does for the serving and ragged choices). */
const fw_fwd_record *fw_fwd_record_for(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                       const fw_knobs *k, char *why, size_t why_len);

/* Ragged (FW_CALL_VARLEN) calls, the one place that chooses between the ragged wgmma records and the serving
 * kernel: 1 with *rec the ragged record to run; 0 for the serving kernel; -1 with the reason in why where
 * cfg (or the knobs' cuda_flash_config) names a ragged record that cannot run p here. By default a ragged
 * f16/bf16 call on compute capability 9.0 (wgmma kernels allowed) whose head dim pads to 64 or 128 and
 * whose max_seqlen_q x group is above 64 runs the first ragged record of its head dim (the warp-specialised
 * TMA kernel); decode-like batches (max_seqlen_q x group <= 64), other head dims and devices, and a cfg
 * naming a serving configuration or giving tile fields, take the serving kernel. */
int fw_fwd_varlen_choice(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di, const fw_knobs *k,
                         const fw_fwd_record **rec, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
