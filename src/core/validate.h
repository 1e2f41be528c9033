/* Argument checking of every public entry point; turns fw_tensors into an fw_problem. */
#ifndef FW_VALIDATE_H
#define FW_VALIDATE_H

#include <stddef.h>
#include "problem.h"

/* On failure returns the status and writes a message naming the argument and the limit. */
fw_status fw_validate_forward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                              const fw_tensor *o, float *lse, const fw_attn_params *params,
                              fw_problem *out, char *msg, size_t msg_len);

fw_status fw_validate_backward(const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                               const fw_tensor *o, const float *lse, const fw_tensor *dout,
                               const fw_tensor *dq, const fw_tensor *dk, const fw_tensor *dv,
                               const fw_attn_params *params, fw_problem *out, char *msg,
                               size_t msg_len);

#endif
