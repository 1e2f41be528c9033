/* The tuning table on disk (see tuning_table.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/alloc.h"
#include "tuning_table.h"

#define TT_HEADER "# flashwatt tuning table v3"
#define TT_HEADER_V2 "# flashwatt tuning table v2"
#define TT_HEADER_V1 "# flashwatt tuning table v1"
#define TT_FIELDS 18
#define TT_FIELDS_V2 17
#define TT_FIELDS_V1 14

static const char *const call_names[] = {"dense", "varlen", "cache", "paged"};

const char *fw_tune_call_name(fw_tune_call c)
{
    return (unsigned)c < sizeof call_names / sizeof call_names[0] ? call_names[c] : "?";
}

int fw_tune_call_parse(const char *s, fw_tune_call *out)
{
    for (unsigned i = 0; i < sizeof call_names / sizeof call_names[0]; i++)
        if (s && strcmp(s, call_names[i]) == 0) {
            *out = (fw_tune_call)i;
            return 0;
        }
    return -1;
}

const char *fw_precision_name(fw_precision p)
{
    switch (p) {
    case FW_PRECISION_EXACT: return "exact";
    case FW_PRECISION_TF32: return "tf32";
    case FW_PRECISION_3XTF32: return "3xtf32";
    case FW_PRECISION_BF16: return "bf16";
    }
    return "?";
}

int fw_precision_parse(const char *s, fw_precision *out)
{
    for (int i = FW_PRECISION_EXACT; i <= FW_PRECISION_BF16; i++)
        if (s && strcmp(s, fw_precision_name((fw_precision)i)) == 0) {
            *out = (fw_precision)i;
            return 0;
        }
    return -1;
}

int64_t fw_tune_bucket(int64_t x)
{
    int64_t b = 1;
    while (b < x && b < ((int64_t)1 << 62)) b <<= 1;
    return b;
}

static void copy_clean(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src ? src : "");
    for (char *p = dst; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
}

fw_tune_key fw_tune_key_make(const char *device, fw_dtype dtype, int head_dim, int causal, int64_t batch_heads,
                             int64_t lq, int64_t lk)
{
    fw_tune_key k;
    memset(&k, 0, sizeof k);
    copy_clean(k.device, sizeof k.device, device);
    k.dtype = dtype;
    k.head_dim = head_dim;
    k.causal = causal ? 1 : 0;
    k.bh = fw_tune_bucket(batch_heads);
    k.lq = fw_tune_bucket(lq);
    k.lk = fw_tune_bucket(lk);
    k.group = 1;
    return k;
}

int fw_tune_key_equal(const fw_tune_key *a, const fw_tune_key *b)
{
    return strcmp(a->device, b->device) == 0 && a->dtype == b->dtype && a->head_dim == b->head_dim &&
           a->causal == b->causal && a->bh == b->bh && a->lq == b->lq && a->lk == b->lk &&
           (a->group > 1 ? a->group : 1) == (b->group > 1 ? b->group : 1) && a->call == b->call;
}

void fw_tune_init(fw_tuning_table *t) { memset(t, 0, sizeof *t); }

void fw_tune_free(fw_tuning_table *t)
{
    if (!t) return;
    fw_free(t->e);
    memset(t, 0, sizeof *t);
}

static int ok_value(double v) { return isfinite(v) && v >= 0; }

/* The entry as stored (names cleaned), or FW_ERR_INVALID_VALUE for values a table may not hold. */
static fw_status clean_entry(const fw_tune_entry *in, fw_tune_entry *e)
{
    if (!(isfinite(in->ms) && in->ms > 0) || !ok_value(in->j_per_call) || !ok_value(in->avg_w) || !ok_value(in->peak_w))
        return FW_ERR_INVALID_VALUE;
    if (in->precision < FW_PRECISION_EXACT || in->precision > FW_PRECISION_BF16 || (in->err_valid && !ok_value(in->err)))
        return FW_ERR_INVALID_VALUE;
    *e = *in;
    copy_clean(e->key.device, sizeof e->key.device, in->key.device);
    copy_clean(e->backend, sizeof e->backend, in->backend);
    copy_clean(e->config, sizeof e->config, in->config);
    return FW_OK;
}

