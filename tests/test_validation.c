/* Every class of bad input returns its documented status (flashwatt.h, src/core/validate.c) with the
 * argument named in fw_context_last_error, never crashes, and never writes anything: after each
 * failing call every buffer of the call (inputs, poisoned output and LSE, gradients) is compared
 * byte for byte with its snapshot from before the call. Each fixture is first run once with valid
 * arguments (a positive control), so a rejection is the check's doing, not a broken fixture. */
#include <stdint.h>
#include "fw_check.h"
#include "fw_harness.h"

static fw_context *ctx;
static const fw_device CPU = {FW_DEVICE_CPU, 0};

/* ---- fixture: one call's buffers, snapshots of all of them --------------------------------- */
enum { BQ, BK, BV, BO, BLSE, BDO, BDQ, BDK, BDV, NBUF };
static const char *buf_name[NBUF] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};

typedef struct fixture {
    int64_t B, H, Hkv, Lq, Lk, D;
    fw_dtype dt;
    void *buf[NBUF];
    size_t bytes[NBUF];
    unsigned char *snap[NBUF];
    fw_tensor q, k, v, o, dout, dq, dk, dv;
    float *lse;
    fw_attn_params params;
} fixture;

static uint64_t seed = 12345;
static uint32_t rnd32(void)
{
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}

static void fill_inputs(void *p, fw_dtype dt, size_t bytes)
{
    /* values in [-1, 1), stored in the dtype */
    if (dt == FW_F32) {
        float *f = (float *)p;
        for (size_t i = 0; i < bytes / 4; i++) f[i] = (float)((int32_t)rnd32() >> 8) * 0x1p-23f;
    } else {
        uint16_t *h = (uint16_t *)p;
        /* f16: 0x3bff = 0.9995; bf16: 0x3f7f = 0.996; random mantissas below 1, random sign */
        for (size_t i = 0; i < bytes / 2; i++) {
            const uint32_t r = rnd32();
            h[i] = (uint16_t)(dt == FW_F16 ? ((r & 0x8000u) | (r % 0x3bffu)) : ((r & 0x8000u) | (r % 0x3f7fu)));
        }
    }
}

static int fixture_init(fixture *f, int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, fw_dtype dt)
{
    memset(f, 0, sizeof *f);
    f->B = B; f->H = H; f->Hkv = Hkv; f->Lq = Lq; f->Lk = Lk; f->D = D; f->dt = dt;
    const size_t es = dt == FW_F32 ? 4 : 2;
    const size_t qb = (size_t)(B * H * Lq * D) * es, kb = (size_t)(B * Hkv * Lk * D) * es;
    /* q is twice its size so that a partially overlapping o can point into its second half */
    const size_t sizes[NBUF] = {2 * qb, kb, kb, qb, (size_t)(B * H * Lq) * 4, qb, qb, kb, kb};
    for (int i = 0; i < NBUF; i++) {
        f->bytes[i] = sizes[i];
        f->buf[i] = malloc(sizes[i]);
        f->snap[i] = (unsigned char *)malloc(sizes[i]);
        if (!f->buf[i] || !f->snap[i]) return 0;
        if (i == BO || i == BLSE || i == BDQ || i == BDK || i == BDV) memset(f->buf[i], 0xff, sizes[i]); /* NaN poison */
        else fill_inputs(f->buf[i], i == BLSE ? FW_F32 : dt, sizes[i]);
    }
    f->q = fw_tensor_bhsd(f->buf[BQ], dt, CPU, B, H, Lq, D);
    f->k = fw_tensor_bhsd(f->buf[BK], dt, CPU, B, Hkv, Lk, D);
    f->v = fw_tensor_bhsd(f->buf[BV], dt, CPU, B, Hkv, Lk, D);
    f->o = fw_tensor_bhsd(f->buf[BO], dt, CPU, B, H, Lq, D);
    f->dout = fw_tensor_bhsd(f->buf[BDO], dt, CPU, B, H, Lq, D);
    f->dq = fw_tensor_bhsd(f->buf[BDQ], dt, CPU, B, H, Lq, D);
    f->dk = fw_tensor_bhsd(f->buf[BDK], dt, CPU, B, Hkv, Lk, D);
    f->dv = fw_tensor_bhsd(f->buf[BDV], dt, CPU, B, Hkv, Lk, D);
    f->lse = (float *)f->buf[BLSE];
    f->params = fw_attn_params_default();
    return 1;
}

