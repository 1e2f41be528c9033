/* The backward sections: the gradient grid (every backend with a backward, every way it runs, against
 * cpu-ref's float64 backward), the tensor-core variant sweep, and cpu-ref's own gradients against
 * finite differences of its forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "att.h"

#define U FW_WINDOW_UNLIMITED

typedef struct bwd_shape {
    int64_t B, H, Hkv, Lq, Lk, D;
    int causal;
    int64_t wl, wr;
    int bshd, pad;
} bwd_shape;

/* Run in f32, f16 and bf16 each: the tensor-core and CUDA-core kernels' buckets and tails. */
static const bwd_shape shapes[] = {
    /* B  H Hkv   Lq    Lk    D causal wl  wr bshd pad */
    {1, 2, 2, 113, 203, 40, 0, U, U, 0, 0},
    {1, 2, 2, 113, 203, 64, 1, U, U, 0, 0},
    {2, 8, 2, 128, 217, 128, 1, U, U, 0, 0},   /* GQA 4:1 */
    {1, 2, 2, 1023, 1024, 64, 1, U, U, 0, 0},
    {1, 2, 2, 1023, 1024, 128, 0, U, U, 0, 0},
    {1, 2, 2, 239, 1, 64, 0, U, U, 0, 0},
    {1, 2, 2, 1, 239, 64, 1, U, U, 0, 0},
    {1, 2, 2, 239, 1, 40, 1, U, U, 1, 0},      /* causal Lq > Lk: rows that see no key */
    {2, 4, 1, 200, 300, 64, 1, U, U, 0, 0},    /* MQA */
    {1, 4, 2, 300, 300, 64, 0, 32, 8, 0, 0},   /* sliding window */
    {1, 4, 4, 217, 128, 128, 1, U, U, 1, 8},   /* bshd, padded rows, Lq > Lk causal */
    {1, 2, 2, 128, 113, 40, 0, U, U, 1, 8},    /* bshd padded, D 40 */
    {1, 2, 1, 100, 150, 256, 1, U, U, 0, 0},   /* D 256 bucket */
    {1, 2, 2, 160, 160, 96, 0, U, U, 1, 0},    /* D 96 in the 128 bucket */
    {1, 1, 1, 40, 100, 64, 0, 3, 3, 0, 0},     /* keys nobody sees: zero dk/dv */
    {2, 4, 2, 513, 1000, 80, 1, U, U, 0, 0},   /* D 80 (128 bucket), GQA, causal Lq < Lk */
    {1, 2, 2, 257, 257, 32, 0, 64, 0, 1, 0},   /* left window only, D 32, bshd */
    {1, 2, 2, 64, 640, 8, 0, U, U, 0, 0},      /* D 8 */
    {1, 3, 3, 700, 500, 128, 1, 100, U, 1, 8}, /* causal + left window, Lq > Lk, padded bshd */
    {1, 4, 2, 203, 4100, 128, 1, U, U, 0, 0}, /* Hopper's fused dQ over 33 key blocks (GQA) ... */
    {1, 2, 1, 300, 4097, 56, 0, U, U, 1, 0},  /* ... at D 64's bucket too (128 query rows a step), bshd */
};

/* Shapes with a dtype of their own: GQA/MQA, causal with Lq != Lk both ways, windows, BSHD, D 256. */
static const struct {
    bwd_shape s;
    fw_dtype dt;
} typed[] = {
    {{1, 4, 4, 64, 64, 64, 0, U, U, 0, 0}, FW_F32},    {{2, 8, 1, 65, 129, 40, 1, U, U, 1, 0}, FW_F32},
    {{1, 8, 2, 130, 33, 96, 1, U, U, 0, 0}, FW_F32},   {{1, 2, 2, 1, 77, 128, 0, U, U, 0, 0}, FW_F32},
    {{1, 2, 1, 100, 100, 64, 1, 16, U, 0, 0}, FW_F32}, {{1, 2, 2, 90, 70, 32, 0, 5, 7, 1, 0}, FW_F32},
    {{1, 4, 2, 70, 90, 64, 1, U, U, 0, 0}, FW_F16},    {{1, 4, 2, 90, 70, 64, 0, U, U, 1, 0}, FW_BF16},
    {{1, 2, 2, 33, 45, 256, 0, U, U, 0, 0}, FW_F32},
};

#define CPU_MAX_COST (1 << 23) /* B·H·Lq·Lk·D: the CPU takes the shapes it runs in well under a second */
/* f32 on a CUDA device also in tf32 and 3xtf32 (the tf32 records) */
#define CUDA_F32_PRECISIONS ((1u << FW_PRECISION_EXACT) | (1u << FW_PRECISION_TF32) | (1u << FW_PRECISION_3XTF32))

static att_case make(const bwd_shape *s, fw_dtype dt)
{
    att_case t = att_layout(att_mask(att_make(s->B, s->H, s->Hkv, s->Lq, s->Lk, s->D, dt), s->causal, s->wl, s->wr),
                            s->bshd, s->pad);
    t.precisions = 1u;
    t.threads[0] = 2;
    return t;
}