/* Same measurement slot: an entry with these replaces the other. */
static int same_slot(const fw_tune_entry *a, const fw_tune_entry *b)
{
    return fw_tune_key_equal(&a->key, &b->key) && strcmp(a->backend, b->backend) == 0 && strcmp(a->config, b->config) == 0 &&
           a->precision == b->precision;
}

static fw_status append(fw_tuning_table *t, const fw_tune_entry *e)
{
    if (t->n == t->cap) {
        if (t->cap > INT32_MAX / 2) return FW_ERR_OUT_OF_MEMORY;
        const int cap = t->cap ? 2 * t->cap : 32;
        fw_tune_entry *ne = (fw_tune_entry *)fw_realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne) return FW_ERR_OUT_OF_MEMORY;
        t->e = ne;
        t->cap = cap;
    }
    t->e[t->n++] = *e;
    return FW_OK;
}

fw_status fw_tune_put(fw_tuning_table *t, const fw_tune_entry *in)
{
    if (!t || !in) return FW_ERR_NULL_ARGUMENT;
    fw_tune_entry e;
    fw_status st = clean_entry(in, &e);
    if (st != FW_OK) return st;
    for (int i = 0; i < t->n; i++)
        if (same_slot(&t->e[i], &e)) {
            t->e[i] = e;
            return FW_OK;
        }
    return append(t, &e);
}

/* FNV-1a over what same_slot compares. */
static uint64_t slot_hash(const fw_tune_entry *e)
{
    uint64_t h = 1469598103934665603ull;
    const char *strs[3] = {e->key.device, e->backend, e->config};
    for (int i = 0; i < 3; i++) {
        for (const char *c = strs[i]; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ 0xffu) * 1099511628211ull;
    }
    const int64_t nums[9] = {e->key.dtype, e->key.head_dim, e->key.causal, e->key.bh, e->key.lq, e->key.lk,
                             e->key.group > 1 ? e->key.group : 1, e->precision, e->key.call};
    for (int i = 0; i < 9; i++)
        for (int b = 0; b < 8; b++) h = (h ^ (uint64_t)((nums[i] >> (8 * b)) & 0xff)) * 1099511628211ull;
    return h;
}

/* fw_tune_put of every entry of add into t, in order, through a hash index of the slots: linear in the
 * entries where a put each would be quadratic (a 40k-entry table took 6 s on every context's first call). */
static fw_status merge(fw_tuning_table *t, const fw_tuning_table *add)
{
    size_t cap = 64;
    while (cap < 2 * ((size_t)t->n + (size_t)add->n)) cap *= 2;
    int *slot = (int *)fw_malloc(cap * sizeof(int)); /* entry index + 1; 0 = free */
    if (!slot) return FW_ERR_OUT_OF_MEMORY;
    memset(slot, 0, cap * sizeof(int));
    fw_status st = FW_OK;
    const int n0 = t->n;
    for (int i = 0; i < n0 + add->n && st == FW_OK; i++) {
        const int from_add = i >= n0;
        const fw_tune_entry *e = from_add ? &add->e[i - n0] : &t->e[i];
        size_t h = (size_t)slot_hash(e) & (cap - 1);
        while (slot[h] && !same_slot(&t->e[slot[h] - 1], e)) h = (h + 1) & (cap - 1);
        if (slot[h] && from_add) t->e[slot[h] - 1] = *e; /* a later entry replaces the earlier */
        else if (!slot[h] && !from_add) slot[h] = i + 1;
        else if (!slot[h] && (st = append(t, e)) == FW_OK) slot[h] = t->n;
    }
    fw_free(slot);
    return st;
}