static void fixture_snapshot(fixture *f)
{
    for (int i = 0; i < NBUF; i++) memcpy(f->snap[i], f->buf[i], f->bytes[i]);
}

/* Names of the buffers that changed since the snapshot ("" if none). */
static const char *fixture_changed(const fixture *f)
{
    static char out[128];
    out[0] = 0;
    for (int i = 0; i < NBUF; i++)
        if (memcmp(f->snap[i], f->buf[i], f->bytes[i]) != 0) {
            strncat(out, " ", sizeof out - strlen(out) - 1);
            strncat(out, buf_name[i], sizeof out - strlen(out) - 1);
        }
    return out;
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < NBUF; i++) { free(f->buf[i]); free(f->snap[i]); }
    memset(f, 0, sizeof *f);
}

/* The positive control: the fixture's valid call succeeds and writes o and lse. Restores the poison. */
static int fixture_control(fixture *f, const char *what)
{
    fw_context_set_backend(ctx, "cpu-ref");
    fixture_snapshot(f);
    fw_status st = fw_attention_forward(ctx, &f->q, &f->k, &f->v, &f->o, f->lse, &f->params);
    const int wrote_o = memcmp(f->snap[BO], f->buf[BO], f->bytes[BO]) != 0;
    const int wrote_lse = memcmp(f->snap[BLSE], f->buf[BLSE], f->bytes[BLSE]) != 0;
    const int ok = st == FW_OK && wrote_o && wrote_lse && fw_context_last_error(ctx)[0] == 0;
    fwt_case(ok, "control %s: valid call -> %s, output written %d, lse written %d, last_error '%s'", what,
             fw_status_string(st), wrote_o, wrote_lse, fw_context_last_error(ctx));
    memset(f->buf[BO], 0xff, f->bytes[BO]);
    memset(f->buf[BLSE], 0xff, f->bytes[BLSE]);
    return ok;
}

/* Checks one failed call: status, message holding each of need[] (NULL-terminated), no buffer
 * written. */
static void expect(const char *what, const fixture *f, fw_status got, fw_status want, const char *msg,
                   const char *const *need)
{
    const char *changed = fixture_changed(f);
    int msg_ok = 1;
    char missing[128] = "";
    for (int i = 0; need && need[i]; i++)
        if (!fwt_contains(msg, need[i])) {
            msg_ok = 0;
            snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " '%s'", need[i]);
        }
    fwt_case(got == want && msg_ok && !changed[0],
             "%s: status '%s' (want '%s'); message '%s'%s%s; written:%s", what, fw_status_string(got),
             fw_status_string(want), msg ? msg : "(null)", msg_ok ? "" : " lacks", missing,
             changed[0] ? changed : " nothing");
}

#define NEED(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A forward with the fixture's tensors replaced by the given descriptors. */
static void fwd(const char *what, fixture *f, const fw_tensor *q, const fw_tensor *k, const fw_tensor *v,
                fw_tensor *o, float *lse, const fw_attn_params *p, fw_status want, const char *const *need)
{
    fixture_snapshot(f);
    fw_status st = fw_attention_forward(ctx, q, k, v, o, lse, p);
    expect(what, f, st, want, fw_context_last_error(ctx), need);
}

/* Shorthand: copy the fixture's descriptors into locals q k v o, mutate, call. */
#define FWD(what, want, need, mutate)                                                              \
    do {                                                                                           \
        fw_tensor q = f.q, k = f.k, v = f.v, o = f.o;                                              \
        float *lse = f.lse;                                                                        \
        fw_attn_params p = f.params;                                                               \
        mutate;                                                                                    \
        fwd(what, &f, &q, &k, &v, &o, lse, &p, want, need);                                        \
        (void)q; (void)k; (void)v; (void)o; (void)lse; (void)p;                                    \
    } while (0)