void att_add_backward_grid(att_plan *p, const att_opts *o)
{
    const int cpu = o->device.kind == FW_DEVICE_CPU;
    if (o->quick) {
        const bwd_shape q1 = {1, 4, 2, 70, 90, 64, 1, U, U, 0, 0}, q2 = {1, 2, 1, 33, 47, 40, 0, 5, 9, 1, 8};
        att_add(p, make(&q1, FW_F16));
        att_add(p, make(&q2, FW_BF16));
        att_case *t = att_add(p, make(&q2, FW_F32));
        if (!cpu) {
            t->config = "bwd-deterministic,bwd-atomic,bwd-materialize";
            t->precisions = CUDA_F32_PRECISIONS;
            const bwd_shape q3 = {1, 4, 2, 70, 90, 128, 1, U, U, 0, 0}; /* the head dim 128 tf32 record */
            t = att_add(p, make(&q3, FW_F32));
            t->config = "bwd-deterministic";
            t->precisions = (1u << FW_PRECISION_TF32) | (1u << FW_PRECISION_3XTF32);
        }
        return;
    }
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) {
        att_case *t = att_add(p, make(&typed[i].s, typed[i].dt));
        if (!cpu && typed[i].dt == FW_F32) t->precisions = CUDA_F32_PRECISIONS;
    }
    const fw_dtype dts[3] = {FW_F32, FW_F16, FW_BF16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const bwd_shape *s = &shapes[i];
        if (cpu && (double)s->B * s->H * s->Lq * s->Lk * s->D > CPU_MAX_COST) continue;
        for (int d = 0; d < 3; d++) {
            att_case *t = att_add(p, make(s, dts[d]));
            if (!cpu && dts[d] == FW_F32) t->precisions = CUDA_F32_PRECISIONS;
        }
    }
}

/* cuda-flash's backward at head dims off the multiples of 8 and between the compiled ones: the tensor-core kernels
 * on the staged problem up to 128 (FW_CUDA_BWD_TC=0, the "cores" way, reads it in place), the CUDA-core kernels in
 * place above; f16 and bf16, causal and not, MHA/GQA/MQA, Lq != Lk both ways, BSHD and padded rows; then odd row
 * strides and 8-byte rows at head dims the tensor cores take (those tensors staged alone). cuda-flash by name, and
 * it must take every case. */
void att_add_backward_headdims(att_plan *p, const att_opts *o)
{
    static const int64_t dims[] = {1, 3, 17, 59, 72, 111, 200, 255};
    static const int64_t lens[][2] = {{113, 203}, {203, 113}, {64, 64}, {1, 77}};
    const int nd = o->quick ? 2 : 8;
    for (int i = 0; i < nd; i++)
        for (int k = 0; k < 4; k++) { /* (dtype, causal) */
            const int64_t D = dims[o->quick ? 3 + 4 * i : i], *l = lens[(k + i) % 4];
            const int g = (k + i) % 3;
            const bwd_shape s = {1 + (k & 1), 4, g == 0 ? 4 : g == 1 ? 2 : 1, l[0], l[1], D, k & 1, U, U, (k + i) & 1,
                                 g == 2 ? 3 : 0};
            att_case *t = att_add(p, make(&s, k < 2 ? FW_F16 : FW_BF16));
            t->backend = "cuda-flash";
            t->flags |= ATT_MUST_SUPPORT;
        }
    static const bwd_shape rows[] = {
        {2, 4, 2, 150, 170, 64, 1, U, U, 0, 3}, /* row stride 67 */
        {1, 4, 4, 130, 90, 128, 0, U, U, 1, 1}, /* BSHD, head stride 129 */
        {1, 4, 1, 96, 200, 40, 1, U, U, 0, 4},  /* 8-byte rows, MQA */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && !(o->quick && i > 0); i++) {
        att_case *t = att_add(p, make(&rows[i], i & 1 ? FW_BF16 : FW_F16));
        t->backend = "cuda-flash";
        t->flags |= ATT_MUST_SUPPORT;
    }
}

/* Every tensor-core backward record of the shape's head dim (kernels.tsv), forced by name as the default of
 * both dQ modes (a fuse record's one), on the 16-bit shapes the tensor cores take; the tf32 records on those shapes
 * in f32, tf32 and 3xtf32, deterministic mode (theirs); the smaller CUDA-core records (those after "cores", for
 * devices with less shared memory) on every shape, f32 and bf16, both modes. */
