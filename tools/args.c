/* Flag parsing for check and bench: `--flag value` or `--flag=value`, comma lists of values. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "args.h"
#include "sched/tuning_table.h"

typedef enum kind {
    K_ILIST,    /* comma list of integers >= min (k suffix = x1024) */
    K_DTYPE,    /* comma list of f32/f16/bf16 */
    K_CAUSAL,   /* optional comma list of 0/1; bare flag = 1 */
    K_LAYOUT,   /* comma list of bhsd/bshd */
    K_WINDOW,   /* L,R with -1 = unlimited */
    K_BACKENDS, /* comma list of backend names */
    K_DEVICE,
    K_SEED,
    K_INT,      /* one integer >= min */
    K_DOUBLE,   /* one number >= min */
    K_STR,
    K_FLAG,
    K_LENS      /* comma list of per-sequence lengths >= 0 (one ragged batch) */
} kind;

typedef struct opt {
    const char *name;
    kind k;
    int bench_only;
    int64_t min;
    size_t off; /* offset of the field in fw_cli */
} opt;

#define OFF(f) offsetof(fw_cli, f)

static const opt opts[] = {
    {"batch", K_ILIST, 0, 1, OFF(batch)},
    {"heads", K_ILIST, 0, 1, OFF(heads)},
    {"kv-heads", K_ILIST, 0, 1, OFF(kv_heads)},
    {"seqlen", K_ILIST, 0, 1, OFF(seqlen)},
    {"seqlen-k", K_ILIST, 0, 1, OFF(seqlen_k)},
    {"head-dim", K_ILIST, 0, 1, OFF(head_dim)},
    {"threads", K_ILIST, 0, 0, OFF(threads)},
    {"dtype", K_DTYPE, 0, 0, OFF(dtype)},
    {"causal", K_CAUSAL, 0, 0, OFF(causal)},
    {"layout", K_LAYOUT, 0, 0, OFF(layout)},
    {"window", K_WINDOW, 0, 0, 0},
    {"backend", K_BACKENDS, 0, 0, OFF(backends)},
    {"device", K_DEVICE, 0, 0, 0},
    {"seed", K_SEED, 0, 0, 0},
    {"lse", K_FLAG, 0, 0, OFF(lse)},
    {"backward", K_FLAG, 0, 0, OFF(backward)},
    {"seqlens-q", K_LENS, 0, 0, OFF(seqlens_q)},
    {"seqlens-k", K_LENS, 0, 0, OFF(seqlens_k)},
    {"kv-cache", K_STR, 0, 0, OFF(kv_cache)},
    {"page-size", K_INT, 0, 1, OFF(page_size)},
    {"append", K_FLAG, 0, 0, OFF(append)},
    {"warmup", K_INT, 1, 0, OFF(warmup)},
    {"reps", K_INT, 1, 1, OFF(reps)},
    {"max-ref-s", K_DOUBLE, 1, 0, OFF(max_ref_s)},
    {"max-call-s", K_DOUBLE, 1, 0, OFF(max_call_s)},
    {"suite", K_STR, 1, 0, OFF(suite)},
    {"csv", K_STR, 1, 0, OFF(csv)},
    {"json", K_STR, 1, 0, OFF(json)},
    {"list-suites", K_FLAG, 1, 0, OFF(list_suites)},
    {"energy", K_CAUSAL, 1, 0, OFF(energy)},
    {"cooldown", K_DOUBLE, 1, 0, OFF(cooldown_s)},
    {"window-s", K_DOUBLE, 1, 1, OFF(window_s)}, /* the power reading refreshes every ~0.1 s: windows >= 1 s */
    {"plot", K_STR, 1, 0, OFF(plot)},
    {"policy", K_STR, 1, 0, OFF(policy)},
    {"budget-s", K_DOUBLE, 1, 0, OFF(budget_s)},
    {"out", K_STR, 1, 0, OFF(out)},
    {"precision", K_STR, 0, 0, OFF(precisions)},
};