int fw_tune_frontier(const fw_tuning_table *t, const fw_tune_key *k, fw_frontier_point *out, int max)
{
    if (!t || !k || !out) return 0;
    int n = 0;
    for (int i = 0; i < t->n && n < max; i++) {
        const fw_tune_entry *e = &t->e[i];
        if (!fw_tune_key_equal(&e->key, k)) continue;
        fw_frontier_point *p = &out[n++];
        memset(p, 0, sizeof *p);
        const char *pn = fw_precision_name(e->precision);
        const int tag_prec = e->precision != FW_PRECISION_EXACT && !strstr(e->config, pn);
        snprintf(p->name, sizeof p->name, "%.31s%s%.24s%s%s", e->backend, e->config[0] ? " " : "", e->config,
                 tag_prec ? " " : "", tag_prec ? pn : "");
        p->tag = i;
        p->ms = e->ms;
        p->j_per_call = e->j_per_call;
        p->avg_w = e->avg_w;
    }
    return n;
}

static void put_num(FILE *f, double v)
{
    if (v > 0) fprintf(f, "\t%.17g", v);
    else fprintf(f, "\tn/a");
}

fw_status fw_tune_save(const fw_tuning_table *t, const char *path, char *why, size_t why_len)
{
    if (!t || !path) return FW_ERR_NULL_ARGUMENT;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        snprintf(why, why_len, "path too long");
        return FW_ERR_INVALID_VALUE;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
        return FW_ERR_INVALID_VALUE;
    }
    fprintf(f, "%s\n# device\tdtype\thead_dim\tcausal\tbh\tlq\tlk\tbackend\tconfig\tms\tj_per_call\tavg_w\tpeak_w\tstamp"
               "\tprecision\terr\tgroup\tcall\n",
            TT_HEADER);
    for (int i = 0; i < t->n; i++) {
        const fw_tune_entry *e = &t->e[i];
        fprintf(f, "%s\t%s\t%d\t%d\t%lld\t%lld\t%lld\t%s\t%s\t%.17g", e->key.device, fw_dtype_name(e->key.dtype),
                e->key.head_dim, e->key.causal, (long long)e->key.bh, (long long)e->key.lq, (long long)e->key.lk,
                e->backend[0] ? e->backend : "-", e->config[0] ? e->config : "-", e->ms);
        put_num(f, e->j_per_call);
        put_num(f, e->avg_w);
        put_num(f, e->peak_w);
        fprintf(f, "\t%lld\t%s", (long long)e->stamp, fw_precision_name(e->precision));
        if (e->err_valid) fprintf(f, "\t%.6g", e->err);
        else fprintf(f, "\tn/a");
        fprintf(f, "\t%lld\t%s\n", (long long)(e->key.group > 1 ? e->key.group : 1), fw_tune_call_name(e->key.call));
    }
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        return FW_ERR_INVALID_VALUE;
    }
    return FW_OK;
}

static int parse_num(const char *s, double *v)
{
    if (strcmp(s, "n/a") == 0) {
        *v = 0;
        return 0;
    }
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return (errno || end == s || *end || !isfinite(*v) || *v < 0) ? -1 : 0;
}

static int parse_int64(const char *s, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return -1;
    *v = (int64_t)x;
    return 0;
}

