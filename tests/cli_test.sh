#!/bin/sh
# Tests of the `flashwatt` command: usage and exit codes, info, check on a few shapes, bench's
# JSON/CSV output. Usage: tests/cli_test.sh /path/to/flashwatt
set -u
FW=${1:-./flashwatt}
if [ ! -x "$FW" ]; then
    echo "cli_test: no flashwatt binary at '$FW'" >&2
    exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fw_cli_test.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT INT TERM
failures=0
n=0

# expect RC DESCRIPTION -- ARGS...: runs flashwatt ARGS, checks the exit code
expect() {
    want=$1; what=$2; shift 3
    n=$((n + 1))
    "$FW" "$@" >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "FAIL: $what: flashwatt $* exited $got, expected $want" >&2
        sed 's/^/    out: /' "$TMP/out" | head -20 >&2
        sed 's/^/    err: /' "$TMP/err" | head -20 >&2
        failures=$((failures + 1))
        return 1
    fi
    echo "ok: $what"
    return 0
}

# grep_in FILE PATTERN DESCRIPTION
grep_in() {
    if ! grep -q -- "$2" "$TMP/$1"; then
        echo "FAIL: $3: '$2' not in $1" >&2
        sed 's/^/    /' "$TMP/$1" | head -20 >&2
        failures=$((failures + 1))
    fi
}

# ---- usage and exit codes -------------------------------------------------------------------
expect 2 "no arguments: usage on stderr, a usage error" --
grep_in err "usage: flashwatt" "usage text"
expect 0 "--help" -- --help
grep_in out "usage: flashwatt" "usage text"
expect 0 "check --help" -- check --help
grep_in out "--seqlen" "check flags"
expect 0 "bench --help" -- bench --help
grep_in out "--suite" "bench flags"
expect 2 "unknown command" -- frobnicate
grep_in err "unknown command" "message for an unknown command"
expect 2 "unknown flag (check)" -- check --frobnicate 3
grep_in err "unknown flag '--frobnicate'" "message for an unknown flag"
expect 2 "unknown flag (bench)" -- bench --bogus
grep_in err "unknown flag" "message for an unknown flag"
expect 2 "bad integer" -- check --seqlen abc
grep_in err "--seqlen" "message names the flag"
expect 2 "zero size" -- check --head-dim 0
expect 2 "bad dtype" -- check --dtype f8
grep_in err "f32, f16 or bf16" "message lists the dtypes"
expect 2 "bad layout" -- bench --layout xyz
expect 2 "bad window" -- check --window 5
expect 2 "missing value" -- check --seqlen
expect 2 "unknown backend" -- check --backend no-such-backend
grep_in err "no backend 'no-such-backend'" "message names the backend"
expect 2 "list in check" -- check --seqlen 64,128
expect 2 "bench-only flag in check" -- check --reps 3
expect 2 "unknown suite" -- bench --suite no-such-suite
expect 2 "suite with shape flags" -- bench --suite seed --seqlen 64
expect 2 "GQA heads not divisible" -- check --heads 8 --kv-heads 3
expect 2 "info takes no flags" -- info --bogus
expect 2 "k suffix that would overflow" -- check --seqlen 18014398509481985k --device cpu
grep_in err "--seqlen" "message names the flag"
expect 2 "size above 2^31 - 1" -- check --batch 2147483648 --heads 2 --seqlen 1 --head-dim 1 --device cpu
expect 2 "tensor too large for memory (B x H wraps)" -- check --batch 2147483647 --heads 2147483647 --seqlen 1 \
    --head-dim 1 --device cpu --backend cpu-ref
grep_in err "2^62 bytes" "message says the tensor is too large"

# ---- info -----------------------------------------------------------------------------------
expect 0 "info" -- info
grep_in out "cpu-ref" "info lists the backends"
grep_in out "simd:" "info shows the SIMD level"
grep_in out "gpus:" "info shows the GPUs"

# ---- check on a few shapes ------------------------------------------------------------------
B="--backend cpu-ref,cpu-naive"
expect 0 "check f32 default shape" -- check $B
grep_in out "2 passed, 0 failed" "both backends pass"
expect 0 "check f16 causal GQA Lq!=Lk with lse" -- check $B --dtype f16 --causal --heads 4 --kv-heads 2 --seqlen 100 --seqlen-k 173 --lse
expect 0 "check bf16 window bshd" -- check $B --dtype bf16 --window 16,4 --layout bshd --seqlen 96 --batch 2 --heads 2
expect 0 "check f32 D=128 MQA, 1 thread" -- check $B --head-dim 128 --heads 4 --kv-heads 1 --seqlen 65 --threads 1 --seed 7
expect 0 "check causal Lq>Lk (fully masked rows)" -- check $B --causal 1 --seqlen 80 --seqlen-k 40 --lse
expect 0 "check with the default backends" -- check --seqlen 128 --heads 2

