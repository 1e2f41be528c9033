/* flashwatt — exact, fast, memory-efficient attention with power-aware scheduling.
 *
 *   O = softmax(scale · Q Kᵀ + mask) · V
 *
 * The whole public C API. Every function returns an fw_status; a context also keeps a
 * message naming the argument and the limit (fw_context_last_error).
 *
 * Tensors are descriptors in the logical order (batch, heads, seq, head_dim), like
 * torch.nn.functional.scaled_dot_product_attention. Strides are in elements and free, so a
 * (batch, seq, heads, dim) buffer is described without a copy (see fw_tensor_bshd). The last
 * dimension (head_dim) must have stride 1.
 */
#ifndef FLASHWATT_H
#define FLASHWATT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the shared library exports: the functions declared here and nothing else (it is built with
 * hidden visibility, so internal functions stay private to it). */
#if defined(__GNUC__)
#define FW_API __attribute__((visibility("default")))
#else
#define FW_API
#endif

#include "flashwatt_version.h" /* FW_VERSION_MAJOR/MINOR/PATCH/STRING, generated from CMake's project(VERSION) */
#define FW_MAX_HEAD_DIM 256

typedef enum fw_status {
    FW_OK = 0,
    FW_ERR_NULL_ARGUMENT = 1,    /* a required pointer argument is NULL */
    FW_ERR_INVALID_SHAPE = 2,    /* a size is <= 0, sizes disagree, or a limit is exceeded */
    FW_ERR_INVALID_STRIDE = 3,   /* negative, non-unit head_dim stride, or self-overlapping output */
    FW_ERR_DTYPE_MISMATCH = 4,   /* tensors of one call must share a dtype; LSE is float32 */
    FW_ERR_DEVICE_MISMATCH = 5,  /* tensors of one call must live on one device */
    FW_ERR_OVERLAP = 6,          /* an output overlaps an input or another output */
    FW_ERR_INVALID_VALUE = 7,    /* a scalar parameter is out of range (scale, window, threads...) */
    FW_ERR_UNSUPPORTED = 8,      /* the named backend cannot run this problem (message says why) */
    FW_ERR_NO_BACKEND = 9,       /* no backend (or no backend of that name) can run it */
    FW_ERR_DEVICE = 10,          /* a CUDA call failed; the message carries CUDA's own text */
    FW_ERR_OUT_OF_MEMORY = 11,   /* host or device allocation failed */
    FW_ERR_NOT_IMPLEMENTED = 12, /* declared but not available in this build/backend */
    FW_ERR_INTERNAL = 13,
    FW_ERR_CONTEXT_BUSY = 14     /* another thread's call is running on this context (one call at a time) */
} fw_status;

typedef enum fw_dtype { FW_F32 = 0, FW_F16 = 1, FW_BF16 = 2 } fw_dtype;

typedef enum fw_device_kind { FW_DEVICE_CPU = 0, FW_DEVICE_CUDA = 1 } fw_device_kind;

typedef struct fw_device {
    fw_device_kind kind;
    int index; /* CUDA ordinal; 0 for the CPU */
} fw_device;

/* Logical order: size[0]=batch, size[1]=heads, size[2]=seq, size[3]=head_dim. */
typedef struct fw_tensor {
    void *data;
    fw_dtype dtype;
    fw_device device;
    int64_t size[4];
    int64_t stride[4]; /* in elements */
} fw_tensor;

/* Descriptors of contiguous buffers laid out as (B, H, S, D) or (B, S, H, D). */
FW_API fw_tensor fw_tensor_bhsd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                                int64_t seq, int64_t head_dim);
FW_API fw_tensor fw_tensor_bshd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                                int64_t seq, int64_t head_dim);

#define FW_WINDOW_UNLIMITED (-1)

/* Masking, FlashAttention's convention: query i may see key j when
 *   i + (Lk - Lq) - window_left <= j <= i + (Lk - Lq) + window_right
 * (a bound of -1 is unlimited). causal=1 means window_right = 0, aligned to the bottom-right
 * corner when Lq != Lk. A query row that sees no key gives output 0 and LSE = -inf.
 * Grouped-query / multi-query attention: k and v may have fewer heads than q (H % H_kv == 0);
 * query head h reads kv head h / (H / H_kv). */