fw_status fw_tune_load(fw_tuning_table *t, const char *path, char *why, size_t why_len)
{
    if (!t || !path) return FW_ERR_NULL_ARGUMENT;
    /* Regular files only, opened without blocking: a FIFO would wait for a writer in open(), a device or
     * /proc file need not end. */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            snprintf(why, why_len, "no tuning table at %s yet", path);
            return FW_OK;
        }
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        return FW_ERR_INVALID_VALUE;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, why_len, "%s is not a regular file", path);
        close(fd);
        return FW_ERR_INVALID_VALUE;
    }
    FILE *f = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        close(fd);
        return FW_ERR_INVALID_VALUE;
    }
    fw_tuning_table add;
    fw_tune_init(&add);
    char line[2048];
    int lineno = 0, version = 3;
    fw_status st = FW_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = 0;
        else if (!feof(f)) {
            snprintf(why, why_len, "%s line %d: longer than %zu characters", path, lineno, sizeof line - 1);
            st = FW_ERR_INVALID_VALUE;
            break;
        }
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (lineno == 1) {
            if (strcmp(line, TT_HEADER_V1) == 0) version = 1;
            else if (strcmp(line, TT_HEADER_V2) == 0) version = 2;
            else if (strcmp(line, TT_HEADER) != 0) {
                snprintf(why, why_len, "%s: not a flashwatt tuning table v1, v2 or v3 (first line '%.60s')", path, line);
                st = FW_ERR_INVALID_VALUE;
                break;
            }
            continue;
        }
        if (len == 0 || line[0] == '#') continue;
        const int want = version == 1 ? TT_FIELDS_V1 : version == 2 ? TT_FIELDS_V2 : TT_FIELDS;
        char *fld[TT_FIELDS];
        int nf = 0;
        char *p = line;
        for (;;) {
            if (nf == want) {
                nf++;
                break;
            }
            fld[nf++] = p;
            char *tab = strchr(p, '\t');
            if (!tab) break;
            *tab = 0;
            p = tab + 1;
        }
        fw_tune_entry e;
        memset(&e, 0, sizeof e);
        int ok = nf == want;
        if (ok) {
            copy_clean(e.key.device, sizeof e.key.device, fld[0]);
            if (!strcmp(fld[1], fw_dtype_name(FW_F32))) e.key.dtype = FW_F32;
            else if (!strcmp(fld[1], fw_dtype_name(FW_F16))) e.key.dtype = FW_F16;
            else if (!strcmp(fld[1], fw_dtype_name(FW_BF16))) e.key.dtype = FW_BF16;
            else ok = 0;
            int64_t hd = 0, ca = 0;
            double pw = 0;
            ok = ok && parse_int64(fld[2], &hd) == 0 && hd > 0 && hd <= FW_MAX_HEAD_DIM;
            ok = ok && parse_int64(fld[3], &ca) == 0 && (ca == 0 || ca == 1);
            ok = ok && parse_int64(fld[4], &e.key.bh) == 0 && e.key.bh > 0;
            ok = ok && parse_int64(fld[5], &e.key.lq) == 0 && e.key.lq > 0;
            ok = ok && parse_int64(fld[6], &e.key.lk) == 0 && e.key.lk > 0;
            e.key.head_dim = (int)hd;
            e.key.causal = (int)ca;
            copy_clean(e.backend, sizeof e.backend, strcmp(fld[7], "-") ? fld[7] : "");
            copy_clean(e.config, sizeof e.config, strcmp(fld[8], "-") ? fld[8] : "");
            ok = ok && parse_num(fld[9], &e.ms) == 0 && e.ms > 0;
            ok = ok && parse_num(fld[10], &e.j_per_call) == 0 && parse_num(fld[11], &e.avg_w) == 0 &&
                 parse_num(fld[12], &pw) == 0 && parse_int64(fld[13], &e.stamp) == 0;
            e.peak_w = pw;
            if (ok && version >= 2) {
                double er = 0;
                ok = fw_precision_parse(fld[14], &e.precision) == 0;
                if (ok && strcmp(fld[15], "n/a") != 0) {
                    ok = parse_num(fld[15], &er) == 0;
                    e.err = er;
                    e.err_valid = 1;
                }
                ok = ok && parse_int64(fld[16], &e.key.group) == 0 && e.key.group >= 1;
            }
            if (ok && version >= 3) ok = fw_tune_call_parse(fld[17], &e.key.call) == 0;
        }
        if (!ok) {
            snprintf(why, why_len, "%s line %d: expected %d tab-separated fields (device dtype head_dim causal bh lq lk "
                                   "backend config ms j_per_call avg_w peak_w stamp%s) with valid values",
                     path, lineno, want, version == 1 ? "" : version == 2 ? " precision err group" : " precision err group call");
            st = FW_ERR_INVALID_VALUE;
            break;
        }
        fw_tune_entry clean;
        if ((st = clean_entry(&e, &clean)) != FW_OK) {
            snprintf(why, why_len, "%s line %d: a value out of range", path, lineno);
            break;
        }
        if ((st = append(&add, &clean)) != FW_OK) break;
    }
    if (st == FW_OK && ferror(f)) {
        snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
        st = FW_ERR_INVALID_VALUE;
    }
    fclose(f);
    if (st == FW_OK && lineno == 0) {
        snprintf(why, why_len, "%s is empty", path);
        st = FW_ERR_INVALID_VALUE;
    }
    if (st == FW_OK) st = merge(t, &add);
    fw_tune_free(&add);
    return st;
}