# ---- bench: table, JSON, CSV ----------------------------------------------------------------
expect 0 "bench --list-suites" -- bench --list-suites
grep_in out "fa-grid" "suites listed"
expect 0 "bench small sweep with --json/--csv" -- bench --backend cpu-naive,cpu-ref --heads 2 --seqlen 64,128 \
    --dtype f32,f16 --causal 0,1 --warmup 1 --reps 3 --json "$TMP/b.json" --csv "$TMP/b.csv"
grep_in out "TFLOP/s" "bench table header"
if command -v python3 >/dev/null 2>&1; then
    n=$((n + 1))
    if python3 - "$TMP/b.json" "$TMP/b.csv" <<'PY'
import csv, json, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 16, "expected 16 rows, got %d" % len(rows)
fields = ["backend", "device", "dtype", "batch", "heads", "kv_heads", "seqlen_q", "seqlen_k", "head_dim",
          "causal", "ms", "tflops", "gbps", "intensity", "max_abs_err"]
for r in rows:
    for f in fields:
        assert f in r, "field %s missing in %r" % (f, r)
    assert r["status"] == "ok", r
    assert r["ms"] > 0 and r["tflops"] > 0 and r["gbps"] > 0 and r["intensity"] > 0, r
    assert r["max_abs_err"] is not None and r["max_abs_err"] < 1e-2, r
    assert r["pass"] is True, r
    # TFLOP/s counts exactly the visible pairs: 4 * pairs * D * B * H
    L, D = r["seqlen_q"], r["head_dim"]
    pairs = L * (L + 1) / 2 if r["causal"] else L * L
    flops = 4 * pairs * D * r["batch"] * r["heads"]
    assert abs(r["tflops"] - flops / (r["ms"] * 1e-3) / 1e12) <= 1e-6 * r["tflops"] + 1e-12, r
    es = 4 if r["dtype"] == "f32" else 2
    nbytes = es * r["batch"] * D * (2 * r["heads"] * L + 2 * r["kv_heads"] * r["seqlen_k"])
    assert abs(r["intensity"] - flops / nbytes) <= 1e-6 * r["intensity"], r
got = list(csv.DictReader(open(sys.argv[2])))
assert len(got) == len(rows), "csv has %d rows" % len(got)
PY
    then echo "ok: bench JSON and CSV are valid and consistent"
    else echo "FAIL: bench JSON/CSV" >&2; failures=$((failures + 1)); fi
else
    echo "note: python3 not found; JSON validation skipped"
fi
# a backend that cannot run a shape is skipped with a note, and the run still succeeds where another row ran
expect 0 "bench skips what a backend cannot do" -- bench --backend cpu-ref --seqlen 32 --head-dim 512,64 --reps 1 \
    --json "$TMP/skip.json"
grep_in out "skipped" "skip note in the table"
# ... but a run in which nothing ran is not a success
expect 1 "bench that ran nothing" -- bench --backend cpu-ref --seqlen 32 --head-dim 512 --reps 1
grep_in err "nothing ran: 1 row skipped" "says that nothing ran and why to look"

# ---- backward: check --backward and bench --backward ------------------------------------------
expect 0 "check --backward f32 default backends" -- check --backward --seqlen 64 --heads 2
grep_in out "dQ" "backward rows name the gradient"
grep_in out "tolerance" "backward states its tolerance"
expect 0 "check --backward GQA causal Lq<Lk bshd" -- check --backward --heads 4 --kv-heads 2 --seqlen 70 --seqlen-k 90 \
    --head-dim 64 --causal --layout bshd
expect 0 "check --backward MQA causal Lq>Lk" -- check --backward --heads 4 --kv-heads 1 --seqlen 90 --seqlen-k 33 \
    --head-dim 40 --causal
expect 0 "check --backward f16 window" -- check --backward --dtype f16 --heads 2 --seqlen 48 --seqlen-k 80 --window 8,4
expect 0 "check --backward bf16 GQA" -- check --backward --dtype bf16 --heads 4 --kv-heads 2 --seqlen 65 --head-dim 32
expect 0 "check --backward tiny with finite differences" -- check --backward --heads 2 --kv-heads 1 --seqlen 5 \
    --seqlen-k 7 --head-dim 4 --causal
