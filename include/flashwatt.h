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

#define FW_VERSION_MAJOR 0
#define FW_VERSION_MINOR 1
#define FW_VERSION_PATCH 0
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
    FW_ERR_INTERNAL = 13
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
fw_tensor fw_tensor_bhsd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                         int64_t seq, int64_t head_dim);
fw_tensor fw_tensor_bshd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
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

fw_attn_params fw_attn_params_default(void); /* scale 0 (auto), not causal, windows unlimited */

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

fw_policy fw_policy_default(void); /* fastest, no limits, exact */

/* ---- context ---------------------------------------------------------------------------- */
typedef struct fw_context fw_context;

fw_status fw_context_create(fw_context **ctx);
void fw_context_destroy(fw_context *ctx);
/* "auto" (default) or a backend name from fw_backend_name(). */
fw_status fw_context_set_backend(fw_context *ctx, const char *backend);
/* CPU threads; 0 = all online cores (default). */
fw_status fw_context_set_threads(fw_context *ctx, int threads);
/* cudaStream_t for CUDA backends; NULL = the legacy default stream. */
fw_status fw_context_set_stream(fw_context *ctx, void *cuda_stream);
/* Precision for float32 inputs; FW_PRECISION_EXACT unless set. */
fw_status fw_context_set_precision(fw_context *ctx, fw_precision precision);
fw_status fw_context_set_policy(fw_context *ctx, const fw_policy *policy);
/* Message of the last failed call on this context, "" after a success. Valid until the next call. */
const char *fw_context_last_error(const fw_context *ctx);
/* Name of the backend that ran the last successful call on this context. */
const char *fw_context_last_backend(const fw_context *ctx);

const char *fw_status_string(fw_status status);
const char *fw_dtype_name(fw_dtype dtype);
const char *fw_version(void);

/* ---- attention ------------------------------------------------------------------------- */
/* q: (B, H, Lq, D); k, v: (B, H_kv, Lk, D); o: (B, H, Lq, D), all one dtype and device.
 * lse (optional, may be NULL): float32, contiguous (B, H, Lq), on the same device, natural log. */
fw_status fw_attention_forward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                               const fw_tensor *v, fw_tensor *o, float *lse,
                               const fw_attn_params *params);

/* Backward: from q, k, v, the forward's o and lse, and dout = dL/dO, produce dq, dk, dv
 * (same shapes as q, k, v). dk/dv are summed over the query heads of each kv group. */
fw_status fw_attention_backward(fw_context *ctx, const fw_tensor *q, const fw_tensor *k,
                                const fw_tensor *v, const fw_tensor *o, const float *lse,
                                const fw_tensor *dout, fw_tensor *dq, fw_tensor *dk, fw_tensor *dv,
                                const fw_attn_params *params);

/* ---- backends -------------------------------------------------------------------------- */
typedef struct fw_backend_info {
    const char *name;
    const char *description;
    fw_device_kind device;
    int usable;              /* compiled in and its device is present now */
    char why_not[256];       /* when !usable */
} fw_backend_info;

int fw_backend_count(void);
fw_status fw_backend_get_info(int index, fw_backend_info *info);
/* Can backend `name` run this forward problem? FW_OK if so; otherwise FW_ERR_UNSUPPORTED (or the
 * validation status) with the reason written to why (may be NULL). */
fw_status fw_backend_supports(const char *name, const fw_tensor *q, const fw_tensor *k,
                              const fw_tensor *v, const fw_tensor *o, const fw_attn_params *params,
                              char *why, size_t why_len);

/* CPU SIMD level in use: "avx512", "avx2" or "scalar". */
const char *fw_cpu_simd_level(void);
/* Number of CUDA devices visible (0 where there is no driver or no GPU). */
int fw_cuda_device_count(void);

#ifdef __cplusplus
}
#endif
#endif /* FLASHWATT_H */
