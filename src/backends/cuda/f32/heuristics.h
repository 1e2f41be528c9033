/* cuda-flash-f32's choices, in one place: which records run on a device, the default record for a problem (the
 * kernel per precision, head dim and shape), the search space that configs() lists (the default first), the record
 * a configuration names, and the plan of a launch (split-KV ranges, the first tile's staging, the staggered start,
 * the persistent grid). cuda_flash_f32.cu validates, asks these, and launches what they return. */
#ifndef FW_F32_HEURISTICS_H
#define FW_F32_HEURISTICS_H

#include "backends/cuda/common/cuda_common.h"
#include "backends/cuda/f32/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The padded head dim (32, 64, 128 or 256) that runs head_dim d <= 256. */
int fw_f32_padded_dim(int64_t d);
/* The record's launch in precision prec (exact, tf32, 3xtf32), or NULL if it has none. */
const fw_f32_form *fw_f32_form_of(const fw_f32_record *r, fw_precision prec);
/* Can the device run the record: sm_90a records need compute capability 9.0 and the knobs' leave (di NULL: the
 * device's facts are not known, so they do not). */
int fw_f32_record_runs(const fw_f32_record *r, const fw_cuda_device_info *di, const fw_knobs *k);
/* The default record for p (NULL if none runs). */
const fw_f32_record *fw_f32_default(const fw_problem *p, const fw_cuda_device_info *di, const fw_knobs *k);
/* configs(): the records of p's precision and head dim that run, the default first, named with the precision
 * prefix (tf32-, 3xtf32-) for tensor-core records; splits 0 (the plan decides); at least one entry (a zeroed one
 * where none runs). */
int fw_f32_configs(const fw_problem *p, fw_config *out, int max);
/* The record cfg names (by name, with or without the precision prefix, or by block_m/block_n/warps), or the default
 * for an empty cfg (or NULL); where that is the persistent short-key form and the keys are longer, its fallback.
 * NULL with the reason in why if it names none, or one that does not run here. */
const fw_f32_record *fw_f32_record_for(const fw_problem *p, const fw_config *cfg, const fw_cuda_device_info *di,
                                       const fw_knobs *k, char *why, size_t why_len);
/* The plan of launching r for p on a device of sms SMs (0: not known). */
void fw_f32_plan_for(const fw_problem *p, const fw_f32_record *r, int sms, const fw_knobs *k, fw_f32_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