grep_in out "finite differences of cpu-ref.*pass" "finite-difference line"
expect 1 "check --backward of a named backend without a backward" -- check --backward --backend cpu-naive --seqlen 32
grep_in out "no backward" "says there is no backward"
expect 0 "bench --backward --json" -- bench --backward --backend cpu-flash --heads 2 --kv-heads 1 --seqlen 64 \
    --seqlen-k 96 --causal 0,1 --warmup 1 --reps 3 --json "$TMP/bwd.json"
grep_in out "3.5x the forward FLOPs" "bench --backward header"
if command -v python3 >/dev/null 2>&1; then
    n=$((n + 1))
    if python3 - "$TMP/bwd.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert isinstance(rows, list) and len(rows) == 2, "expected 2 rows, got %d" % len(rows)
for r in rows:
    assert r["phase"] == "fwd+bwd", r
    assert r["status"] == "ok" and r["ms"] > 0 and r["tflops"] > 0, r
    Lq, Lk, D = r["seqlen_q"], r["seqlen_k"], r["head_dim"]
    # causal bottom-right: query i sees keys up to i + Lk - Lq
    pairs = sum(max(0, min(Lk, i + Lk - Lq + 1)) for i in range(Lq)) if r["causal"] else Lq * Lk
    flops = 3.5 * 4 * pairs * D * r["batch"] * r["heads"]
    assert abs(r["tflops"] - flops / (r["ms"] * 1e-3) / 1e12) <= 1e-6 * r["tflops"] + 1e-12, r
PY
    then echo "ok: bench --backward JSON is valid"
    else echo "FAIL: bench --backward JSON" >&2; failures=$((failures + 1)); fi
fi

# ---- serving: ragged batches and KV caches ------------------------------------------------------
expect 2 "bad length list" -- check --seqlens-q 3,x,4
grep_in err "--seqlens-q" "message names the flag"
expect 2 "empty length" -- bench --seqlens-k 3,,4
grep_in err "--seqlens-k" "message names the flag"
expect 2 "lists of different lengths" -- check --seqlens-q 1,2 --seqlens-k 5
grep_in err "one of each per sequence" "message says one length per sequence"
expect 2 "bad cache kind" -- check --kv-cache ring --seqlens-k 8
grep_in err "contiguous or paged" "message lists the cache kinds"
expect 2 "page size 0" -- check --kv-cache paged --page-size 0 --seqlens-k 8
grep_in err "--page-size" "message names the flag"
expect 2 "page size 257" -- bench --kv-cache paged --page-size 257 --seqlens-k 8
expect 2 "page size without a paged cache" -- check --page-size 16 --seqlens-q 4
expect 2 "append without a cache" -- check --append --seqlens-q 4
expect 2 "cache without cached lengths" -- check --kv-cache contiguous --seqlens-q 1
grep_in err "--seqlens-k" "message asks for the cached lengths"
expect 2 "ragged batch with --batch" -- check --seqlens-q 4,5 --batch 2
expect 2 "every length 0" -- check --seqlens-q 0,0
expect 2 "a KV cache with --backward" -- check --kv-cache contiguous --seqlens-k 4 --backward
grep_in err "no backward" "message says a KV-cache call has no backward"
expect 2 "suite decode with shape flags" -- bench --suite decode --seqlens-q 3
S="--heads 4 --kv-heads 2 --lse"
expect 0 "check varlen causal (empty, 1, primes, one long)" -- check $S --seqlens-q 0,1,7,13,200,3 --causal
grep_in out "2 passed, 0 failed, 1 skipped" "cpu-flash and cpu-ref pass, cpu-naive skipped"
grep_in out "cpu-naive runs the dense call only" "skip names supports()'s reason"
expect 0 "check varlen Lq != Lk with a window" -- check $S --seqlens-q 5,1,9 --seqlens-k 20,0,9 --window 4,2
expect 0 "check decode, contiguous cache" -- check $S --kv-cache contiguous --seqlens-k 300,1,0,77
expect 0 "check chunked prefill, paged 1, append" -- check $S --kv-cache paged --page-size 1 --seqlens-k 40,2 \
    --seqlens-q 5,3 --append --causal
expect 0 "check paged 256 bf16 bshd append" -- check $S --kv-cache paged --page-size 256 --seqlens-k 600,9 \
    --seqlens-q 2,0 --append --dtype bf16 --layout bshd --head-dim 128
expect 1 "a named backend that cannot run a ragged batch" -- check --backend cpu-naive --seqlens-q 4,5
grep_in out "cpu-naive runs the dense call only" "the reason is printed"
# the ragged backward: cpu-flash and cpu-ref against cpu-ref's float64 backward, cpu-naive skipped with the reason
expect 0 "check --backward ragged causal GQA (empty, 1, primes, one long, Lq != Lk)" -- check --backward \
    --seqlens-q 0,1,7,13,150,3 --seqlens-k 5,1,9,13,120,0 --causal --heads 4 --kv-heads 2