int fw_args_precision(const fw_cli *cli, const char *cmd, fw_precision *out, char *err, size_t err_len)
{
    *out = FW_PRECISION_EXACT;
    if (!cli->precisions) return 0;
    if (fw_precision_parse(cli->precisions, out) != 0 || *out == FW_PRECISION_BF16) {
        snprintf(err, err_len, "--precision: '%s' is not one of exact, tf32, 3xtf32 (%s runs one mode)", cli->precisions,
                 cmd);
        return 2;
    }
    for (int i = 0; i < cli->dtype.n && *out != FW_PRECISION_EXACT; i++)
        if (cli->dtype.v[i] != FW_F32) {
            snprintf(err, err_len, "--precision %s applies to f32 inputs; --dtype is %s", cli->precisions,
                     fw_dtype_name(cli->dtype.v[i]));
            return 2;
        }
    return 0;
}

int fw_args_dtype(const char *s, fw_dtype *out)
{
    if (!strcmp(s, "f32") || !strcmp(s, "float32") || !strcmp(s, "fp32")) { *out = FW_F32; return 0; }
    if (!strcmp(s, "f16") || !strcmp(s, "float16") || !strcmp(s, "fp16") || !strcmp(s, "half")) { *out = FW_F16; return 0; }
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) { *out = FW_BF16; return 0; }
    return -1;
}

const char *fw_args_device_name(fw_device d, char *buf, size_t len)
{
    if (d.kind == FW_DEVICE_CPU) snprintf(buf, len, "cpu");
    else snprintf(buf, len, "cuda:%d", d.index);
    return buf;
}

/* One integer within +-2^40, optional k/K suffix (x1024, checked before it multiplies). */
static int parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s) return -1;
    if (x > (1ll << 40) || x < -(1ll << 40)) return -1;
    if (*end == 'k' || *end == 'K') { x *= 1024; end++; }
    if (*end) return -1;
    if (x > (1ll << 40) || x < -(1ll << 40)) return -1;
    *out = (int64_t)x;
    return 0;
}

/* Splits a comma list into items (copied into tok, max FW_LIST_MAX). Returns count or -1. */
static int split(const char *val, char tok[][FW_NAME_MAX], int max)
{
    int n = 0;
    const char *p = val;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == 0 || len >= FW_NAME_MAX || n >= max) return -1;
        memcpy(tok[n], p, len);
        tok[n][len] = 0;
        n++;
        if (!c) break;
        p = c + 1;
    }
    return n;
}

int fw_args_backend_info(const char *name, fw_backend_info *out)
{
    for (int i = 0; i < fw_backend_count(); i++)
        if (fw_backend_get_info(i, out) == FW_OK && !strcmp(out->name, name)) return 1;
    memset(out, 0, sizeof *out);
    return 0;
}

static int known_backend(const char *name)
{
    fw_backend_info info;
    return fw_args_backend_info(name, &info);
}

static void known_backends(char *buf, size_t len)
{
    fw_backend_info info;
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < fw_backend_count() && n < len; i++)
        if (fw_backend_get_info(i, &info) == FW_OK)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", info.name);
}