typedef struct fw_attn_params {
    float scale; /* 0 means 1/sqrt(head_dim) */
    int causal;
    int64_t window_left;  /* FW_WINDOW_UNLIMITED or >= 0 */
    int64_t window_right; /* FW_WINDOW_UNLIMITED or >= 0 */
} fw_attn_params;

FW_API fw_attn_params fw_attn_params_default(void); /* scale 0 (auto), not causal, windows unlimited */

/* Precision of float32 inputs. Reduced modes are opt-in and run only where a backend has them. */
typedef enum fw_precision {
    FW_PRECISION_EXACT = 0, /* float32 arithmetic throughout */
    FW_PRECISION_TF32 = 1,  /* tensor cores, tf32 operands */
    FW_PRECISION_3XTF32 = 2, /* tensor cores, split tf32 (near-f32 accuracy) */
    FW_PRECISION_BF16 = 3   /* tensor cores, bf16 operands, f32 accumulation */
} fw_precision;

typedef enum fw_objective {
    FW_OBJECTIVE_FASTEST = 0,
    FW_OBJECTIVE_MIN_ENERGY = 1,
    FW_OBJECTIVE_POWER_CAP = 2
} fw_objective;

/* What the power-aware scheduler optimises. Zero values mean "no limit". */
typedef struct fw_policy {
    fw_objective objective;
    double power_cap_w;        /* with FW_OBJECTIVE_POWER_CAP */
    double temperature_limit_c;
    int allow_reduced_precision; /* float32 inputs may run in tf32/3xtf32/bf16 ... */
    double error_budget;         /* ... when their measured relative error is within this */
} fw_policy;

FW_API fw_policy fw_policy_default(void); /* fastest, no limits, exact */

/* ---- context ----------------------------------------------------------------------------
 * Threads: a context serves one call at a time. A call or setter on a context while another thread's
 * call or setter runs on it returns FW_ERR_CONTEXT_BUSY at once and changes nothing (it records no
 * message either). Threads that call at the same time use a context each; contexts share nothing that
 * needs a lock. fw_context_last_error and fw_context_last_backend describe the context's last call:
 * read them from the thread that made it, before its next call. Destroy a context only when no call on
 * it runs. The backend queries, fw_cpu_simd_level and fw_cuda_device_count may be called from any
 * thread. */
typedef struct fw_context fw_context;

FW_API fw_status fw_context_create(fw_context **ctx);
FW_API void fw_context_destroy(fw_context *ctx);
/* "auto" (default) or a backend name from fw_backend_name(). */
FW_API fw_status fw_context_set_backend(fw_context *ctx, const char *backend);
/* CPU threads; 0 = all online cores (default). */
FW_API fw_status fw_context_set_threads(fw_context *ctx, int threads);
/* cudaStream_t for CUDA backends; NULL = the legacy default stream. */
FW_API fw_status fw_context_set_stream(fw_context *ctx, void *cuda_stream);
/* Precision for float32 inputs; FW_PRECISION_EXACT unless set. */
FW_API fw_status fw_context_set_precision(fw_context *ctx, fw_precision precision);
FW_API fw_status fw_context_set_policy(fw_context *ctx, const fw_policy *policy);
/* Backward only. 1: reproducible, bit-identical gradients run to run (the GPU computes dQ in a separate
 * pass without atomics). 0 (default): whichever is faster — on Hopper (compute capability 9.0) that is
 * the same separate pass (its wgmma kernels), elsewhere dQ added with atomics, as FlashAttention-2 does.
 * The CPU backends are deterministic either way. */
FW_API fw_status fw_context_set_deterministic(fw_context *ctx, int deterministic);
/* Device workspace in bytes that a call may take beyond its inputs and outputs; 0 (default) = no
 * budget. Backward only, for now: with a budget > 0 the CUDA backward may keep the Lq×Lk matrices
 * (S/P, dP/dS) of short sequences in device memory instead of recomputing them (the "store" strategy,
 * cuBLAS GEMMs; chosen when seqlen_q·seqlen_k is at most 2^20 and one (batch, head) slice's matrices
 * plus the O(L·D) accumulators fit; larger batches run in chunks within the budget). 0 never picks it.
 * Outside the budget, as the backward's O(L·D) accumulators are: cuda-flash's staged copies of tensors
 * its kernels cannot read in place (head_dim not a multiple of 8, rows not 16-byte aligned; dense and
 * ragged calls), O(tokens · head_dim) for the duration of the call. */
