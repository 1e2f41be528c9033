/* Which backend and configuration runs a problem. Today: a named backend, or the first usable
 * backend in registry order that supports the problem. The power-aware policy plugs in here. */
#ifndef FW_SCHED_H
#define FW_SCHED_H

#include <stddef.h>
#include "../backends/backend.h"
#include "../core/context.h"

typedef enum { FW_PASS_FORWARD = 0, FW_PASS_BACKWARD = 1 } fw_pass;

/* On success returns the backend and fills *cfg; on failure NULL with the status in *st and a
 * message in msg. */
const fw_backend *fw_sched_choose(const fw_context *ctx, const fw_problem *p, fw_pass pass,
                                  fw_config *cfg, fw_status *st, char *msg, size_t msg_len);

#endif