static int apply(const opt *o, const char *val, int lists, fw_cli *cli, char *err, size_t err_len)
{
    char tok[FW_LIST_MAX][FW_NAME_MAX];
    char *base = (char *)cli;
    int n;
    switch (o->k) {
    case K_ILIST:
    case K_DTYPE:
    case K_CAUSAL:
    case K_LAYOUT: {
        fw_ilist *l = (fw_ilist *)(base + o->off);
        n = split(val, tok, FW_LIST_MAX);
        if (n < 0) {
            snprintf(err, err_len, "--%s: '%s' is not a comma list of at most %d values", o->name, val, FW_LIST_MAX);
            return 2;
        }
        if (n > 1 && !lists) {
            snprintf(err, err_len, "--%s takes one value here ('%s'); comma lists are for `flashwatt bench`", o->name, val);
            return 2;
        }
        for (int i = 0; i < n; i++) {
            int64_t x = 0;
            int bad = 0;
            if (o->k == K_ILIST) {
                bad = parse_int(tok[i], &x) != 0;
                if (!bad && x < o->min) {
                    snprintf(err, err_len, "--%s: %s is out of range (must be >= %lld)", o->name, tok[i], (long long)o->min);
                    return 2;
                }
                if (!bad && x > (1ll << 31) - 1) {
                    snprintf(err, err_len, "--%s: %s is out of range (must be <= %lld)", o->name, tok[i], (1ll << 31) - 1);
                    return 2;
                }
            } else if (o->k == K_DTYPE) {
                fw_dtype t;
                bad = fw_args_dtype(tok[i], &t) != 0;
                x = (int64_t)t;
            } else if (o->k == K_CAUSAL) {
                if (!strcmp(tok[i], "1") || !strcmp(tok[i], "true") || !strcmp(tok[i], "yes")) x = 1;
                else if (!strcmp(tok[i], "0") || !strcmp(tok[i], "false") || !strcmp(tok[i], "no")) x = 0;
                else bad = 1;
            } else {
                if (!strcmp(tok[i], "bhsd")) x = 0;
                else if (!strcmp(tok[i], "bshd")) x = 1;
                else bad = 1;
            }
            if (bad) {
                const char *want = o->k == K_ILIST ? "an integer" : o->k == K_DTYPE ? "f32, f16 or bf16"
                                 : o->k == K_CAUSAL ? "0 or 1" : "bhsd or bshd";
                snprintf(err, err_len, "--%s: '%s' is not %s", o->name, tok[i], want);
                return 2;
            }
            l->v[i] = x;
        }
        l->n = n;
        return 0;
    }
    case K_WINDOW: {
        n = split(val, tok, FW_LIST_MAX);
        int64_t a, b;
        if (n != 2 || parse_int(tok[0], &a) || parse_int(tok[1], &b) || a < -1 || b < -1) {
            snprintf(err, err_len, "--window: '%s' is not L,R (two integers >= 0, or -1 for unlimited)", val);
            return 2;
        }
        cli->have_window = 1;
        cli->window_left = a;
        cli->window_right = b;
        return 0;
    }
    case K_BACKENDS: {
        n = split(val, tok, FW_LIST_MAX);
        if (n < 0) {
            snprintf(err, err_len, "--backend: '%s' is not a comma list of backend names", val);
            return 2;
        }
        /* a list is fine in check too: it runs several backends on one problem */
        for (int i = 0; i < n; i++) {
            if (!strcmp(tok[i], "auto") && !lists) {
                snprintf(err, err_len, "--backend auto (the scheduler's choice) is for `flashwatt bench`");
                return 2;
            }
            if (strcmp(tok[i], "all") != 0 && strcmp(tok[i], "auto") != 0 && !known_backend(tok[i])) {
                char names[512];
                known_backends(names, sizeof names);
                snprintf(err, err_len, "--backend: no backend '%s' in this build (known: %s, or all)", tok[i], names);
                return 2;
            }
            memcpy(cli->backends.v[i], tok[i], FW_NAME_MAX);
        }
        cli->backends.n = n;
        return 0;
    }
    case K_DEVICE:
        if (fw_device_parse(val, &cli->device)) {
            snprintf(err, err_len, "--device: '%s' is not cpu, cuda or cuda:N", val);
            return 2;
        }
        cli->have_device = 1;
        return 0;
    case K_SEED: {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(val, &end, 0);
        if (errno || end == val || *end || val[0] == '-') {
            snprintf(err, err_len, "--seed: '%s' is not a non-negative integer", val);
            return 2;
        }
        cli->have_seed = 1;
        cli->seed = (uint64_t)s;
        return 0;
    }
    case K_INT: {
        int64_t x;
        const int64_t max = !strcmp(o->name, "page-size") ? 256 : 1000000; /* a page holds 1..256 keys */
        if (parse_int(val, &x) || x < o->min || x > max) {
            snprintf(err, err_len, "--%s: '%s' is not an integer in %lld..%lld", o->name, val, (long long)o->min,
                     (long long)max);
            return 2;
        }
        *(int *)(base + o->off) = (int)x;
        return 0;
    }
    case K_DOUBLE: {
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        if (errno || end == val || *end || !(x >= (double)o->min) || x > 1e9) {
            snprintf(err, err_len, "--%s: '%s' is not a number of seconds >= %lld", o->name, val, (long long)o->min);
            return 2;
        }
        *(double *)(base + o->off) = x;
        return 0;
    }
    case K_STR:
        if (!val[0]) {
            snprintf(err, err_len, "--%s: empty value", o->name);
            return 2;
        }
        *(const char **)(base + o->off) = val;
        return 0;
    case K_FLAG:
        *(int *)(base + o->off) = 1;
        return 0;
    case K_LENS: {
        int32_t *v = (int32_t *)(base + o->off);
        int *count = o->off == OFF(seqlens_q) ? &cli->n_seqlens_q : &cli->n_seqlens_k;
        int m = 0;
        for (const char *p = val;; m++) {
            const char *c = strchr(p, ',');
            char one[32];
            const size_t l = c ? (size_t)(c - p) : strlen(p);
            int64_t x = -1;
            if (m >= FW_CASE_MAX_SEQS) {
                snprintf(err, err_len, "--%s: more than %d sequences", o->name, FW_CASE_MAX_SEQS);
                return 2;
            }
            if (l == 0 || l >= sizeof one) x = -1;
            else {
                memcpy(one, p, l);
                one[l] = 0;
                if (parse_int(one, &x)) x = -1;
            }
            if (x < 0 || x >= (1ll << 31)) {
                snprintf(err, err_len, "--%s: '%.*s' in '%s' is not a sequence length (an integer 0..2147483647)", o->name,
                         (int)(l < 32 ? l : 32), p, val);
                return 2;
            }
            v[m] = (int32_t)x;
            if (!c) break;
            p = c + 1;
        }
        *count = m + 1;
        return 0;
    }
    }
    return 2;
}