FW_API fw_status fw_context_set_memory_budget(fw_context *ctx, size_t bytes);
/* Message of the last failed call on this context, "" after a success. Valid until the next call. */
FW_API const char *fw_context_last_error(const fw_context *ctx);
/* Name of the backend that ran the last successful call on this context. */
FW_API const char *fw_context_last_backend(const fw_context *ctx);

FW_API const char *fw_status_string(fw_status status);
FW_API const char *fw_dtype_name(fw_dtype dtype);
FW_API const char *fw_version(void);

/* ---- attention ------------------------------------------------------------------------- */
/* Non-finite values, the forward of every backend and dtype (tests/test_nonfinite.c, also with
 * --device cuda). A query row reads its q, and k and v at the keys it sees; its logits
 * x_j = scale · q·k_j are float32 values.
 *  - A NaN or +Inf logit (NaN in q or a seen k, Inf in them, or overflow, below) makes every element
 *    of the row's O NaN, and its LSE NaN.
 *  - A logit of -Inf weighs 0, as a masked key does. A row whose logits are all -Inf gives O = 0 and
 *    LSE = -inf, as a row that sees no key (where v holds NaN/Inf at its keys, O may be NaN there).
 *  - NaN in v at a seen key makes that column of O NaN, whatever the key's weight (one that
 *    underflows to 0 too); ±Inf there makes it ±Inf or NaN. LSE depends on q and k only.
 *  - Overflow: q·k and scale·q·k beyond float32's range (|x| > FLT_MAX ≈ 3.4e38) are ±Inf and take
 *    the rules above. Keep them below 2^126 (≈ 8.5e37) for a finite answer: between the two a
 *    backend may overflow early (some fold log2(e) into the scale). On a CUDA device a scale above
 *    1e30 is outside this rule: the kernels carry scale·log2(e) through their exponent arithmetic,
 *    which can overflow where the CPU backends' float32 logits do not (NaN or ±Inf rows).
 *  - Keys a row does not see: the CPU backends never read them, so nothing there reaches the row.
 *    The CUDA kernels multiply whole key tiles, so NaN/Inf in v at a key hidden by a causal or window
 *    mask but in a tile the row reads may make the row NaN (0·NaN, as in FlashAttention): unspecified
 *    on the GPU. Keys past a sequence's end (ragged batches, caches) do not reach it.
 * Otherwise finite inputs give finite O and LSE. The backward propagates non-finite values without a
 * pattern this contract fixes. */
/* q: (B, H, Lq, D); k, v: (B, H_kv, Lk, D); o: (B, H, Lq, D), all one dtype and device.
 * lse (optional, may be NULL): float32, contiguous (B, H, Lq), on the same device, natural log. */
FW_API fw_status fw_attention_forward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                      const fw_tensor *v, fw_tensor *o, float *lse,
                                      const fw_attn_params *params);

/* Backward: from q, k, v, the forward's o and lse, and dout = dL/dO, produce dq, dk, dv
 * (same shapes as q, k, v). dk/dv are summed over the query heads of each kv group. */
FW_API fw_status fw_attention_backward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                       const fw_tensor *v, const fw_tensor *o, const float *lse,
                                       const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                       const fw_attn_params *params);