static void test_forward_f32(void)
{
    fixture f;
    if (!fixture_init(&f, 2, 4, 2, 16, 24, 32, FW_F32)) { fwt_case(0, "fixture alloc"); return; }
    fixture_control(&f, "B2 H4/2 Lq16 Lk24 D32 f32");
    fw_context_set_backend(ctx, "auto");

    /* null pointers */
    fixture_snapshot(&f);
    {
        fw_status st = fw_attention_forward(NULL, &f.q, &f.k, &f.v, &f.o, f.lse, &f.params);
        expect("ctx NULL", &f, st, FW_ERR_NULL_ARGUMENT, "", NULL);
    }
    fwd("q NULL", &f, NULL, &f.k, &f.v, &f.o, f.lse, &f.params, FW_ERR_NULL_ARGUMENT, NEED("q is NULL"));
    fwd("k NULL", &f, &f.q, NULL, &f.v, &f.o, f.lse, &f.params, FW_ERR_NULL_ARGUMENT, NEED("k is NULL"));
    fwd("v NULL", &f, &f.q, &f.k, NULL, &f.o, f.lse, &f.params, FW_ERR_NULL_ARGUMENT, NEED("v is NULL"));
    fwd("o NULL", &f, &f.q, &f.k, &f.v, NULL, f.lse, &f.params, FW_ERR_NULL_ARGUMENT, NEED("o is NULL"));
    FWD("q.data NULL", FW_ERR_NULL_ARGUMENT, NEED("q.data"), q.data = NULL);
    FWD("k.data NULL", FW_ERR_NULL_ARGUMENT, NEED("k.data"), k.data = NULL);
    FWD("v.data NULL", FW_ERR_NULL_ARGUMENT, NEED("v.data"), v.data = NULL);
    FWD("o.data NULL", FW_ERR_NULL_ARGUMENT, NEED("o.data"), o.data = NULL);

    /* zero and negative sizes, in every tensor and dimension */
    const char *dims[4] = {"batch", "heads", "seq", "head_dim"};
    for (int d = 0; d < 4; d++) {
        char what[64], field[32];
        snprintf(what, sizeof what, "q.size[%d] = 0", d);
        snprintf(field, sizeof field, "q.size[%d]", d);
        FWD(what, FW_ERR_INVALID_SHAPE, NEED(field, dims[d]), q.size[d] = 0);
        snprintf(what, sizeof what, "k.size[%d] = -3", d);
        snprintf(field, sizeof field, "k.size[%d]", d);
        FWD(what, FW_ERR_INVALID_SHAPE, NEED(field, "-3"), k.size[d] = -3);
        snprintf(what, sizeof what, "v.size[%d] = 0", d);
        snprintf(field, sizeof field, "v.size[%d]", d);
        FWD(what, FW_ERR_INVALID_SHAPE, NEED(field), v.size[d] = 0);
        snprintf(what, sizeof what, "o.size[%d] = -1", d);
        snprintf(field, sizeof field, "o.size[%d]", d);
        FWD(what, FW_ERR_INVALID_SHAPE, NEED(field), o.size[d] = -1);
    }
    /* sizes that disagree */
    FWD("k batch differs", FW_ERR_INVALID_SHAPE, NEED("batch"), k.size[0] = 1);
    FWD("k head_dim differs", FW_ERR_INVALID_SHAPE, NEED("k head_dim", "16"), k.size[3] = 16);
    FWD("v head_dim differs", FW_ERR_INVALID_SHAPE, NEED("v head_dim", "16"), v.size[3] = 16);
    FWD("v seq differs from k", FW_ERR_INVALID_SHAPE, NEED("v", "seq"), v.size[2] = 20);
    FWD("v heads differ from k", FW_ERR_INVALID_SHAPE, NEED("v", "heads"), v.size[1] = 1);
    FWD("o seq differs from q", FW_ERR_INVALID_SHAPE, NEED("o.size[2]"), o.size[2] = 8);
    FWD("o heads differ from q", FW_ERR_INVALID_SHAPE, NEED("o.size[1]"), o.size[1] = 2);

    /* devices and dtypes */
    FWD("k on cuda:0", FW_ERR_DEVICE_MISMATCH, NEED("k", "cuda:0", "cpu"), k.device.kind = FW_DEVICE_CUDA);
    FWD("v on cuda:1", FW_ERR_DEVICE_MISMATCH, NEED("v", "cuda:1", "cpu"), v.device.kind = FW_DEVICE_CUDA; v.device.index = 1);
    FWD("o on cuda:0", FW_ERR_DEVICE_MISMATCH, NEED("o", "cuda:0"), o.device.kind = FW_DEVICE_CUDA);
    FWD("q on cuda:0, rest on cpu", FW_ERR_DEVICE_MISMATCH, NEED("cuda:0", "cpu"), q.device.kind = FW_DEVICE_CUDA);
    FWD("device kind 7", FW_ERR_INVALID_VALUE, NEED("k.device"), k.device.kind = (fw_device_kind)7);
    FWD("device index -1", FW_ERR_INVALID_VALUE, NEED("q.device.index"), q.device.index = -1);
    FWD("k f16 with q f32", FW_ERR_DTYPE_MISMATCH, NEED("k", "f16", "f32"), k.dtype = FW_F16);
    FWD("o bf16 with q f32", FW_ERR_DTYPE_MISMATCH, NEED("o", "bf16", "f32"), o.dtype = FW_BF16);
    FWD("v dtype 9", FW_ERR_INVALID_VALUE, NEED("v.dtype"), v.dtype = (fw_dtype)9);

    /* outputs overlapping inputs */
    FWD("o == q", FW_ERR_OVERLAP, NEED("o", "q"), o.data = q.data);
    FWD("o == k", FW_ERR_OVERLAP, NEED("o", "k"), o.data = k.data);
    FWD("o starts in the last row of v", FW_ERR_OVERLAP, NEED("output o overlaps"),
        o.data = (char *)v.data + f.bytes[BV] - 64);
    FWD("o overlaps q partly", FW_ERR_OVERLAP, NEED("o", "q"), o.data = (char *)f.buf[BQ] + f.bytes[BQ] / 4);
    FWD("o overlaps q by one element", FW_ERR_OVERLAP, NEED("o", "q"),
        o.data = (char *)f.buf[BQ] + f.bytes[BQ] / 2 - 4);
    FWD("lse == o", FW_ERR_OVERLAP, NEED("lse", "o"), lse = (float *)o.data);
    FWD("lse inside o", FW_ERR_OVERLAP, NEED("lse", "o"), lse = (float *)o.data + 100);
    FWD("lse overlaps q", FW_ERR_OVERLAP, NEED("lse", "q"), lse = (float *)q.data + 1);
    FWD("lse overlaps k", FW_ERR_OVERLAP, NEED("lse", "k"), lse = (float *)k.data);

    /* parameters */
    FWD("window_left -2", FW_ERR_INVALID_VALUE, NEED("window_left", "-2"), p.window_left = -2);
    FWD("window_right -2", FW_ERR_INVALID_VALUE, NEED("window_right", "-2"), p.window_right = -2);
    FWD("window_left -100 with causal", FW_ERR_INVALID_VALUE, NEED("window_left"), p.window_left = -100; p.causal = 1);
    FWD("causal 2", FW_ERR_INVALID_VALUE, NEED("causal"), p.causal = 2);
    FWD("causal -1", FW_ERR_INVALID_VALUE, NEED("causal"), p.causal = -1);
    FWD("scale NaN", FW_ERR_INVALID_VALUE, NEED("scale"), p.scale = NAN);
    FWD("scale +inf", FW_ERR_INVALID_VALUE, NEED("scale"), p.scale = INFINITY);
    FWD("scale -inf", FW_ERR_INVALID_VALUE, NEED("scale"), p.scale = -INFINITY);

    /* strides */
    FWD("q negative seq stride", FW_ERR_INVALID_STRIDE, NEED("q.stride[2]"), q.stride[2] = -32);
    FWD("k negative batch stride", FW_ERR_INVALID_STRIDE, NEED("k.stride[0]"), k.stride[0] = -1);
    FWD("o negative head stride", FW_ERR_INVALID_STRIDE, NEED("o.stride[1]"), o.stride[1] = -512);
    FWD("q head_dim stride 2", FW_ERR_INVALID_STRIDE, NEED("q.stride[3]", "head_dim"), q.stride[3] = 2);
    FWD("v head_dim stride 0", FW_ERR_INVALID_STRIDE, NEED("v.stride[3]", "head_dim"), v.stride[3] = 0);
    FWD("o head_dim stride 32", FW_ERR_INVALID_STRIDE, NEED("o.stride[3]"), o.stride[3] = 32);
    FWD("o seq stride 0 (rows alias)", FW_ERR_INVALID_STRIDE, NEED("o.stride[2]"), o.stride[2] = 0);
    FWD("o seq stride 31 < D (rows overlap)", FW_ERR_INVALID_STRIDE, NEED("o.stride[2]", "overlap"), o.stride[2] = 31);
    FWD("o head stride 0", FW_ERR_INVALID_STRIDE, NEED("o.stride[1]"), o.stride[1] = 0);
    FWD("o head stride one row short", FW_ERR_INVALID_STRIDE, NEED("o.stride[1]"), o.stride[1] = 15 * 32);
    FWD("o batch stride = head stride", FW_ERR_INVALID_STRIDE, NEED("o.stride"), o.stride[0] = o.stride[1]);
    FWD("o heads interleaved into rows", FW_ERR_INVALID_STRIDE, NEED("o.stride"), o.stride[1] = 16);

    /* strides so large that the tensor's extent overflows 64 bits: rejected, without signed overflow */
    FWD("q batch and head strides 2^62", FW_ERR_INVALID_STRIDE, NEED("q.stride"),
        q.stride[0] = (int64_t)1 << 62; q.stride[1] = (int64_t)1 << 62);
    FWD("k seq stride 2^61 (extent > 2^63 bytes)", FW_ERR_INVALID_STRIDE, NEED("k.stride[2]"), k.stride[2] = (int64_t)1 << 61);
    FWD("o batch stride INT64_MAX", FW_ERR_INVALID_STRIDE, NEED("o.stride[0]"), o.stride[0] = INT64_MAX);
    FWD("v seq size 2^31 - 1 with huge strides", FW_ERR_INVALID_STRIDE, NEED("v.stride"),
        v.size[2] = ((int64_t)1 << 31) - 1; v.stride[2] = (int64_t)1 << 40; v.stride[1] = (int64_t)1 << 60);
    FWD("o all sizes 2^31 - 1", FW_ERR_INVALID_STRIDE, NEED("o.stride"),
        o.size[0] = o.size[1] = o.size[2] = ((int64_t)1 << 31) - 1; o.size[3] = 32;
        o.stride[2] = 32; o.stride[1] = (int64_t)32 << 31; o.stride[0] = (int64_t)1 << 62);

    /* backends */
    {
        fixture_snapshot(&f);
        fw_status st = fw_context_set_backend(ctx, "cpu-bogus");
        expect("unknown backend 'cpu-bogus'", &f, st, FW_ERR_NO_BACKEND, fw_context_last_error(ctx),
               NEED("cpu-bogus", "cpu-ref"));
        /* the context keeps its previous backend ("auto") and still works */
        st = fw_attention_forward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.params);
        fwt_case(st == FW_OK, "context still usable after an unknown backend name: %s (%s)", fw_status_string(st),
                 fw_context_last_backend(ctx));
        memset(f.buf[BO], 0xff, f.bytes[BO]);
        memset(f.buf[BLSE], 0xff, f.bytes[BLSE]);
        fixture_snapshot(&f);
        st = fw_context_set_backend(ctx, NULL);
        expect("backend NULL", &f, st, FW_ERR_NULL_ARGUMENT, fw_context_last_error(ctx), NEED("backend"));
        char why[512] = "";
        st = fw_backend_supports("cpu-bogus", &f.q, &f.k, &f.v, &f.o, &f.params, why, sizeof why);
        expect("fw_backend_supports unknown name", &f, st, FW_ERR_NO_BACKEND, why, NEED("cpu-bogus"));
        st = fw_backend_supports(NULL, &f.q, &f.k, &f.v, &f.o, &f.params, why, sizeof why);
        expect("fw_backend_supports NULL name", &f, st, FW_ERR_NULL_ARGUMENT, why, NEED("name"));
        fw_tensor bad = f.k;
        bad.stride[3] = 3;
        st = fw_backend_supports("cpu-ref", &f.q, &bad, &f.v, &f.o, &f.params, why, sizeof why);
        expect("fw_backend_supports bad stride", &f, st, FW_ERR_INVALID_STRIDE, why, NEED("k.stride[3]"));
        st = fw_backend_supports("cpu-ref", &f.q, &f.k, &f.v, &f.o, &f.params, NULL, 0);
        fwt_case(st == FW_OK, "fw_backend_supports valid, why NULL: %s", fw_status_string(st));
    }
    /* every CUDA backend named while the tensors are on the cpu: an error, not a crash */
    for (int i = 0; i < fw_backend_count(); i++) {
        fw_backend_info info;
        if (fw_backend_get_info(i, &info) != FW_OK || info.device != FW_DEVICE_CUDA) continue;
        char what[96];
        fixture_snapshot(&f);
        fw_status st = fw_context_set_backend(ctx, info.name);
        snprintf(what, sizeof what, "set_backend(%s)", info.name);
        fwt_case(st == FW_OK, "%s: %s (compiled in, may be named)", what, fw_status_string(st));
        st = fw_attention_forward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.params);
        snprintf(what, sizeof what, "%s with cpu tensors", info.name);
        expect(what, &f, st, FW_ERR_UNSUPPORTED, fw_context_last_error(ctx), NEED(info.name, "cpu"));
        char why[512] = "";
        st = fw_backend_supports(info.name, &f.q, &f.k, &f.v, &f.o, &f.params, why, sizeof why);
        snprintf(what, sizeof what, "fw_backend_supports(%s) with cpu tensors", info.name);
        expect(what, &f, st, FW_ERR_UNSUPPORTED, why, NEED(info.name, "cpu"));
    }
    {   /* the CUDA backend names are an error in any build: NO_BACKEND here, UNSUPPORTED above */
        const char *names[] = {"cuda-flash", "cuda-naive", "cuda-tiled", "cuda-flash-f32"};
        for (int i = 0; i < 4; i++) {
            char what[96];
            fixture_snapshot(&f);
            fw_status st = fw_context_set_backend(ctx, names[i]);
            if (st == FW_OK) st = fw_attention_forward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.params);
            snprintf(what, sizeof what, "'%s' with cpu tensors (%s build)", names[i],
#ifdef FW_HAVE_CUDA
                     "CUDA"
#else
                     "no-CUDA"
#endif
            );
            expect(what, &f, st,
#ifdef FW_HAVE_CUDA
                   FW_ERR_UNSUPPORTED,
#else
                   FW_ERR_NO_BACKEND,
#endif
                   fw_context_last_error(ctx), NEED(names[i]));
        }
    }
    if (fw_cuda_device_count() == 0) {
        /* descriptors that claim cuda:0 (host pointers) where no GPU is: auto finds no backend */
        fw_context_set_backend(ctx, "auto");
        FWD("all tensors on cuda:0, no GPU, auto", FW_ERR_NO_BACKEND, NEED("no backend"),
            q.device.kind = k.device.kind = v.device.kind = o.device.kind = FW_DEVICE_CUDA);
    } else {
        fwt_skip("all tensors on cuda:0 with host pointers: a GPU is present");
    }
    fw_context_set_backend(ctx, "auto");

    /* params NULL means the defaults */
    {
        fw_status st = fw_attention_forward(ctx, &f.q, &f.k, &f.v, &f.o, NULL, NULL);
        fwt_case(st == FW_OK, "params NULL and lse NULL are allowed: %s %s", fw_status_string(st), fw_context_last_error(ctx));
        memset(f.buf[BO], 0xff, f.bytes[BO]);
    }

    /* backward: lse NULL, and gradients overlapping inputs */
    {
        fixture_snapshot(&f);
        fw_status st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, NULL, &f.dout, &f.dq, &f.dk, &f.dv, &f.params);
        expect("backward lse NULL", &f, st, FW_ERR_NULL_ARGUMENT, fw_context_last_error(ctx), NEED("lse"));
        st = fw_attention_backward(NULL, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &f.dq, &f.dk, &f.dv, &f.params);
        expect("backward ctx NULL", &f, st, FW_ERR_NULL_ARGUMENT, "", NULL);
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, NULL, &f.dq, &f.dk, &f.dv, &f.params);
        expect("backward dout NULL", &f, st, FW_ERR_NULL_ARGUMENT, fw_context_last_error(ctx), NEED("dout"));
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &f.dq, NULL, &f.dv, &f.params);
        expect("backward dk NULL", &f, st, FW_ERR_NULL_ARGUMENT, fw_context_last_error(ctx), NEED("dk"));
        fw_tensor dq = f.dq;
        dq.data = f.q.data;
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &dq, &f.dk, &f.dv, &f.params);
        expect("backward dq == q", &f, st, FW_ERR_OVERLAP, fw_context_last_error(ctx), NEED("dq", "q"));
        fw_tensor dv = f.dv;
        dv.data = f.dk.data;
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &f.dq, &f.dk, &dv, &f.params);
        expect("backward dv == dk", &f, st, FW_ERR_OVERLAP, fw_context_last_error(ctx), NEED("dk", "dv"));
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, (const float *)f.dq.data, &f.dout, &f.dq, &f.dk, &f.dv, &f.params);
        expect("backward lse overlaps dq", &f, st, FW_ERR_OVERLAP, fw_context_last_error(ctx), NEED("dq", "lse"));
        fw_tensor dk = f.dk;
        dk.size[2] = 5;
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &f.dq, &dk, &f.dv, &f.params);
        expect("backward dk seq differs", &f, st, FW_ERR_INVALID_SHAPE, fw_context_last_error(ctx), NEED("dk.size[2]"));
        fw_tensor d2 = f.dout;
        d2.dtype = FW_F16;
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &d2, &f.dq, &f.dk, &f.dv, &f.params);
        expect("backward dout f16", &f, st, FW_ERR_DTYPE_MISMATCH, fw_context_last_error(ctx), NEED("dout"));
        dq = f.dq;
        dq.stride[2] = 0;
        st = fw_attention_backward(ctx, &f.q, &f.k, &f.v, &f.o, f.lse, &f.dout, &dq, &f.dk, &f.dv, &f.params);
        expect("backward dq seq stride 0", &f, st, FW_ERR_INVALID_STRIDE, fw_context_last_error(ctx), NEED("dq.stride[2]"));
    }

    /* context setters */
    {
        fixture_snapshot(&f);
        fw_status st = fw_context_set_threads(ctx, -1);
        expect("threads -1", &f, st, FW_ERR_INVALID_VALUE, fw_context_last_error(ctx), NEED("threads", "-1"));
        st = fw_context_set_precision(ctx, (fw_precision)9);
        expect("precision 9", &f, st, FW_ERR_INVALID_VALUE, fw_context_last_error(ctx), NEED("precision", "9"));
        st = fw_context_set_policy(ctx, NULL);
        expect("policy NULL", &f, st, FW_ERR_NULL_ARGUMENT, fw_context_last_error(ctx), NEED("policy"));
        fw_policy pol = fw_policy_default();
        pol.objective = FW_OBJECTIVE_POWER_CAP;
        st = fw_context_set_policy(ctx, &pol);
        expect("power-cap objective without a cap", &f, st, FW_ERR_INVALID_VALUE, fw_context_last_error(ctx),
               NEED("power_cap_w"));
        pol = fw_policy_default();
        pol.error_budget = -1;
        st = fw_context_set_policy(ctx, &pol);
        expect("negative error budget", &f, st, FW_ERR_INVALID_VALUE, fw_context_last_error(ctx), NEED("error_budget"));
        pol = fw_policy_default();
        pol.objective = (fw_objective)5;
        st = fw_context_set_policy(ctx, &pol);
        expect("objective 5", &f, st, FW_ERR_INVALID_VALUE, fw_context_last_error(ctx), NEED("objective"));
        st = fw_context_set_threads(NULL, 1);
        expect("set_threads ctx NULL", &f, st, FW_ERR_NULL_ARGUMENT, "", NULL);
        st = fw_context_create(NULL);
        expect("fw_context_create(NULL)", &f, st, FW_ERR_NULL_ARGUMENT, "", NULL);
        fw_context_destroy(NULL); /* a no-op, like free(NULL) */
    }
    fixture_free(&f);
}