/* The ragged batch of --seqlens-q/-k, --kv-cache, --page-size and --append, checked together. */
static int serving_flags(fw_cli *cli, char *err, size_t err_len)
{
    fw_serving_shape *sv = &cli->serving;
    memset(sv, 0, sizeof *sv);
    const int kv = cli->kv_cache != NULL;
    if (!cli->n_seqlens_q && !cli->n_seqlens_k && !kv && !cli->page_size && !cli->append) return 0;
    const int paged = kv && !strcmp(cli->kv_cache, "paged");
    if (kv && !paged && strcmp(cli->kv_cache, "contiguous") != 0) {
        snprintf(err, err_len, "--kv-cache: '%s' is not contiguous or paged", cli->kv_cache);
        return 2;
    }
    if (cli->page_size && !paged) {
        snprintf(err, err_len, "--page-size is for --kv-cache paged");
        return 2;
    }
    if (cli->append && !kv) {
        snprintf(err, err_len, "--append writes the new tokens into a KV cache: add --kv-cache contiguous|paged");
        return 2;
    }
    if (cli->batch.n || cli->seqlen.n || cli->seqlen_k.n) {
        snprintf(err, err_len, "--batch, --seqlen and --seqlen-k describe a dense batch; a ragged batch takes its sequences "
                               "from --seqlens-q / --seqlens-k");
        return 2;
    }
    if (cli->backward && kv) {
        snprintf(err, err_len, "--backward takes a dense or a ragged batch (--seqlens-q / --seqlens-k); a KV-cache call "
                               "has no backward");
        return 2;
    }
    if (kv && !cli->n_seqlens_k) {
        snprintf(err, err_len, "--kv-cache needs --seqlens-k: the tokens already cached, one per sequence");
        return 2;
    }
    const int n = cli->n_seqlens_k ? cli->n_seqlens_k : cli->n_seqlens_q;
    if (cli->n_seqlens_q && cli->n_seqlens_k && cli->n_seqlens_q != cli->n_seqlens_k) {
        snprintf(err, err_len, "--seqlens-q has %d lengths but --seqlens-k has %d; give one of each per sequence",
                 cli->n_seqlens_q, cli->n_seqlens_k);
        return 2;
    }
    sv->kind = kv ? FW_CASE_KVCACHE : FW_CASE_VARLEN;
    sv->nseq = n;
    sv->page_size = paged ? (cli->page_size ? cli->page_size : 16) : 0;
    sv->append = cli->append;
    int64_t total_q = 0, total_k = 0;
    for (int b = 0; b < n; b++) {
        /* a cache without --seqlens-q decodes one token per sequence; a ragged batch without one list is square */
        sv->seq_q[b] = cli->n_seqlens_q ? cli->seqlens_q[b] : kv ? 1 : cli->seqlens_k[b];
        sv->seq_k[b] = cli->n_seqlens_k ? cli->seqlens_k[b] : cli->seqlens_q[b];
        total_q += sv->seq_q[b];
        total_k += sv->seq_k[b];
    }
    if (total_q == 0) {
        snprintf(err, err_len, "--seqlens-q: every length is 0; the batch needs at least one query");
        return 2;
    }
    if (!kv && total_k == 0) {
        snprintf(err, err_len, "--seqlens-k: every length is 0; a ragged batch needs at least one key");
        return 2;
    }
    if (total_q >= (1ll << 31) || total_k >= (1ll << 31)) {
        snprintf(err, err_len, "--seqlens-q / --seqlens-k: the batch's %lld / %lld tokens are above 2^31 - 1",
                 (long long)total_q, (long long)total_k);
        return 2;
    }
    return 0;
}