/* ---- serving: ragged batches and KV caches --------------------------------------------------
 * Sequences of different lengths packed without padding (FlashAttention's "varlen" convention):
 * sequence b owns rows cu_seqlens[b] .. cu_seqlens[b+1] - 1 of a packed tensor, a tensor whose batch
 * size is 1 and whose seq dimension is the total, e.g. fw_tensor_bshd(ptr, dt, dev, 1, H, total, D)
 * for a (total, H, D) buffer. Offsets are int32 and live on the tensors' device. Masks apply per
 * sequence exactly as in the dense call with that sequence's lengths (causal and windows aligned to
 * its bottom-right corner); an empty sequence (equal offsets) is allowed and writes nothing. A packed
 * tensor has at least one row (sizes are >= 1): a batch with no query at all is refused, skip the call.
 *
 * Values that live on the host (CPU tensors) are checked fully before anything runs: offsets that
 * start at 0, never decrease, end at the packed length and stay within max_seqlen; cache lengths >= 0
 * and, plus new tokens, within the cache's capacity; the block-table entries a sequence uses (its
 * first ceil(keys / page_size); the rest of a row is never read) inside the page pool. Values on a CUDA
 * device are not read by the host (no synchronisation, so the call can be captured into a CUDA graph
 * and replayed while they change); the kernels clamp them instead and never touch memory outside the
 * tensors: an offset outside [0, total] is clamped into it, a sequence longer than max_seqlen is cut
 * to max_seqlen (its rows beyond are not written), keys beyond the cache's capacity and keys on a page
 * index outside [0, num_pages) are treated as masked, and a new token that would land there is not
 * written. Use fw_context_set_check_device_values(ctx, 1) while developing to have them checked on
 * the host as well (a synchronising copy). */
typedef struct fw_varlen {
    int64_t batch;               /* number of sequences B >= 1 */
    const int32_t *cu_seqlens_q; /* B + 1 offsets into q's and o's seq dimension */
    const int32_t *cu_seqlens_k; /* B + 1 offsets into k's and v's seq dimension (varlen forward) */
    int64_t max_seqlen_q;        /* >= every query length: sizes the launch */
    int64_t max_seqlen_k;        /* >= every key length */
} fw_varlen;

/* Ragged forward: q, o (1, H, total_q, D); k, v (1, H_kv, total_k, D); lse (optional) float32
 * (H, total_q) contiguous, FlashAttention's varlen layout. Every other rule as fw_attention_forward. */
FW_API fw_status fw_attention_varlen_forward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                             const fw_tensor *v, fw_tensor *o, float *lse,
                                             const fw_varlen *seqs, const fw_attn_params *params);

/* Ragged backward (training on packed batches): the gradients of fw_attention_varlen_forward with
 * the same seqs and params. q, o, dout, dq (1, H, total_q, D); k, v, dk, dv (1, H_kv, total_k, D);
 * lse (required) float32 (H, total_q) contiguous, as the ragged forward wrote it. Per sequence
 * exactly the dense backward with that sequence's lengths: dk/dv summed over the query heads of
 * each kv group, causal and windows bottom-right aligned; every row of dq, dk, dv is written, the
 * dk/dv rows of keys no query sees (an empty sequence's keys among them) with 0. Runs on cpu-ref,
 * cpu-flash, cuda-flash (f16/bf16) and cuda-flash-f32 (f32); every other rule (validation, offsets
 * on the device clamped, overlaps) as the ragged forward. */
FW_API fw_status fw_attention_varlen_backward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                              const fw_tensor *v, const fw_tensor *o, const float *lse,
                                              const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                              const fw_varlen *seqs, const fw_attn_params *params);

/* A KV cache, FlashAttention's flash_attn_with_kvcache layouts:
 *   contiguous (block_table NULL): k, v (B, H_kv, capacity, D), e.g. a (B, capacity, H_kv, D)
 *     buffer as fw_tensor_bshd(ptr, dt, dev, B, H_kv, capacity, D);
 *   paged: k, v (num_pages, H_kv, page_size, D), e.g. a (num_pages, page_size, H_kv, D) pool as
 *     fw_tensor_bshd(ptr, dt, dev, num_pages, H_kv, page_size, D), page_size 1..256; sequence b's
 *     key j is on page block_table[b * block_table_stride + j / page_size], row j % page_size; pages
 *     in any order, capacity = max_pages_per_seq * page_size.
 * seqlens: cache_seqlens[B], int32, the tokens already in the cache of each sequence. */
typedef struct fw_kv_cache {
    fw_tensor k, v;
    const int32_t *seqlens;
    const int32_t *block_table; /* NULL: contiguous; else (B, max_pages_per_seq) int32 */
    int64_t max_pages_per_seq;
    int64_t block_table_stride; /* elements between the table's rows; 0 = max_pages_per_seq */
} fw_kv_cache;