static void test_head_dim_limit(void)
{
    fixture f;
    if (!fixture_init(&f, 1, 2, 1, 4, 5, 320, FW_F32)) { fwt_case(0, "fixture alloc"); return; }
    FWD("head_dim 320", FW_ERR_INVALID_SHAPE, NEED("320", "256", "head_dim"), (void)0);
    char why[512] = "";
    fixture_snapshot(&f);
    fw_status st = fw_backend_supports("cpu-ref", &f.q, &f.k, &f.v, &f.o, &f.params, why, sizeof why);
    expect("fw_backend_supports head_dim 320", &f, st, FW_ERR_INVALID_SHAPE, why, NEED("320", "256"));
    fixture_free(&f);
    if (!fixture_init(&f, 1, 2, 1, 4, 5, 257, FW_F16)) { fwt_case(0, "fixture alloc"); return; }
    FWD("head_dim 257 f16", FW_ERR_INVALID_SHAPE, NEED("257", "256"), (void)0);
    fixture_free(&f);
    if (!fixture_init(&f, 1, 2, 1, 4, 5, 256, FW_F16)) { fwt_case(0, "fixture alloc"); return; }
    fixture_control(&f, "head_dim 256 f16 (the limit itself)");
    fixture_free(&f);
}

static void test_heads_not_divisible(void)
{
    fixture f;
    if (!fixture_init(&f, 1, 3, 2, 8, 8, 16, FW_F32)) { fwt_case(0, "fixture alloc"); return; }
    FWD("H 3 not divisible by H_kv 2", FW_ERR_INVALID_SHAPE, NEED("heads", "3", "2", "divisible"), (void)0);
    fixture_free(&f);
    if (!fixture_init(&f, 1, 4, 8, 8, 8, 16, FW_F32)) { fwt_case(0, "fixture alloc"); return; }
    FWD("H 4 with H_kv 8", FW_ERR_INVALID_SHAPE, NEED("heads", "4", "8"), (void)0);
    fixture_free(&f);
}

