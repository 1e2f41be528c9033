/* flashwatt: the command. `flashwatt <info|check|bench|tune|monitor> [flags]`. */
#include <stdio.h>
#include <string.h>
#include "flashwatt.h"
#include "commands.h"

void fw_usage(FILE *f)
{
    fprintf(f,
            "flashwatt %s — exact attention: inspect, verify, benchmark\n"
            "\n"
            "usage: flashwatt <command> [flags]\n"
            "\n"
            "commands:\n"
            "  info      version, CPU SIMD level, threads, backends (usable or why not), GPUs\n"
            "  check     run one problem on fresh random inputs with each backend and compare it with\n"
            "            the float64 reference (cpu-ref); exit 0 only if every backend passes\n"
            "  bench     time backends over shapes or a named suite: ms, TFLOP/s, GB/s, FLOP/byte,\n"
            "            error against the reference; table on stdout, --csv / --json files\n"
            "  tune      measure every configuration of every backend per problem bucket (time, error,\n"
            "            J/call, watts) and write the tuning table the scheduler reads\n"
            "  monitor   live GPU telemetry\n"
            "\n"
            "`flashwatt <command> --help` lists the command's flags.\n"
            "exit codes: 0 ok, 1 a check failed or a run errored, 2 usage error\n",
            fw_version());
}

static const char *shape_flags =
    "  --batch N         batch size (default 1)\n"
    "  --heads N         query heads (default 8)\n"
    "  --kv-heads N      key/value heads, dividing --heads (default: = heads)\n"
    "  --seqlen N        query length (default 512; k suffix = x1024, e.g. 16k)\n"
    "  --seqlen-k N      key length (default: = seqlen)\n"
    "  --head-dim N      head dimension (default 64)\n"
    "  --dtype T         f32 | f16 | bf16 (default f32)\n"
    "  --precision P     f32 inputs: exact (default), tf32 or 3xtf32 (the tensor-core modes, where a\n"
    "                    backend has them; the others say so)\n"
    "  --causal [0|1]    causal mask, bottom-right aligned (bare flag = 1)\n"
    "  --window L,R      sliding window: keys i-L..i+R visible (-1 = unlimited)\n"
    "  --layout L        bhsd (B,H,S,D) | bshd (B,S,H,D) (default bhsd)\n"
    "  --lse             also produce the row log-sum-exp (and check it)\n"
    "  --backward        the backward pass: check dQ/dK/dV against cpu-ref's float64 backward\n"
    "                    (check), time forward+backward (bench); dense or ragged (--seqlens-q/-k)\n"
    "  --seqlens-q LIST  a ragged batch: per-sequence query lengths (the batch is the list's length;\n"
    "                    0 allowed); with --kv-cache the new tokens per sequence (default 1 each)\n"
    "  --seqlens-k LIST  per-sequence key lengths (default: = --seqlens-q); with --kv-cache the tokens\n"
    "                    already cached per sequence (required)\n"
    "  --kv-cache K      contiguous | paged: new queries against a KV cache\n"
    "  --page-size N     paged cache: keys per page, 1..256 (default 16), pages in shuffled order\n"
    "  --append          KV cache: the new tokens' keys and values are written into the cache by the call\n"
    "  --backend NAMES   backends by name, comma separated, or all (default: every usable\n"
    "                    backend of the device)\n"
    "  --device D        cpu | cuda | cuda:N (default: a GPU if one is visible, else cpu)\n"
    "  --threads N       CPU threads (0 = all cores, the default)\n"
    "  --seed N          seed of the random inputs (default 1)\n";

void fw_usage_check(FILE *f)
{
    fprintf(f,
            "usage: flashwatt check [flags]\n"
            "\n"
            "Runs one attention problem on fresh random inputs (outputs poisoned first) with each\n"
            "backend and compares it with the float64 reference: max abs error, relative L2 error,\n"
            "pass/fail against DESIGN.md's contract (f32: 1e-5 * max|V|; f16/bf16: 2x the error of the\n"
            "same computation in the input dtype + 1e-5). Exit 0 only if every backend passes.\n"
            "\n"
            "flags (one value each):\n%s",
            shape_flags);
}

void fw_usage_bench(FILE *f)
{
    fprintf(f,
            "usage: flashwatt bench [flags]\n"
            "\n"
            "Times each backend x shape (the cross product of the comma lists, or a named suite):\n"
            "median ms after warm-up, TFLOP/s (4 * visible pairs * D * B * H), GB/s of compulsory\n"
            "traffic (q, k, v read once, o written once, lse), FLOP/byte, and the max error of the\n"
            "run's output against the float64 reference. Unsupported pairs are skipped with a note.\n"
            "With no flags: a default workload on the best device (see --list-suites).\n"
            "\n"
            "flags (each shape flag takes a comma list, e.g. --seqlen 512,1024,2048):\n%s"
            "  --suite NAME      a named workload (seed, seed003, fa-grid, cpu, decode, serve-prefill,\n"
            "                    default); shape flags cannot be combined with it; --backend/--device/\n"
            "                    --threads can. KV-cache rows (decode) end with a bandwidth table: us,\n"
            "                    GB/s of K+V read, %% of a copy on the same device, J/token\n"
            "  --list-suites     list the suites and exit\n"
            "  --warmup N        warm-up calls (default adaptive)\n"
            "  --reps N          timed calls; the median is reported (default adaptive: more for\n"
            "                    small problems, bounded for big ones)\n"
            "  --max-ref-s S     skip the reference comparison when it would take longer than S\n"
            "                    seconds (estimated; default 5; 0 = never compare)\n"
            "  --max-call-s S    skip a backend x shape when one call would take longer than S seconds\n"
            "                    (estimated from a small calibration run; default 5; 0 = no limit)\n"
            "  --csv FILE        also write the rows as CSV\n"
            "  --json FILE       also write the rows as a JSON array of objects\n"
            "  --energy [0|1]    energy per call on GPU rows: a >= 1 s window of back-to-back calls after\n"
            "                    a bounded cool-down and a warm-up; W avg/peak/std, J/call, GFLOP/s per W\n"
            "                    (default: on where a GPU power reading exists; n/a elsewhere, never 0)\n"
            "  --cooldown S      longest wait for the idle baseline before each window (default 5)\n"
            "  --window-s S      energy window length in seconds (default 1, at least 1)\n"
            "  --plot DIR        PNG plots (latency, TFLOP/s, power trace, J/call, roofline) by\n"
            "                    bench/plot.py (needs python3 + matplotlib; says so if missing)\n"
            "  --policy P        for --backend auto (the scheduler's choice): fastest | min-energy |\n"
            "                    cap:W, each optionally with ,temp:C and ,reduced:BUDGET\n",
            shape_flags);
}

int main(int argc, char **argv)
{
    if (argc < 2) { /* no command is a usage error: the usage, on stderr, and exit 2 */
        fw_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc >= 3 && !strcmp(argv[1], "help")) {
            if (!strcmp(argv[2], "check")) { fw_usage_check(stdout); return 0; }
            if (!strcmp(argv[2], "bench")) { fw_usage_bench(stdout); return 0; }
            if (!strcmp(argv[2], "tune")) { fw_usage_tune(stdout); return 0; }
        }
        fw_usage(stdout);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("flashwatt %s\n", fw_version());
        return 0;
    }
    if (!strcmp(cmd, "info")) return fw_cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return fw_cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return fw_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "monitor")) return fw_cmd_monitor(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return fw_cmd_tune(argc - 1, argv + 1);
    fprintf(stderr, "flashwatt: unknown command '%s'\n\n", cmd);
    fw_usage(stderr);
    return 2;
}
