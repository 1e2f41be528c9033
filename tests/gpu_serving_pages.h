/* gpu_serving's paged-decode cases checked against a float64 decode computed here (included once by
 * gpu_serving.c, before its case list): every way cuda-flash finds a row's page (page sizes that are a
 * multiple of the rows a thread loads, page size 1, and the rest: 3, 12, 24, 48 at head dims 64, 128,
 * 256), table entries outside the pool inside a sequence's used range (the kernel must mask exactly
 * those keys: cpu-ref refuses such tables, so the reference skips them itself), and a pool whose pages
 * lie more than 4 GiB apart (the 64-bit page offsets), split-KV forced on and off. */
#ifndef GPU_SERVING_PAGES_H
#define GPU_SERVING_PAGES_H

#define PG_MAXB 4

typedef struct pg_case {
    fw_dtype dtype;
    int B, H, Hkv, D, page_size, pages_per_seq;
    int lens[PG_MAXB];
    int bad_every;            /* 0: every used table entry valid; n: every n-th used entry outside the pool */
    int64_t page_stride_bytes; /* 0: pages packed; else the pool's page stride (both k and v in one buffer) */
    const char *config;
    uint64_t seed;
} pg_case;

/* Decode over the keys whose page is valid, in double: o[(b·H + h)·D + d], lse[b·H + h]. pages[p]: page
 * p's rows (page_size, Hkv, D) as floats (NULL: outside the pool). */
static void pg_reference(const pg_case *c, const int32_t *bt, int num_pages, float *const *pages, const float *q,
                         double *o, double *lse)
{
    const int G = c->H / c->Hkv;
    const double scale = 1.0 / sqrt((double)c->D);
    double *s = (double *)xmalloc(sizeof(double) * (size_t)c->pages_per_seq * c->page_size);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++) {
            const float *qh = q + ((size_t)b * c->H + h) * c->D;
            double m = -INFINITY;
            for (int j = 0; j < c->lens[b]; j++) {
                const int page = bt[b * c->pages_per_seq + j / c->page_size];
                s[j] = -INFINITY;
                if (page < 0 || page >= num_pages) continue;
                const float *kr = pages[page] + ((size_t)(j % c->page_size) * c->Hkv + h / G) * c->D;
                double acc = 0;
                for (int d = 0; d < c->D; d++) acc += (double)qh[d] * kr[d];
                s[j] = acc * scale;
                m = s[j] > m ? s[j] : m;
            }
            double l = 0, *oh = o + ((size_t)b * c->H + h) * c->D;
            for (int d = 0; d < c->D; d++) oh[d] = 0;
            for (int j = 0; j < c->lens[b]; j++) {
                if (s[j] == -INFINITY) continue;
                const int page = bt[b * c->pages_per_seq + j / c->page_size];
                const double w = exp(s[j] - m);
                const float *vr = pages[num_pages + page] + ((size_t)(j % c->page_size) * c->Hkv + h / G) * c->D;
                l += w;
                for (int d = 0; d < c->D; d++) oh[d] += w * vr[d];
            }
            for (int d = 0; d < c->D; d++) oh[d] = l > 0 ? oh[d] / l : 0;
            lse[b * c->H + h] = l > 0 ? m + log(l) : -INFINITY;
        }
    free(s);
}