static void test_reduced_precision_f16(void)
{
    const fw_dtype dts[2] = {FW_F16, FW_BF16};
    const fw_precision precs[3] = {FW_PRECISION_TF32, FW_PRECISION_3XTF32, FW_PRECISION_BF16};
    for (int t = 0; t < 2; t++) {
        fixture f;
        if (!fixture_init(&f, 1, 2, 2, 8, 8, 16, dts[t])) { fwt_case(0, "fixture alloc"); return; }
        fixture_control(&f, fw_dtype_name(dts[t]));
        fw_context_set_backend(ctx, "auto");
        for (int i = 0; i < 3; i++) {
            char what[80];
            snprintf(what, sizeof what, "precision %d with %s inputs", (int)precs[i], fw_dtype_name(dts[t]));
            if (fw_context_set_precision(ctx, precs[i]) != FW_OK) {
                fwt_case(0, "%s: set_precision failed: %s", what, fw_context_last_error(ctx));
                continue;
            }
            FWD(what, FW_ERR_INVALID_VALUE, NEED("precision", "f32"), (void)0);
        }
        fw_context_set_precision(ctx, FW_PRECISION_EXACT);
        fixture_free(&f);
    }
}

static void test_dtype_mismatch_f16(void)
{
    fixture f;
    if (!fixture_init(&f, 1, 2, 2, 8, 8, 16, FW_F16)) { fwt_case(0, "fixture alloc"); return; }
    FWD("q bf16 with k f16", FW_ERR_DTYPE_MISMATCH, NEED("bf16", "f16"), q.dtype = FW_BF16);
    FWD("v f32 with q f16", FW_ERR_DTYPE_MISMATCH, NEED("v", "f32", "f16"), v.dtype = FW_F32);
    fixture_free(&f);
}

int main(void)
{
    const double t0 = fw_now_seconds();
    if (fw_context_create(&ctx) != FW_OK) {
        fwt_case(0, "fw_context_create");
        return fwt_finish("test_validation", fw_now_seconds() - t0);
    }
    test_forward_f32();
    test_head_dim_limit();
    test_heads_not_divisible();
    test_reduced_precision_f16();
    test_dtype_mismatch_f16();
    fw_context_destroy(ctx);
    return fwt_finish("test_validation", fw_now_seconds() - t0);
}