/* New queries against a KV cache (decode, chunked prefill, speculative verification).
 * q, o: (B, H, Lq, D), or packed (1, H, total_q, D) with q_seqs giving cu_seqlens_q (cu_seqlens_k
 * and max_seqlen_k are unused there: the cache says them). k_new, v_new (both or neither): the new
 * tokens' keys and values in q's geometry with H_kv heads; they are written into the cache at rows
 * seqlens[b] .. seqlens[b] + Lq_b - 1 and attended to in the same call. Sequence b attends to its
 * first seqlens[b] (+ Lq_b with k_new) cached keys; causal aligns each query to the end of them, so
 * the last query sees every key. seqlens is not updated (the caller advances it). lse (optional):
 * (B, H, Lq), or (H, total_q) with q_seqs. */
FW_API fw_status fw_attention_kvcache_forward(fw_context *ctx, const fw_tensor *q, const fw_kv_cache *cache,
                                              const fw_tensor *k_new, const fw_tensor *v_new, fw_tensor *o,
                                              float *lse, const fw_varlen *q_seqs,
                                              const fw_attn_params *params);

/* CUDA graphs: device scratch the context's calls take instead of allocating (split-KV partials).
 * With a workspace set, a ragged or cache call on the GPU neither allocates nor synchronises; its
 * split plan depends only on host-known sizes (batch, heads, max_seqlen_q, the cache's capacity),
 * and it takes fewer splits rather than more memory than given. NULL, 0 = allocate per call
 * (stream-ordered). The memory stays the caller's. With a workspace set, cuda-flash refuses a forward
 * it would have to stage (head_dim not a multiple of 8, rows not 16-byte aligned: a padded copy of
 * O(tokens · head_dim) bytes that it would allocate), with that reason. */
FW_API fw_status fw_context_set_workspace(fw_context *ctx, void *device_ptr, size_t bytes);
/* Bytes of workspace that calls up to these sizes take at most on ctx's device choice. */
typedef struct fw_workspace_query {
    fw_device device;
    fw_dtype dtype;
    int64_t max_batch, heads, kv_heads, head_dim;
    int64_t max_seqlen_q; /* new queries per sequence (1 for decode) */
    int64_t max_seqlen_k; /* keys per sequence: the cache's capacity */
} fw_workspace_query;
FW_API fw_status fw_attention_workspace_size(fw_context *ctx, const fw_workspace_query *query, size_t *bytes);
/* Debugging: also copy device-resident offsets, cache lengths and block tables to the host and
 * check them as host values are checked (synchronises the stream; not for graph capture). */
FW_API fw_status fw_context_set_check_device_values(fw_context *ctx, int check);

/* ---- backends -------------------------------------------------------------------------- */
typedef struct fw_backend_info {
    const char *name;
    const char *description;
    fw_device_kind device;
    int usable;              /* compiled in and its device is present now */
    char why_not[256];       /* when !usable */
} fw_backend_info;

FW_API int fw_backend_count(void);
FW_API fw_status fw_backend_get_info(int index, fw_backend_info *info);
/* Can backend `name` run this forward problem? FW_OK if so; otherwise FW_ERR_UNSUPPORTED (or the
 * validation status) with the reason written to why (may be NULL). */
FW_API fw_status fw_backend_supports(const char *name, const fw_tensor *q, const fw_tensor *k,
                                     const fw_tensor *v, const fw_tensor *o, const fw_attn_params *params,
                                     char *why, size_t why_len);

/* CPU SIMD level in use: "avx512", "avx2" or "scalar". */
FW_API const char *fw_cpu_simd_level(void);
/* Number of CUDA devices visible (0 where there is no driver or no GPU). */
FW_API int fw_cuda_device_count(void);

/* ==== telemetry ================================================================================
 * GPU power/energy/temperature/clock readings (NVML, loaded at run time with dlopen: no build-time
 * dependency), CPU package energy (Linux powercap) where readable, a sampler thread keeping a ring of
 * readings, and energy windows. Every field carries a validity bit: a source that is absent or does
 * not answer leaves its bit clear and the formatting helpers print "n/a", never a made-up zero.
 * Readings, samples and energy windows of one fw_telemetry may be taken from several threads; start
 * and stop its sampler (and close it) from one thread. */