static void pg_run(const pg_case *c)
{
    char name[256];
    snprintf(name, sizeof name, "paged decode %s B%d H%d/%d D%d ps%d lens %d,%d,%d,%d%s%s%s%s", fw_dtype_name(c->dtype),
             c->B, c->H, c->Hkv, c->D, c->page_size, c->lens[0], c->B > 1 ? c->lens[1] : 0, c->B > 2 ? c->lens[2] : 0,
             c->B > 3 ? c->lens[3] : 0, c->bad_every ? ", bad pages" : "",
             c->page_stride_bytes ? ", pages 1.5 GiB apart" : "", c->config ? " cfg=" : "", c->config ? c->config : "");
    rng_state = c->seed;
    const size_t es = esize(c->dtype), page_elems = (size_t)c->page_size * c->Hkv * c->D;
    const int far = c->page_stride_bytes > 0;
    const int used = c->B * c->pages_per_seq, num_pages = used + (far ? 1 : 2);
    /* the pool: k pages then v pages in one buffer; far: page p of k at p · stride, of v at p · stride + half */
    const int64_t pstride = far ? c->page_stride_bytes / (int64_t)es : (int64_t)page_elems;
    const size_t pool_bytes = far ? (size_t)(num_pages - 1) * (size_t)c->page_stride_bytes + 2 * page_elems * es
                                  : 2 * (size_t)num_pages * page_elems * es;
    const int64_t v_off = far ? (int64_t)page_elems : (int64_t)num_pages * (int64_t)page_elems; /* elements */
    void *pool = NULL;
    if (cudaMalloc(&pool, pool_bytes) != cudaSuccess) {
        cudaGetLastError();
        fwt_skip("%s: no %zu bytes of device memory for the pool", name, pool_bytes);
        return;
    }
    float **pages = (float **)xmalloc(sizeof(float *) * 2 * (size_t)num_pages); /* k pages, then v pages */
    void *hpage = xmalloc(page_elems * es);
    for (int p = 0; p < 2 * num_pages; p++) {
        pages[p] = (float *)xmalloc(sizeof(float) * page_elems);
        for (size_t i = 0; i < page_elems; i++) {
            const float x = urand();
            if (c->dtype == FW_F16) ((uint16_t *)hpage)[i] = fw_f32_to_f16(x);
            else ((uint16_t *)hpage)[i] = fw_f32_to_bf16(x);
            pages[p][i] = get(hpage, c->dtype, i);
        }
        const int64_t at = p < num_pages ? (int64_t)p * pstride : v_off + (int64_t)(p - num_pages) * pstride;
        cudaMemcpy((char *)pool + at * (int64_t)es, hpage, page_elems * es, cudaMemcpyHostToDevice);
    }
    /* the table: a shuffle of the pool's pages, with every bad_every-th used entry outside the pool */
    int32_t *bt = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)used);
    int *perm = (int *)xmalloc(sizeof(int) * (size_t)num_pages);
    for (int i = 0; i < num_pages; i++) perm[i] = i;
    for (int i = num_pages - 1; i > 0; i--) { const int j = irand(i + 1), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    static const int32_t bad[] = {-1, 0, 1000, -2147483647 - 1}; /* 0: num_pages */
    for (int i = 0; i < used; i++) {
        bt[i] = far ? num_pages - 1 - i : perm[i]; /* far: the farthest pages */
        if (c->bad_every && i % c->bad_every == c->bad_every - 1) bt[i] = bad[(i / c->bad_every) % 4] + (bad[(i / c->bad_every) % 4] >= 0 ? num_pages : 0);
    }
    free(perm);
    const size_t nq = (size_t)c->B * c->H * c->D;
    float *qf = (float *)xmalloc(sizeof(float) * nq);
    void *qh = xmalloc(nq * es), *oh = xmalloc(nq * es);
    for (size_t i = 0; i < nq; i++) {
        const float x = urand();
        if (c->dtype == FW_F16) ((uint16_t *)qh)[i] = fw_f32_to_f16(x);
        else ((uint16_t *)qh)[i] = fw_f32_to_bf16(x);
        qf[i] = get(qh, c->dtype, i);
    }
    double *o_ref = (double *)xmalloc(sizeof(double) * nq), *lse_ref = (double *)xmalloc(sizeof(double) * (size_t)c->B * c->H);
    pg_reference(c, bt, num_pages, pages, qf, o_ref, lse_ref);
    void *dq = to_dev(qh, nq * es), *dout = to_dev(NULL, nq * es), *dseq = to_dev(c->lens, sizeof(int32_t) * (size_t)c->B);
    void *dbt = to_dev(bt, sizeof(int32_t) * (size_t)used);
    float *dlse = (float *)to_dev(NULL, sizeof(float) * (size_t)c->B * c->H), *lse = (float *)xmalloc(sizeof(float) * (size_t)c->B * c->H);
    cudaMemset(dout, 0xff, nq * es);
    cudaMemset(dlse, 0xff, sizeof(float) * (size_t)c->B * c->H);
    const fw_device dev = {FW_DEVICE_CUDA, 0};
    fw_tensor q = fw_tensor_bshd(dq, c->dtype, dev, c->B, c->H, 1, c->D), out = fw_tensor_bshd(dout, c->dtype, dev, c->B, c->H, 1, c->D);
    fw_kv_cache cache;
    memset(&cache, 0, sizeof cache);
    cache.k = fw_tensor_bshd(pool, c->dtype, dev, num_pages, c->Hkv, c->page_size, c->D);
    cache.v = fw_tensor_bshd((char *)pool + v_off * (int64_t)es, c->dtype, dev, num_pages, c->Hkv, c->page_size, c->D);
    cache.k.stride[0] = cache.v.stride[0] = pstride;
    cache.seqlens = (const int32_t *)dseq;
    cache.block_table = (const int32_t *)dbt;
    cache.max_pages_per_seq = c->pages_per_seq;
    fw_attn_params prm = fw_attn_params_default();
    prm.causal = 1;
    fw_context *gpu = make_ctx("cuda-flash", c->config);
    const fw_status st = fw_attention_kvcache_forward(gpu, &q, &cache, NULL, NULL, &out, dlse, NULL, &prm);
    const cudaError_t ce = cudaDeviceSynchronize();
    int ok = st == FW_OK && ce == cudaSuccess;
    char why[256];
    snprintf(why, sizeof why, "%s %s", st == FW_OK ? "" : fw_context_last_error(gpu), cudaGetErrorString(ce));
    if (ok) {
        from_dev(oh, dout, nq * es);
        from_dev(lse, dlse, sizeof(float) * (size_t)c->B * c->H);
        double worst = 0, worst_lse = 0;
        for (size_t i = 0; i < nq && ok; i++) {
            const double e = fabs(get(oh, c->dtype, i) - o_ref[i]);
            if (!(e <= tol_of(c->dtype))) {
                ok = 0;
                snprintf(why, sizeof why, "o[%zu] = %g, reference %g", i, get(oh, c->dtype, i), o_ref[i]);
            }
            worst = e > worst ? e : worst;
        }
        for (int i = 0; i < c->B * c->H && ok; i++) {
            const int same_inf = isinf(lse[i]) && isinf(lse_ref[i]) && lse[i] < 0 && lse_ref[i] < 0;
            const double e = same_inf ? 0 : fabs(lse[i] - lse_ref[i]);
            if (!(e <= 2e-3)) {
                ok = 0;
                snprintf(why, sizeof why, "lse[%d] = %g, reference %g", i, lse[i], lse_ref[i]);
            }
            worst_lse = e > worst_lse ? e : worst_lse;
        }
        if (ok) snprintf(why, sizeof why, "max |err| %.2e (tol %.1e), lse %.2e", worst, tol_of(c->dtype), worst_lse);
    }
    fwt_case(ok, "%s: %s", name, why);
    fw_context_destroy(gpu);
    if (ce != cudaSuccess) exit(1);
    void *d[] = {pool, dq, dout, dseq, dbt, dlse};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) cudaFree(d[i]);
    for (int p = 0; p < 2 * num_pages; p++) free(pages[p]);
    free(pages); free(hpage); free(bt); free(qf); free(qh); free(oh); free(o_ref); free(lse_ref); free(lse);
}