grep_in out "6 passed, 0 failed, 1 skipped" "dQ, dK, dV of cpu-flash and cpu-ref pass, cpu-naive skipped"
grep_in out "the ragged backward runs on cpu-ref, cpu-flash, cuda-flash and cuda-flash-f32" "the skip says where the ragged backward runs"
expect 0 "check --backward ragged bf16 window bshd" -- check --backward --seqlens-q 3,0,40 --seqlens-k 9,4,33 \
    --dtype bf16 --window 8,2 --layout bshd --head-dim 128 --heads 4 --kv-heads 1
expect 1 "check --backward ragged on a named backend without it" -- check --backward --backend cpu-naive --seqlens-q 4,5
expect 0 "bench --backward ragged --json" -- bench --backward --backend cpu-flash --seqlens-q 30,0,77 \
    --seqlens-k 41,5,77 --causal --heads 2 --warmup 1 --reps 2 --json "$TMP/vbwd.json"
grep_in out "varlen B=3" "the ragged row names its batch"
expect 0 "bench a paged append batch with --json" -- bench --backend cpu-flash,cpu-naive --kv-cache paged \
    --page-size 16 --seqlens-k 500,20,3 --seqlens-q 1,4,2 --append --heads 8 --kv-heads 2 --causal 0,1 --warmup 1 \
    --reps 3 --json "$TMP/serve.json"
grep_in out "KV-cache bandwidth" "bandwidth table"
grep_in out "% copy" "percentage of the copy bandwidth"
if command -v python3 >/dev/null 2>&1; then
    n=$((n + 1))
    if python3 - "$TMP/serve.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 4, "expected 4 rows, got %d" % len(rows)
flash = [r for r in rows if r["backend"] == "cpu-flash"]
naive = [r for r in rows if r["backend"] == "cpu-naive"]
assert all(r["status"] == "skipped" for r in naive), naive
cached, new, H, D = [500, 20, 3], [1, 4, 2], 8, 64
for r in flash:
    assert r["status"] == "ok" and r["pass"] is True, r
    assert "paged16" in r["call"] and r["copy_gbps"] > 0 and r["kv_gbps"] > 0, r
    # FLOPs over each sequence's own keys (cache + appended tokens), causal aligned to its end
    pairs = 0
    for c, q in zip(cached, new):
        lk = c + q
        pairs += sum(min(lk, i + lk - q + 1) for i in range(q)) if r["causal"] else q * lk
    flops = 4 * pairs * D * H
    assert abs(r["tflops"] - flops / (r["ms"] * 1e-3) / 1e12) <= 1e-6 * r["tflops"], (r, flops)
    kv = 2 * sum(c + q for c, q in zip(cached, new)) * 2 * D * 4
    assert abs(r["kv_gbps"] - kv / (r["ms"] * 1e-3) / 1e9) <= 1e-6 * r["kv_gbps"], (r, kv)
PY
    then echo "ok: serving bench JSON is valid and its counts exact"
    else echo "FAIL: serving bench JSON" >&2; failures=$((failures + 1)); fi
fi

# ---- tune on a serving call: its own bucket, which auto then runs ---------------------------
expect 0 "tune a paged decode bucket" -- tune --device cpu --backend cpu-flash --seqlens-q 1,1,1 \
    --seqlens-k 300,700,2000 --heads 8 --kv-heads 2 --head-dim 64 --kv-cache paged --page-size 16 --budget-s 2 \
    --out "$TMP/tuning.txt"
grep_in out " paged " "tune prints the call kind"
grep -q "	paged$" "$TMP/tuning.txt" || { echo "FAIL: the table has no paged entry" >&2; failures=$((failures + 1)); }
n=$((n + 1))
FLASHWATT_TUNING="$TMP/tuning.txt" "$FW" bench --device cpu --backend auto --seqlens-q 1,1,1 --seqlens-k 300,700,2000 \
    --heads 8 --kv-heads 2 --head-dim 64 --kv-cache paged --page-size 16 --reps 3 --json "$TMP/auto.json" >/dev/null 2>&1
if grep -q "table: cpu-flash" "$TMP/auto.json"; then echo "ok: auto takes the paged bucket's entry"
else echo "FAIL: auto on the tuned paged call did not use the table" >&2; cat "$TMP/auto.json" >&2; failures=$((failures + 1)); fi
n=$((n + 1))
FLASHWATT_TUNING="$TMP/tuning.txt" "$FW" bench --device cpu --backend auto --seqlens-q 1,1,1 --seqlens-k 300,700,2000 \
    --heads 8 --kv-heads 2 --head-dim 64 --kv-cache contiguous --reps 3 --json "$TMP/auto2.json" >/dev/null 2>&1