int fw_args_parse(int argc, char **argv, int first, int lists, fw_cli *cli, char *err, size_t err_len)
{
    memset(cli, 0, sizeof *cli);
    cli->warmup = -1;
    cli->reps = -1;
    cli->max_ref_s = 5.0;
    cli->max_call_s = 5.0;
    cli->seed = 1;
    cli->cooldown_s = 5.0;
    cli->window_s = 1.0;
    cli->budget_s = 120.0;
    err[0] = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli->help = 1;
            return 0;
        }
        if (strncmp(a, "--", 2) != 0 || !a[2]) {
            snprintf(err, err_len, "unexpected argument '%s' (flags start with --; see --help)", a);
            return 2;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const opt *o = NULL;
        for (size_t j = 0; j < sizeof opts / sizeof opts[0]; j++)
            if (strlen(opts[j].name) == nlen && !strncmp(opts[j].name, name, nlen)) o = &opts[j];
        if (!o) {
            snprintf(err, err_len, "unknown flag '--%.*s' (see --help)", (int)nlen, name);
            return 2;
        }
        if (o->bench_only && !lists) {
            snprintf(err, err_len, "--%s is a `flashwatt bench` flag", o->name);
            return 2;
        }
        const char *val = NULL;
        if (o->k == K_FLAG) {
            if (eq) {
                snprintf(err, err_len, "--%s takes no value", o->name);
                return 2;
            }
            val = "";
        } else if (eq) {
            val = eq + 1;
        } else if (o->k == K_CAUSAL) {
            /* bare --causal means causal; a following non-flag word is its value */
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) val = argv[++i];
            else val = "1";
        } else {
            if (i + 1 >= argc) {
                snprintf(err, err_len, "--%s needs a value", o->name);
                return 2;
            }
            val = argv[++i];
        }
        int rc = apply(o, val, lists, cli, err, err_len);
        if (rc) return rc;
    }
    return serving_flags(cli, err, err_len);
}

/* ---- shared by check and bench ----------------------------------------------------------- */
int fw_args_any_shape(const fw_cli *cli)
{
    return cli->batch.n || cli->heads.n || cli->kv_heads.n || cli->seqlen.n || cli->seqlen_k.n || cli->head_dim.n ||
           cli->dtype.n || cli->causal.n || cli->layout.n || cli->have_window || cli->serving.nseq;
}

static int plan_add(fw_plan *plan, const char *name, fw_device dev)
{
    for (int i = 0; i < plan->n; i++)
        if (!strcmp(plan->name[i], name)) return 0; /* once each */
    if (plan->n >= FW_LIST_MAX) return -1;
    snprintf(plan->name[plan->n], FW_NAME_MAX, "%.47s", name);
    plan->device[plan->n] = dev;
    plan->n++;
    return 0;
}