static void paged_decode_suite(int quick)
{
    /* page sizes by how the kernel finds a row's page (rows a thread loads: 8 at D 64 and 128, 16 at
     * D 256 with the default key tiles): a run of rows on one page (16, 24, 48, 256), one row a page (1),
     * a lookup per row (3, 12; 24 and 48 at D 256) */
    static const int ps[] = {16, 1, 3, 12, 24, 48, 256}, dims[] = {128, 64, 256};
    for (int i = 0; i < (quick ? 3 : 7); i++)
        for (int k = 0; k < (quick ? 1 : 3); k++) {
            pg_case c;
            memset(&c, 0, sizeof c);
            c.dtype = (i + k) & 1 ? FW_F16 : FW_BF16;
            c.B = 3;
            c.Hkv = 2;
            c.H = k == 1 ? 16 : 8;
            c.D = dims[k];
            c.page_size = ps[i];
            c.pages_per_seq = (1100 + ps[i] - 1) / ps[i];
            c.lens[0] = 1037;
            c.lens[1] = 64 * ((c.pages_per_seq * ps[i]) / 64); /* whole key tiles */
            c.lens[2] = 1 + i;
            c.bad_every = k == 2 ? 0 : 5 + i;
            c.config = k == 1 ? "srv-m16-bn64-s2-split4" : NULL;
            c.seed = 7000 + (uint64_t)(10 * i + k);
            pg_run(&c);
        }
    if (!quick) { /* bad pages with the split forced off, and every entry bad in one sequence */
        pg_case c;
        memset(&c, 0, sizeof c);
        c.dtype = FW_BF16;
        c.B = 2; c.H = 32; c.Hkv = 8; c.D = 128; c.page_size = 16; c.pages_per_seq = 128;
        c.lens[0] = 2048; c.lens[1] = 1500;
        c.bad_every = 3;
        c.config = "srv-m16-bn64-s3-nosplit";
        c.seed = 7100;
        pg_run(&c);
        c.bad_every = 1;
        c.config = "srv-m16-bn64-s4";
        pg_run(&c);
        c.bad_every = 3;
        c.config = "srv-m8-bn64-s3-nosplit";
        pg_run(&c);
    }
    /* pages 1.5 GiB apart: offsets past 2^32 bytes (64-bit products of 32-bit page indices and strides) */
    pg_case f;
    memset(&f, 0, sizeof f);
    f.dtype = FW_BF16;
    f.B = 1; f.H = 16; f.Hkv = 2; f.D = 128; f.page_size = 256; f.pages_per_seq = 3;
    f.lens[0] = 700;
    f.page_stride_bytes = (int64_t)3 << 29;
    f.seed = 7200;
    pg_run(&f);
    if (!quick) {
        f.page_size = 1;
        f.pages_per_seq = 3;
        f.lens[0] = 3;
        pg_run(&f);
    }
}

#endif