typedef struct fw_telemetry fw_telemetry;

/* Validity bits of fw_gpu_reading.valid. */
#define FW_TEL_POWER_INSTANT  (1u << 0)  /* power_instant_w: NVML field 186 */
#define FW_TEL_POWER_AVERAGE  (1u << 1)  /* power_average_w: NVML 1-s average (field 185) */
#define FW_TEL_ENERGY         (1u << 2)  /* energy_mj: total-energy counter since driver load */
#define FW_TEL_TEMPERATURE    (1u << 3)  /* temperature_c: GPU core */
#define FW_TEL_SM_CLOCK       (1u << 4)  /* sm_clock_mhz */
#define FW_TEL_MEM_CLOCK      (1u << 5)  /* mem_clock_mhz */
#define FW_TEL_UTILIZATION    (1u << 6)  /* util_gpu_pct, util_mem_pct */
#define FW_TEL_THROTTLE       (1u << 7)  /* throttle_reasons: clock-event reason bits */
#define FW_TEL_POWER_LIMIT    (1u << 8)  /* power_limit_w: enforced power limit */

/* Clock-event (throttle) reason bits, NVML's values. */
#define FW_THROTTLE_GPU_IDLE            0x1ull
#define FW_THROTTLE_APPLICATIONS_CLOCKS 0x2ull
#define FW_THROTTLE_SW_POWER_CAP        0x4ull
#define FW_THROTTLE_HW_SLOWDOWN         0x8ull
#define FW_THROTTLE_SYNC_BOOST          0x10ull
#define FW_THROTTLE_SW_THERMAL          0x20ull
#define FW_THROTTLE_HW_THERMAL          0x40ull
#define FW_THROTTLE_HW_POWER_BRAKE      0x80ull
#define FW_THROTTLE_DISPLAY_CLOCKS      0x100ull

typedef struct fw_gpu_reading {
    int gpu;                 /* NVML device index */
    double t_s;              /* when it was read: seconds on the telemetry clock (monotonic) */
    unsigned valid;          /* FW_TEL_* bits of the fields below that hold a real reading */
    double power_instant_w;
    double power_average_w;
    uint64_t energy_mj;
    double temperature_c;
    unsigned sm_clock_mhz;
    unsigned mem_clock_mhz;
    unsigned util_gpu_pct;
    unsigned util_mem_pct;
    uint64_t throttle_reasons;
    double power_limit_w;
} fw_gpu_reading;

typedef struct fw_cpu_reading {
    double t_s;
    int energy_valid;        /* 0 where powercap is absent or not readable (often root-only) */
    double energy_j;         /* package energy, summed over packages, wrap-corrected since open */
    int packages;
    char source[64];         /* e.g. "intel-rapl:0", or why it is n/a */
} fw_cpu_reading;

/* Opens every available source. Succeeds (FW_OK) even with no GPU and no powercap: then
 * fw_telemetry_gpu_count() is 0 and fw_telemetry_describe() says why. */
FW_API fw_status fw_telemetry_open(fw_telemetry **out);
FW_API void fw_telemetry_close(fw_telemetry *t);
FW_API int fw_telemetry_gpu_count(const fw_telemetry *t);
/* One line: which sources are in use, or why each is n/a. */
FW_API const char *fw_telemetry_describe(const fw_telemetry *t);
/* Device name ("NVIDIA H100 80GB HBM3"), or "n/a". */
FW_API fw_status fw_telemetry_gpu_name(fw_telemetry *t, int gpu, char *buf, size_t len);
/* PCI bus id of a telemetry GPU ("00000000:3B:00.0"), or "n/a". */
FW_API fw_status fw_telemetry_gpu_pci_bus_id(fw_telemetry *t, int gpu, char *buf, size_t len);
/* Telemetry GPU index of a PCI bus id in either spelling (NVML "00000000:3B:00.0", CUDA's
 * cudaDeviceGetPCIBusId "0000:3b:00.0"); -1 when none. NVML indices need not equal CUDA ordinals
 * (CUDA_VISIBLE_DEVICES, enumeration order): map through this. */