static void add_usable(fw_plan *plan, fw_device dev, int include_ref)
{
    fw_backend_info info;
    for (int i = 0; i < fw_backend_count(); i++) {
        if (fw_backend_get_info(i, &info) != FW_OK || !info.usable || info.device != dev.kind) continue;
        if (!include_ref && !strcmp(info.name, "cpu-ref")) continue;
        plan_add(plan, info.name, dev);
    }
}

int fw_args_plan(const fw_cli *cli, int gpu_default, const char *cpu_default_list, const char *cuda_default_list,
                 int include_ref, fw_plan *plan, char *err, size_t err_len)
{
    memset(plan, 0, sizeof *plan);
    const int gpus = fw_cuda_device_count();
    fw_device dev = {FW_DEVICE_CPU, 0};
    if (cli->have_device) dev = cli->device;
    else if (gpu_default || gpus > 0) dev.kind = FW_DEVICE_CUDA;
    const int cuda_index = cli->have_device && cli->device.kind == FW_DEVICE_CUDA ? cli->device.index : 0;
    int named_all = 0;
    for (int i = 0; i < cli->backends.n; i++) {
        if (!strcmp(cli->backends.v[i], "all")) { named_all = 1; continue; }
        if (!strcmp(cli->backends.v[i], "auto")) continue; /* the scheduler's choice: added below */
        fw_backend_info info;
        if (!fw_args_backend_info(cli->backends.v[i], &info)) {
            snprintf(err, err_len, "no backend '%s' in this build", cli->backends.v[i]);
            return 2;
        }
        if (cli->have_device && info.device != cli->device.kind) {
            snprintf(err, err_len, "backend %s runs on the %s but --device is %s", info.name,
                     info.device == FW_DEVICE_CUDA ? "GPU (cuda)" : "cpu",
                     cli->device.kind == FW_DEVICE_CUDA ? "cuda" : "cpu");
            return 2;
        }
        fw_device d = {info.device, info.device == FW_DEVICE_CUDA ? cuda_index : 0};
        if (plan_add(plan, info.name, d)) {
            snprintf(err, err_len, "too many backends");
            return 2;
        }
    }
    /* named backends alone decide the device when --device is not given */
    if (cli->backends.n && plan->n > 0 && !named_all && !cli->have_device) {
        dev = plan->device[0];
        for (int i = 1; i < plan->n; i++)
            if (plan->device[i].kind != dev.kind) dev.kind = FW_DEVICE_CPU; /* mixed: host first */
    }
    plan->main_device = dev;
    int need_gpu = dev.kind == FW_DEVICE_CUDA && (named_all || !cli->backends.n);
    for (int i = 0; i < plan->n; i++) need_gpu |= plan->device[i].kind == FW_DEVICE_CUDA;
    if (need_gpu && gpus <= dev.index) {
        if (gpus <= 0)
            snprintf(err, err_len, "no GPU is visible here (fw_cuda_device_count() = 0)%s",
                     cli->have_device ? "" : "; pass --device cpu to run on the CPU");
        else
            snprintf(err, err_len, "no CUDA device %d here (%d visible)", dev.index, gpus);
        return 1;
    }
    if (named_all) add_usable(plan, dev, 1);
    for (int i = 0; i < cli->backends.n; i++)
        if (!strcmp(cli->backends.v[i], "auto") && plan_add(plan, "auto", dev)) {
            snprintf(err, err_len, "too many backends");
            return 2;
        }
    if (!cli->backends.n) {
        const char *list = dev.kind == FW_DEVICE_CUDA ? cuda_default_list : cpu_default_list;
        if (list) {
            char tok[FW_LIST_MAX][FW_NAME_MAX];
            int n = split(list, tok, FW_LIST_MAX);
            fw_backend_info info;
            for (int i = 0; i < n; i++)
                if (fw_args_backend_info(tok[i], &info)) plan_add(plan, tok[i], dev);
        } else {
            add_usable(plan, dev, include_ref);
        }
    }
    if (plan->n == 0) {
        snprintf(err, err_len, "no usable backend on %s in this build", dev.kind == FW_DEVICE_CUDA ? "cuda" : "cpu");
        return 1;
    }
    return 0;
}