void att_add_backward_variants(att_plan *p, const att_opts *o)
{
#ifdef FW_HAVE_CUDA
    enum { MAX_ENV = 256 };
    static char env[MAX_ENV][80];
    int nenv = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int tensor_cores = shapes[i].D <= 128 && shapes[i].D % 8 == 0;
        int n = 0;
        const fw_bwd_record *rs = fw_bwd_records_of(fw_bwd_padded_dim(shapes[i].D), &n);
        for (int v = 0; v < n && nenv < MAX_ENV; v++) {
            const int cores = rs[v].kernel == FW_BWD_CORES;
            /* ("cores" itself is the default: every other section runs it) */
            if (cores ? !strcmp(rs[v].name, "cores") : !tensor_cores) continue;
            snprintf(env[nenv], sizeof env[nenv], "FW_CUDA_BWD_CONFIG=%s", rs[v].name);
            if (rs[v].kernel == FW_BWD_TF32) {
                att_case *t = att_add(p, make(&shapes[i], FW_F32));
                t->env = env[nenv++];
                t->config = "bwd-deterministic";
                t->precisions = (1u << FW_PRECISION_TF32) | (1u << FW_PRECISION_3XTF32);
                continue;
            }
            for (int d = 0; d < 2; d++) { /* the CUDA-core records in f32 and bf16, the tensor-core ones f16 and bf16 */
                att_case *t = att_add(p, make(&shapes[i], d ? FW_BF16 : cores ? FW_F32 : FW_F16));
                t->env = env[nenv];
                /* a fuse record has no deterministic mode (the knob names it for the atomic one only) */
                t->config = fw_bwd_fuses_dq(&rs[v]) ? "bwd-atomic" : "bwd-deterministic,bwd-atomic";
                if (o->quick) break;
            }
            nenv++;
        }
    }
#else
    (void)p;
    (void)o;
#endif
}

/* ---- cpu-ref against finite differences ------------------------------------------------------- */
static double loss(fw_run *r, fw_context *ctx, const fw_bwd *g)
{
    if (fw_attention_forward(ctx, &r->q, &r->k, &r->v, &r->o, NULL, &r->c.params) != FW_OK) return NAN;
    double s = 0;
    const fw_case *c = &r->c;
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t i = 0; i < c->seqlen_q; i++)
                for (int64_t d = 0; d < c->head_dim; d++) {
                    const int64_t off = b * r->o.stride[0] + h * r->o.stride[1] + i * r->o.stride[2] + d;
                    s += (double)((const float *)r->host_o)[off] * ((const float *)g->host_dout)[off];
                }
    return s;
}

/* cpu-ref's analytic gradients against central differences of sum(O ∘ dO), f32, tiny shapes:
 * O(eps²) truncation plus f32 rounding / eps stay well under 1e-3. */
void att_finite_differences(const att_opts *o, att_out *out)
{
    static const bwd_shape fd[] = {
        {1, 2, 1, 5, 7, 3, 1, 3, U, 0, 0},
        {2, 2, 2, 4, 4, 2, 0, U, U, 1, 0},
        {1, 4, 2, 6, 3, 4, 1, U, U, 0, 0},
        {1, 1, 1, 3, 8, 5, 0, 2, 1, 0, 0},
    };
    for (size_t ci = 0; ci < sizeof fd / sizeof fd[0]; ci++) {
        att_case t = make(&fd[ci], FW_F32);
        t.c.seed = o->seed + ci;
        char label[256], msg[256];
        fw_case_label(&t.c, label, sizeof label);
        fw_run r;
        fw_bwd g;
        fw_context *ctx = NULL;
        if (fw_run_alloc(&r, &t.c, msg, sizeof msg) != FW_OK) {
            att_report(out, 0, "finite differences [%s]: %s", label, msg);
            continue;
        }
        fw_status st = fw_bwd_alloc(&r, &g, t.c.seed, msg, sizeof msg);
        if (st == FW_OK && fw_context_create(&ctx) != FW_OK) st = FW_ERR_OUT_OF_MEMORY;
        if (st == FW_OK) st = fw_context_set_backend(ctx, "cpu-ref");
        if (st == FW_OK) st = fw_bwd_poison(&r, &g);
        if (st == FW_OK) st = fw_bwd_run(&r, &g, ctx);
        double worst = 0;
        const float eps = 1e-2f;
        float *in[3] = {(float *)r.host_q, (float *)r.host_k, (float *)r.host_v};
        const float *grad[3] = {(const float *)g.host_dq, (const float *)g.host_dk, (const float *)g.host_dv};
        const size_t n[3] = {r.q_elems, r.kv_elems, r.kv_elems};
        for (int a = 0; a < 3 && st == FW_OK; a++) /* on the CPU the tensors are the host images */
            for (size_t i = 0; i < n[a]; i++) {
                const float x = in[a][i];
                in[a][i] = x + eps;
                const double lp = loss(&r, ctx, &g);
                in[a][i] = x - eps;
                const double lm = loss(&r, ctx, &g);
                in[a][i] = x;
                const double err = fabs((lp - lm) / (2 * eps) - grad[a][i]);
                if (!(err <= worst)) worst = err; /* NaN sticks */
            }
        att_report(out, st == FW_OK && worst < 1e-3, "finite differences cpu-ref [%s]: max |fd - grad| %.2e%s%s", label,
                   worst, st == FW_OK ? "" : " ", st == FW_OK ? "" : fw_status_string(st));
        fw_context_destroy(ctx);
        fw_bwd_free(&r, &g);
        fw_run_free(&r);
    }
}