if grep -q "registry order" "$TMP/auto2.json"; then echo "ok: a contiguous cache does not take the paged entry"
else echo "FAIL: the contiguous call took another bucket's entry" >&2; cat "$TMP/auto2.json" >&2; failures=$((failures + 1)); fi
expect 1 "tune with nothing to measure fails" -- tune --device cpu --backend cpu-naive --seqlens-q 1,1 \
    --seqlens-k 30,70 --heads 2 --head-dim 16 --kv-cache contiguous --budget-s 1 --out "$TMP/tuning2.txt"
grep_in out "nothing to measure (cpu-naive: " "tune says why a bucket has nothing to measure"

# ---- what a newcomer hits: outputs checked first, minimums, progress, messages ------------------
start=$(date +%s)
expect 2 "--csv into a missing directory, refused before the run" -- bench --backend cpu-ref --seqlen 4096 \
    --csv "$TMP/no/such/dir/out.csv"
grep_in err "does not exist" "names the missing directory"
if grep -q "TFLOP/s" "$TMP/out" || [ $(( $(date +%s) - start )) -gt 5 ]; then
    echo "FAIL: --csv was checked only after the run" >&2; failures=$((failures + 1))
fi
expect 2 "--json naming a directory" -- bench --backend cpu-ref --json "$TMP"
grep_in err "is a directory" "says it is a directory"
: > "$TMP/plot-in-the-way"
expect 2 "--plot naming a file" -- bench --backend cpu-ref --plot "$TMP/plot-in-the-way"
grep_in err "not a directory" "says it is not a directory"
if python3 -c 'import matplotlib' >/dev/null 2>&1; then
    export FLASHWATT_PLOT_SCRIPT=/nonexistent/plot.py
    expect 2 "--plot without its script" -- bench --plot "$TMP/plots"
    unset FLASHWATT_PLOT_SCRIPT
    grep_in err "cannot find the plot script" "says what is missing"
else
    expect 2 "--plot without matplotlib, refused before the run" -- bench --plot "$TMP/plots"
    grep_in err "pip install matplotlib" "says how to get matplotlib"
fi
expect 2 "--precision bf16 (no backend has the mode)" -- check --precision bf16
grep_in err "'bf16' is not one of exact, tf32, 3xtf32" "names the modes"
expect 2 "--precision tf32 with f16 inputs" -- check --precision tf32 --dtype f16
grep_in err "applies to f32 inputs; --dtype is f16" "says why"
expect 2 "--precision with a list (bench runs one mode)" -- bench --precision tf32,3xtf32 --device cpu
expect 1 "check --precision 3xtf32 on the CPU backends: each says it has no such mode" -- \
    check --device cpu --precision 3xtf32 --seqlen 64
grep_in out "3 skipped" "the default set skips them"
grep_in out "no reduced precision mode" "with the backend's reason"
expect 1 "a named backend without the mode fails" -- check --backend cpu-flash --precision tf32 --seqlen 64
expect 1 "bench --precision tf32 on the CPU backends: skipped with the reason, nothing ran" -- \
    bench --device cpu --precision tf32 --seqlen 128
grep_in out "skipped: unsupported: .*no reduced precision mode" "each row says why"
expect 0 "--precision exact" -- check --backend cpu-naive --precision exact --seqlen 64
grep_in out "1 passed, 0 failed" "runs as without the flag"
expect 2 "--window-s below its minimum of 1 s" -- bench --window-s 0.5
grep_in err "--window-s: '0.5' is not a number of seconds >= 1" "names the flag and the minimum"
export FLASHWATT_PROGRESS_S=0.05
expect 0 "check on a long problem shows progress" -- check --backend cpu-naive --heads 4 --seqlen 1536
unset FLASHWATT_PROGRESS_S
grep_in err "so far" "a progress line while the step runs"
grep_in err "done in" "a line when it ends"
if "$FW" info | grep -q "^build: *CUDA backends compiled in" && [ ! -e /dev/nvidiactl ] &&
   ! { command -v ldconfig >/dev/null 2>&1 && ldconfig -p | grep -q "libcuda.so.1 "; }; then
    expect 0 "info on a machine without an NVIDIA driver" -- info
    grep_in out "no NVIDIA driver" "says there is no driver, not that it is too old"
fi

echo "cli_test: $n checks, $failures failed"
[ "$failures" -eq 0 ]