FW_API int fw_telemetry_gpu_for_pci_bus_id(fw_telemetry *t, const char *bus_id);
/* A fresh reading now. With no such GPU: FW_ERR_INVALID_VALUE and r->valid = 0. */
FW_API fw_status fw_telemetry_read(fw_telemetry *t, int gpu, fw_gpu_reading *r);
FW_API fw_status fw_telemetry_read_cpu(fw_telemetry *t, fw_cpu_reading *r);
/* Seconds on the telemetry clock (the t_s of readings). */
FW_API double fw_telemetry_now(fw_telemetry *t);

/* Sampler thread: reads every GPU each period_ms (default 20 when 0) into a ring of `capacity`
 * readings per GPU (default 4096 when 0). Restarting replaces the ring. */
FW_API fw_status fw_telemetry_start_sampler(fw_telemetry *t, int period_ms, int capacity);
FW_API fw_status fw_telemetry_stop_sampler(fw_telemetry *t);
/* Copies up to max of the newest samples of `gpu` (oldest first) with t_s >= since_s into out;
 * returns how many (0 when the sampler never ran). */
FW_API int fw_telemetry_samples(fw_telemetry *t, int gpu, double since_s, fw_gpu_reading *out, int max);

/* Cool-down before an energy measurement: polls gpu's instant power (else the 1-s average) every
 * 50 ms until it has stayed within tol_w of baseline_w for hold_s seconds. Returns 1 when settled,
 * 0 after timeout_s without settling, -1 when no power reading is available (n/a). *last_w (may be
 * NULL) gets the last reading. */
FW_API int fw_telemetry_wait_settled(fw_telemetry *t, int gpu, double baseline_w, double tol_w, double hold_s,
                                     double timeout_s, double *last_w);
/* Idle baseline: mean power over `seconds` of 50 ms polls; FW_OK, or FW_ERR_UNSUPPORTED when n/a. */
FW_API fw_status fw_telemetry_mean_power(fw_telemetry *t, int gpu, double seconds, double *mean_w);

/* Throttle reasons: comma-separated names of the set bits ("sw_power_cap,hw_thermal"), "none" for
 * 0, unknown bits as hex. Returns the length it wanted (snprintf-style). */
FW_API size_t fw_throttle_reasons_string(uint64_t reasons, char *buf, size_t len);
/* Name of one reason bit (e.g. FW_THROTTLE_HW_SLOWDOWN -> "hw_slowdown"), NULL if unknown. */
FW_API const char *fw_throttle_reason_name(uint64_t bit);

/* One field of a reading as text with its unit ("312.4 W", "67 C", "1980 MHz", "sw_power_cap"), or
 * "n/a" when its validity bit is clear. field is one FW_TEL_* bit. */
FW_API size_t fw_gpu_reading_format(const fw_gpu_reading *r, unsigned field, char *buf, size_t len);

/* Energy windows: joules over [begin, end]. From the total-energy counter (source "counter") when
 * both ends have it; otherwise the integral of the sampler's instant power over the window
 * (source "sampled"; needs the sampler running); otherwise n/a (valid = 0). The sampled integral is
 * also kept beside a counter result as a cross-check. Measure >= 1 s windows: the counter and the
 * power reading refresh about every 100 ms. */
typedef struct fw_energy_window {
    /* set by fw_energy_begin */
    fw_telemetry *t;
    int gpu;
    double t0_s;
    int begin_energy_valid;
    uint64_t begin_energy_mj;
    int begin_cpu_valid;
    double begin_cpu_j;
    /* results, set by fw_energy_end */
    int valid;               /* joules/avg_w hold a real measurement */
    const char *source;      /* "counter", "sampled" or "n/a" */
    double seconds;
    double joules;
    double avg_w;
    int peak_valid;          /* peak_w from instant power readings seen in the window */
    double peak_w;
    int samples;             /* sampler readings inside the window */
    int sampled_valid;       /* the cross-check integral */
    double sampled_joules;
    int cpu_valid;           /* CPU package energy over the same window */
    double cpu_joules;
} fw_energy_window;

FW_API fw_status fw_energy_begin(fw_telemetry *t, int gpu, fw_energy_window *w);
FW_API fw_status fw_energy_end(fw_energy_window *w);

#ifdef __cplusplus
}
#endif
#endif /* FLASHWATT_H */
