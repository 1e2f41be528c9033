/* One row of `flashwatt bench`, measured: the forward's median time after warm-up and its rates, the
 * error of its output against the float64 reference, the copy bandwidth of a KV-cache row, GPU memory
 * and energy; or, with --backward, forward + backward. tools/cmd_bench.c decides which rows run, sets
 * up their problems and prints them. */
#ifndef FW_TOOLS_BENCH_ROW_H
#define FW_TOOLS_BENCH_ROW_H

#include "flashwatt.h"
#include "args.h"
#include "fw_harness.h"
#include "report.h"

#define FW_BENCH_PROGRESS_S 3.0 /* a progress line on stderr for anything expected to take longer */

/* Where a row stands in the run, for its progress lines: row done + 1 of total, on shape `text`. */
typedef struct fw_bench_pos {
    int done, total;
    const char *text;
} fw_bench_pos;

/* Whether one shape's outputs on one device are compared against the float64 reference: decided at
 * its first timed row from the comparison's estimated seconds against --max-ref-s. */
typedef struct fw_bench_ref {
    int decided, ok;
    double est_s;
} fw_bench_ref;

/* The forward row of backend row->backend on r (set up on dev): a probe call, the reference
 * comparison where ref allows it, the timed calls, and on a GPU memory and (energy_asked: -1 auto,
 * 0 off, 1 on) energy; *energy_warned keeps the no-telemetry warning to once a run. Returns 1 when
 * the row errored (marked in row), else 0. */
int fw_bench_forward_row(const fw_cli *cli, fw_run *r, fw_context *ctx, fw_row *row, fw_device dev, fw_bench_ref *ref,
                         int energy_asked, int *energy_warned, fw_bench_pos pos);

/* The --backward row: time of forward + backward, TFLOP/s at 3.5x the forward FLOPs, GB/s. Returns 1
 * on an error (row marked), 0 otherwise (a backend without a backward is a skipped row). */
int fw_bench_backward_row(const fw_cli *cli, fw_run *r, fw_bwd *bw, fw_context *ctx, fw_row *row, fw_bench_pos pos);

#endif
