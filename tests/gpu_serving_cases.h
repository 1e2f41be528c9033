/* gpu_serving's cases (included once by gpu_serving.c, after its runner): the case list, the cache grown
 * over many appends, the CUDA graph replay and the out-of-range device values. */
#ifndef GPU_SERVING_CASES_H
#define GPU_SERVING_CASES_H

static sv_case mk(fw_dtype t, int kind, int B, int H, int Hkv, int D)
{
    static uint64_t seed = 1;
    sv_case c;
    memset(&c, 0, sizeof c);
    c.dtype = t;
    c.kind = kind;
    c.B = B;
    c.H = H;
    c.Hkv = Hkv;
    c.D = D;
    c.wl = c.wr = FW_WINDOW_UNLIMITED;
    c.seed = 1000 + seed++;
    return c;
}

static void set_lens(sv_case *c, const int *lq, const int *lk)
{
    for (int i = 0; i < c->B; i++) {
        c->lq[i] = lq ? lq[i] : c->lq[0];
        c->lk[i] = lk[i];
    }
}

/* A cache case: lq new queries per sequence (ragged when lqs is given), cache lengths lk. */
static sv_case cache_case(fw_dtype t, int B, int H, int Hkv, int D, int lq, const int *lqs, const int *lk, int page_size,
                          int capacity, int append)
{
    sv_case c = mk(t, K_CACHE, B, H, Hkv, D);
    c.lq[0] = lq;
    set_lens(&c, lqs, lk);
    c.packed_q = lqs != NULL;
    c.page_size = page_size;
    c.capacity = capacity;
    c.append = append;
    c.causal = 1;
    return c;
}

/* ---- a cache grown over many append calls equals one dense causal forward over the whole sequence --- */
static void grown_cache(fw_dtype t, int page_size)
{
    const int B = 2, H = 8, Hkv = 2, D = 128, L = 300, NMAX = 100;
    static const int chunks[] = {1, 5, 16, 1, 37, 2, 64, 1, 100, 3};
    const size_t es = esize(t);
    sv_case full = mk(t, K_DENSE, B, H, Hkv, D); /* the reference: (B, L, H, D), causal */
    full.lq[0] = full.lk[0] = L;
    full.causal = 1;
    sv_bufs fb, b;
    bufs_make(&full, &fb);
    /* one cache for every call (its pool starts as garbage); q, k_new, v_new sized for the longest chunk */
    sv_case c = cache_case(t, B, H, Hkv, D, NMAX, NULL, (const int[]){0, 0}, page_size, 512, 1);
    bufs_make(&c, &b);
    bufs_upload(&c, &b);
    void *o_ref = xmalloc(fb.no * es), *o_gpu = xmalloc(fb.no * es), *oc = xmalloc(b.no * es);
    float *lse_ref = (float *)xmalloc(fb.nlse * 4), *lse_gpu = (float *)xmalloc(fb.nlse * 4);
    float *lc = (float *)xmalloc(b.nlse * 4);
    fw_context *ref = make_ctx("cpu-ref", NULL), *gpu = make_ctx(t == FW_F32 ? "cuda-flash-f32" : "cuda-flash", NULL);
    int ok = sv_call(ref, &full, &fb, 0, o_ref, lse_ref) == FW_OK, calls = 0;
    char why[256];
    snprintf(why, sizeof why, "cpu-ref: %s", fw_context_last_error(ref));
    for (int done = 0; ok && done < L; calls++) {
        const int n = chunks[calls % 10] < L - done ? chunks[calls % 10] : L - done;
        c.lq[0] = c.lq[1] = b.Lq = n;
        b.cu_q[1] = n;
        b.cu_q[2] = b.total_q = 2 * n;
        b.nq = b.no = (size_t)b.total_q * H * D;
        b.nkn = (size_t)b.total_q * Hkv * D;
        b.nlse = (size_t)b.total_q * H;
        for (int s = 0; s < B; s++) { /* this chunk: rows done .. done + n - 1 of the whole sequence */
            b.seqlens[s] = done;
            memcpy((char *)b.q + (size_t)s * n * H * D * es, (char *)fb.q + ((size_t)s * L + done) * H * D * es, (size_t)n * H * D * es);
            memcpy((char *)b.kn + (size_t)s * n * Hkv * D * es, (char *)fb.k + ((size_t)s * L + done) * Hkv * D * es, (size_t)n * Hkv * D * es);
            memcpy((char *)b.vn + (size_t)s * n * Hkv * D * es, (char *)fb.v + ((size_t)s * L + done) * Hkv * D * es, (size_t)n * Hkv * D * es);
        }
        cudaMemcpy(b.dseq, b.seqlens, sizeof(int32_t) * B, cudaMemcpyHostToDevice);
        cudaMemcpy(b.dq, b.q, b.nq * es, cudaMemcpyHostToDevice);
        cudaMemcpy(b.dkn, b.kn, b.nkn * es, cudaMemcpyHostToDevice);
        cudaMemcpy(b.dvn, b.vn, b.nkn * es, cudaMemcpyHostToDevice);
        cudaMemset(b.do_, 0xff, b.no * es);
        cudaMemset(b.dlse, 0xff, b.nlse * 4);
        ok = sv_call(gpu, &c, &b, 1, b.do_, b.dlse) == FW_OK && cudaDeviceSynchronize() == cudaSuccess;
        if (!ok) snprintf(why, sizeof why, "append call %d: %s", calls, fw_context_last_error(gpu));
        from_dev(oc, b.do_, b.no * es);
        from_dev(lc, b.dlse, b.nlse * 4);
        for (int s = 0; s < B; s++) {
            memcpy((char *)o_gpu + ((size_t)s * L + done) * H * D * es, (char *)oc + (size_t)s * n * H * D * es, (size_t)n * H * D * es);
            for (int h = 0; h < H; h++)
                for (int i = 0; i < n; i++) lse_gpu[((size_t)s * H + h) * L + done + i] = lc[((size_t)s * H + h) * n + i];
        }
        done += n;
    }
    if (ok) ok = compare(&full, &fb, o_gpu, lse_gpu, o_ref, lse_ref, why, sizeof why);
    fwt_case(ok, "grown cache %s %s ps%d: %d appends of 1..100 tokens = one causal forward of %d keys: %s",
             fw_dtype_name(t), page_size ? "paged" : "contiguous", page_size, calls, L, why);
    fw_context_destroy(ref);
    fw_context_destroy(gpu);
    free(o_ref); free(o_gpu); free(oc); free(lse_ref); free(lse_gpu); free(lc);
    bufs_free(&fb);
    bufs_free(&b);
}

/* ---- one decode step captured into a CUDA graph, replayed with new lengths, tables and inputs ---- */
static void graph_replay(void)
{
    sv_case c = cache_case(FW_BF16, 3, 16, 2, 128, 1, NULL, (const int[]){100, 1500, 7}, 16, 2048, 1);
    sv_bufs b;
    bufs_make(&c, &b);
    bufs_upload(&c, &b);
    const size_t es = esize(c.dtype);
    fw_context *ref = make_ctx("cpu-ref", NULL), *gpu = make_ctx("cuda-flash", NULL);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    fw_context_set_stream(gpu, stream);
    fw_workspace_query wq;
    memset(&wq, 0, sizeof wq);
    wq.device.kind = FW_DEVICE_CUDA;
    wq.dtype = c.dtype;
    wq.max_batch = c.B;
    wq.heads = c.H;
    wq.kv_heads = c.Hkv;
    wq.head_dim = c.D;
    wq.max_seqlen_q = 1;
    wq.max_seqlen_k = c.capacity;
    size_t ws_bytes = 0;
    void *ws = NULL;
    fw_status st = fw_attention_workspace_size(gpu, &wq, &ws_bytes);
    fwt_case(st == FW_OK && ws_bytes > 0, "workspace query for B=3 H=16/2 D=128 capacity 2048: %zu bytes (%s)", ws_bytes,
             fw_context_last_error(gpu));
    if (ws_bytes) {
        ws = to_dev(NULL, ws_bytes);
        fw_context_set_workspace(gpu, ws, ws_bytes);
    }
    void *o = xmalloc(b.no * es), *o_ref = xmalloc(b.no * es);
    float *lse = (float *)xmalloc(b.nlse * 4), *lse_ref = (float *)xmalloc(b.nlse * 4);
    void *kc = xmalloc(b.nk * es), *vc = xmalloc(b.nk * es);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    for (int r = 0; r <= 4; r++) {
        char why[256] = "";
        if (r > 0) { /* new lengths, a new table over the same pool, new inputs; the graph's pointers stay */
            for (int s = 0; s < c.B; s++) b.seqlens[s] = irand(c.capacity - 1);
            int *perm = (int *)xmalloc(sizeof(int) * (size_t)b.num_pages);
            for (int i = 0; i < b.num_pages; i++) perm[i] = i;
            for (int i = b.num_pages - 1; i > 0; i--) { const int j = irand(i + 1), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
            for (int s = 0; s < c.B; s++)
                for (int j = 0; j < b.pages_per_seq; j++) b.bt[s * b.bt_stride + j] = perm[s * b.pages_per_seq + j];
            free(perm);
            free(b.q); free(b.kn); free(b.vn);
            b.q = rand_buf(c.dtype, b.nq);
            b.kn = rand_buf(c.dtype, b.nkn);
            b.vn = rand_buf(c.dtype, b.nkn);
            cudaMemcpy(b.dseq, b.seqlens, sizeof(int32_t) * (size_t)c.B, cudaMemcpyHostToDevice);
            cudaMemcpy(b.dbt, b.bt, sizeof(int32_t) * (size_t)c.B * b.bt_stride, cudaMemcpyHostToDevice);
            cudaMemcpy(b.dq, b.q, b.nq * es, cudaMemcpyHostToDevice);
            cudaMemcpy(b.dkn, b.kn, b.nkn * es, cudaMemcpyHostToDevice);
            cudaMemcpy(b.dvn, b.vn, b.nkn * es, cudaMemcpyHostToDevice);
        }
        cudaMemset(b.do_, 0xff, b.no * es);
        cudaMemset(b.dlse, 0xff, b.nlse * 4);
        cudaDeviceSynchronize();
        int ok = 1;
        if (r == 0) { /* a plain call first (one-time setup), then the capture */
            ok = sv_call(gpu, &c, &b, 1, b.do_, b.dlse) == FW_OK;
            snprintf(why, sizeof why, "%s", fw_context_last_error(gpu));
            if (ok && cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess) {
                st = sv_call(gpu, &c, &b, 1, b.do_, b.dlse);
                const cudaError_t ce = cudaStreamEndCapture(stream, &graph);
                ok = st == FW_OK && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
                if (!ok) snprintf(why, sizeof why, "capture: %s / %s", fw_context_last_error(gpu), cudaGetErrorString(ce));
            }
        } else {
            ok = exec && cudaGraphLaunch(exec, stream) == cudaSuccess;
        }
        ok = ok && cudaStreamSynchronize(stream) == cudaSuccess;
        if (ok && sv_call(ref, &c, &b, 0, o_ref, lse_ref) != FW_OK) {
            ok = 0;
            snprintf(why, sizeof why, "cpu-ref: %s", fw_context_last_error(ref));
        }
        if (ok) {
            from_dev(o, b.do_, b.no * es);
            from_dev(lse, b.dlse, b.nlse * 4);
            from_dev(kc, b.dk, b.nk * es);
            from_dev(vc, b.dv, b.nk * es);
            ok = compare(&c, &b, o, lse, o_ref, lse_ref, why, sizeof why);
            if (ok && (memcmp(kc, b.k, b.nk * es) || memcmp(vc, b.v, b.nk * es))) {
                ok = 0;
                snprintf(why, sizeof why, "the cache after the append differs from the reference's");
            }
        }
        fwt_case(ok, "graph %s (paged ps16, seqlens %d,%d,%d, workspace %zu): %s", r ? "replay" : "warm-up call",
                 b.seqlens[0], b.seqlens[1], b.seqlens[2], ws_bytes, why);
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    cudaFree(ws);
    fw_context_destroy(ref);
    fw_context_destroy(gpu);
    free(o); free(o_ref); free(lse); free(lse_ref); free(kc); free(vc);
    bufs_free(&b);
}

/* ---- out-of-range device values: the call runs, nothing faults, nothing outside the tensors changes ---- */
static void *guarded(size_t bytes, size_t guard)
{
    unsigned char *p = (unsigned char *)to_dev(NULL, bytes + 2 * guard);
    cudaMemset(p, 0x5a, bytes + 2 * guard);
    return p + guard;
}
static int guard_intact(const void *inner, size_t bytes, size_t guard)
{
    unsigned char *h = (unsigned char *)xmalloc(bytes + 2 * guard);
    from_dev(h, (const unsigned char *)inner - guard, bytes + 2 * guard);
    int ok = 1;
    for (size_t i = 0; i < guard && ok; i++) ok = h[i] == 0x5a && h[guard + bytes + i] == 0x5a;
    free(h);
    return ok;
}

/* Compute capability 9.0: where the wgmma kernels run. */
static int device_is_sm90(void)
{
    struct cudaDeviceProp pr;
    return cudaGetDeviceProperties(&pr, 0) == cudaSuccess && pr.major == 9 && pr.minor == 0;
}

static void garbage_values(fw_dtype t, int kind)
{
    const int B = 4;
    sv_case c = kind == K_VARLEN ? mk(t, K_VARLEN, B, 8, 2, 64)
                                 : cache_case(t, B, 8, 2, 64, 0, (const int[]){1, 2, 3, 1}, (const int[]){5, 9, 0, 30}, 16, 256, 1);
    if (kind == K_VARLEN) set_lens(&c, (const int[]){3, 0, 17, 2}, (const int[]){5, 1, 17, 9});
    c.causal = 1;
    sv_bufs b;
    bufs_make(&c, &b);
    bufs_upload(&c, &b);
    const size_t es = esize(t), G = 4096;
    cudaFree(b.do_); cudaFree(b.dlse); cudaFree(b.dk); cudaFree(b.dv);
    b.do_ = guarded(b.no * es, G);
    b.dlse = (float *)guarded(b.nlse * 4, G);
    b.dk = guarded(b.nk * es, G);
    b.dv = guarded(b.nk * es, G);
    const int32_t big = 2147483647, small = -2147483647 - 1;
    const int32_t cu_q[] = {0, -3, 1000000000, 2, small}, cu_k[] = {7, big, -1, 3, 1 << 30};
    const int32_t seq[] = {-5, 256 + 100, big, 7};
    cudaMemcpy(b.dcu_q, cu_q, sizeof cu_q, cudaMemcpyHostToDevice);
    cudaMemcpy(b.dcu_k, cu_k, sizeof cu_k, cudaMemcpyHostToDevice);
    cudaMemcpy(b.dseq, seq, sizeof seq, cudaMemcpyHostToDevice);
    if (b.bt) {
        const int32_t bad[] = {-7, b.num_pages, b.num_pages + 100000, small, big};
        for (int i = 0; i < B * b.bt_stride; i++)
            if (i % 3 != 2) b.bt[i] = bad[i % 5];
        cudaMemcpy(b.dbt, b.bt, sizeof(int32_t) * (size_t)B * b.bt_stride, cudaMemcpyHostToDevice);
    }
    const char *backend = t == FW_F32 ? "cuda-flash-f32" : "cuda-flash";
    /* the serving kernel, forced to split, and the Hopper ragged prefill kernel (its own tile scheduler
     * reads the offsets: parts/scheduler.cuh) */
    static const char *configs[] = {NULL, "srv-m16-bn64-s2-split16", "ws-bm128-bn128-s3-varlen"};
    const int nconfigs = t == FW_F32 ? 1 : kind == K_VARLEN && device_is_sm90() ? 3 : 2;
    for (int k = 0; k < nconfigs; k++) {
        fw_context *gpu = make_ctx(backend, configs[k]);
        const fw_status st = sv_call(gpu, &c, &b, 1, b.do_, b.dlse);
        const cudaError_t ce = cudaDeviceSynchronize();
        const int ok = st == FW_OK && ce == cudaSuccess && guard_intact(b.do_, b.no * es, G) &&
                       guard_intact(b.dlse, b.nlse * 4, G) && guard_intact(b.dk, b.nk * es, G) &&
                       guard_intact(b.dv, b.nk * es, G);
        fwt_case(ok, "%s %s out-of-range offsets%s%s%s: call %s, device %s, guards %s", backend,
                 kind == K_VARLEN ? "varlen" : "cache", kind == K_VARLEN ? "" : ", lengths, pages", configs[k] ? " " : "",
                 configs[k] ? configs[k] : "", st == FW_OK ? "ok" : fw_context_last_error(gpu), cudaGetErrorString(ce),
                 ok ? "intact" : "checked");
        fw_context_destroy(gpu);
        if (ce != cudaSuccess) exit(1);
    }
    /* checked on request (fw_context_set_check_device_values): refused by name before anything runs */
    {
        fw_context *gpu = make_ctx(backend, NULL);
        fw_context_set_check_device_values(gpu, 1);
        unsigned char *before = (unsigned char *)xmalloc(b.no * es), *after = (unsigned char *)xmalloc(b.no * es);
        from_dev(before, b.do_, b.no * es);
        const fw_status st = sv_call(gpu, &c, &b, 1, b.do_, b.dlse);
        const cudaError_t ce = cudaDeviceSynchronize();
        from_dev(after, b.do_, b.no * es);
        const char *msg = fw_context_last_error(gpu);
        const int named = fwt_contains(msg, kind == K_VARLEN ? "cu_seqlens" : "seqlens") || fwt_contains(msg, "block_table");
        fwt_case(st == FW_ERR_INVALID_VALUE && named && ce == cudaSuccess && !memcmp(before, after, b.no * es),
                 "%s %s out-of-range device values with fw_context_set_check_device_values: %s '%s', output %s", backend,
                 kind == K_VARLEN ? "varlen" : "cache", fw_status_string(st), msg,
                 memcmp(before, after, b.no * es) ? "written" : "untouched");
        free(before);
        free(after);
        fw_context_destroy(gpu);
        if (ce != cudaSuccess) exit(1);
    }
    cudaFree((char *)b.do_ - G); cudaFree((char *)b.dlse - G); cudaFree((char *)b.dk - G); cudaFree((char *)b.dv - G);
    b.do_ = b.dk = b.dv = NULL;
    b.dlse = NULL;
    bufs_free(&b);
}

/* ---- ragged prefill on the Hopper wgmma kernel (fwd/heuristics.cu: fw_fwd_varlen_choice) ---- */
static const char *const WS_VARLEN = "ws-bm128-bn128-s3-varlen", *const WS_VARLEN_PP = "ws-bm128-bn128-s3-pp-varlen";


/* The call's output and LSE on the GPU under FW_CUDA_FLASH_CONFIG = config (NULL: the default) into o, lse. */
static int gpu_output(const sv_case *c, sv_bufs *b, const char *config, void *o, float *lse, char *why, size_t len)
{
    fw_context *gpu = make_ctx("cuda-flash", config);
    cudaMemset(b->do_, 0xff, b->no * esize(c->dtype));
    cudaMemset(b->dlse, 0xff, b->nlse * 4);
    const fw_status st = sv_call(gpu, c, b, 1, b->do_, b->dlse);
    const cudaError_t ce = cudaDeviceSynchronize();
    snprintf(why, len, "%s %s", fw_context_last_error(gpu), cudaGetErrorString(ce));
    fw_context_destroy(gpu);
    if (ce != cudaSuccess) exit(1); /* the context is lost */
    if (st != FW_OK) return 0;
    from_dev(o, b->do_, b->no * esize(c->dtype));
    from_dev(lse, b->dlse, b->nlse * 4);
    return 1;
}

/* A ragged prefill call with no configuration runs the wgmma kernel: its output and LSE are bit-identical
 * to the call forced onto ws-bm128-bn128-s3-varlen (deterministic), and a decode-like batch (max_seqlen_q
 * x group <= 64) keeps the serving kernel: its output differs from the forced wgmma kernel's somewhere. */
static void varlen_dispatch(int decode_like)
{
    sv_case c = mk(FW_BF16, K_VARLEN, 4, 16, 2, 128);
    if (decode_like) set_lens(&c, (const int[]){8, 1, 0, 5}, (const int[]){700, 1, 64, 1500});
    else set_lens(&c, (const int[]){200, 1, 0, 77}, (const int[]){200, 1, 64, 77});
    c.causal = 1;
    sv_bufs b;
    bufs_make(&c, &b);
    bufs_upload(&c, &b);
    const size_t es = esize(c.dtype);
    void *o1 = xmalloc(b.no * es), *o2 = xmalloc(b.no * es);
    float *l1 = (float *)xmalloc(b.nlse * 4), *l2 = (float *)xmalloc(b.nlse * 4);
    char why[256] = "";
    int ok = gpu_output(&c, &b, NULL, o1, l1, why, sizeof why) && gpu_output(&c, &b, WS_VARLEN, o2, l2, why, sizeof why);
    const int same = ok && !memcmp(o1, o2, b.no * es) && !memcmp(l1, l2, b.nlse * 4);
    fwt_case(ok && same != decode_like, "dispatch: ragged %s (max_seqlen_q x group %d) %s %s's output%s%s",
             decode_like ? "decode-like batch" : "prefill", max_of(c.lq, c.B) * c.H / c.Hkv,
             same ? "is bit-identical to" : "differs from", WS_VARLEN, ok ? "" : ": ", ok ? "" : why);
    free(o1); free(o2); free(l1); free(l2);
    bufs_free(&b);
}

/* Ragged prefill shapes for the wgmma kernel: lengths 0, 1, primes, exact and one-past tile multiples, one
 * long sequence; causal, windows and none; GQA 1 to 8; head dims padding to 64 and 128; a sequence without
 * queries whose keys and values are Inf / NaN, next to sequences whose last key tile reaches into it. Each
 * runs with no configuration (the default: this kernel where the device is compute capability 9.0) and,
 * on such a device, forced by name (forced: also the ping-pong variant). */
static void varlen_prefill(int quick)
{
    const int sm90 = device_is_sm90();
    if (!sm90) fwt_skip("ragged prefill forced onto %s: the device is not compute capability 9.0", WS_VARLEN);
    for (int i = quick ? 1 : 0; i < (quick ? 2 : 6); i++) {
        sv_case c;
        switch (i) {
        case 0: /* one long sequence among short ones; sequence 6, without queries, holds Inf / NaN keys */
            c = mk(FW_BF16, K_VARLEN, 10, 8, 2, 128);
            set_lens(&c, (const int[]){0, 1, 7, 131, 1031, 2, 0, 13, 257, 128},
                     (const int[]){0, 1, 7, 131, 1031, 2, 61, 13, 257, 128});
            c.causal = 1;
            c.poison_seq = 7;
            break;
        case 1: /* a sliding causal window, more keys than queries and fewer, GQA 1 */
            c = mk(FW_F16, K_VARLEN, 7, 4, 4, 64);
            set_lens(&c, (const int[]){5, 300, 1, 0, 129, 67, 3}, (const int[]){9, 300, 40, 50, 200, 67, 1});
            c.causal = 1;
            c.wl = 37;
            c.poison_seq = 4;
            break;
        case 2: /* no mask: every block's last key tile reaches past its sequence; GQA 8 */
            c = mk(FW_F16, K_VARLEN, 12, 16, 2, 128);
            set_lens(&c, (const int[]){2, 3, 5, 7, 11, 0, 17, 19, 23, 29, 31, 97},
                     (const int[]){2, 3, 5, 7, 11, 60, 17, 19, 23, 29, 31, 97});
            c.poison_seq = 6;
            break;
        case 3: /* a two-sided window; rows that see no key (output 0, LSE -inf); an empty key range */
            c = mk(FW_BF16, K_VARLEN, 3, 4, 2, 64);
            set_lens(&c, (const int[]){64, 500, 3}, (const int[]){100, 450, 0});
            c.wl = 40;
            c.wr = 9;
            break;
        case 4: /* head dims 40 and 112 pad to 64 and 128 */
            c = mk(FW_F16, K_VARLEN, 2, 6, 3, 40);
            set_lens(&c, (const int[]){100, 33}, (const int[]){100, 33});
            c.causal = 1;
            run_case(&c);
            if (sm90) {
                c.config = WS_VARLEN;
                run_case(&c);
            }
            c = mk(FW_BF16, K_VARLEN, 2, 6, 3, 112);
            set_lens(&c, (const int[]){100, 33}, (const int[]){120, 0});
            c.causal = 1;
            break;
        default: { /* 70 sequences: the block's search of the offsets takes two rounds */
            c = mk(FW_BF16, K_VARLEN, 70, 8, 2, 128);
            rng_state = 77;
            for (int s = 0; s < c.B; s++) c.lq[s] = c.lk[s] = s == 9 ? 400 : s == 50 ? 260 : irand(50);
            c.causal = 1;
            break;
        }
        }
        if (!quick) run_case(&c);
        if (sm90) {
            c.config = WS_VARLEN;
            run_case(&c);
            if (!quick && (i == 0 || i == 5)) {
                c.config = WS_VARLEN_PP;
                run_case(&c);
            }
        }
    }
    if (sm90 && !quick) {
        varlen_dispatch(0);
        varlen_dispatch(1);
    }
}

static void run_suite(int quick)
{
    static const int L1[] = {0, 1, 2, 3, 5, 7, 11, 13}, L2[] = {1, 3, 700, 2, 5}, L3[] = {67, 131, 257, 0, 31};
    static const int H1[] = {1, 3, 351, 1, 2}; /* queries of L2's sequences: fewer than keys */
    static const int dims[] = {64, 128, 256, 40, 96}, groups[] = {1, 4, 16, 5, 2};
    /* ragged (varlen) batches */
    for (int i = 0; i < (quick ? 2 : 10); i++) {
        const fw_dtype t = i & 1 ? FW_BF16 : FW_F16;
        const int *L = i % 3 == 0 ? L1 : i % 3 == 1 ? L2 : L3, B = L == L1 ? 8 : 5;
        const int g = groups[i % 5], Hkv = g == 16 ? 1 : 2;
        sv_case c = mk(t, K_VARLEN, B, Hkv * g, Hkv, dims[i % 5]);
        set_lens(&c, L == L2 && i > 4 ? H1 : L, L);
        c.causal = i % 4 != 1;
        if (i % 4 == 2) c.wl = 23;
        if (i % 4 == 3) { c.wl = 40; c.wr = 9; c.causal = 0; }
        if (i == 7) c.scale = 1.0f; /* a sharper softmax */
        run_case(&c);
    }
    varlen_prefill(quick);
    { /* more queries than keys: the first rows see nothing (output 0, LSE -inf) */
        sv_case c = mk(FW_BF16, K_VARLEN, 3, 8, 2, 128);
        set_lens(&c, (const int[]){5, 9, 1}, (const int[]){2, 0, 3});
        c.causal = 1;
        run_case(&c);
    }
    /* decode and chunked prefill against caches (quick: head dims 128 and 256, so that the sanitizers see both) */
    static const int S6[] = {0, 1, 17, 300, 1023, 64};
    static const int ps[] = {0, 1, 16, 256}, caps[] = {1100, 1100, 1104, 1280};
    for (int i = 0; i < (quick ? 3 : 8); i++) {
        sv_case c = cache_case(i & 1 ? FW_F16 : FW_BF16, 6, 16, 2, i % 3 == 2 ? 256 : 128, 1, NULL, S6, ps[i % 4], caps[i % 4],
                               i < 4);
        run_case(&c);
    }
    for (int i = 0; i < (quick ? 1 : 4); i++) { /* chunked prefill: 7 new tokens each, or ragged 1, 4, 0, 9 */
        const int packed = i & 1;
        sv_case c = cache_case(FW_BF16, 4, 8, 2, 64, 7, packed ? (const int[]){1, 4, 0, 9} : NULL,
                               (const int[]){33, 0, 200, 5}, i < 2 ? 16 : 0, 256, 1);
        if (i == 3) c.wl = 50;
        run_case(&c);
    }
    if (!quick) /* GQA ratios 1..16 on decode */
        for (int g = 1; g <= 16; g = g == 2 ? 4 : g == 4 ? 5 : g == 5 ? 8 : 2 * g) {
            sv_case c = cache_case(FW_BF16, 3, 2 * g, 2, 128, 1, NULL, (const int[]){513, 2047, 90}, 16, 2048, 0);
            run_case(&c);
        }
    /* dense forwards shaped like decode take the serving kernels */
    {
        sv_case c = mk(FW_BF16, K_DENSE, 2, 32, 8, 128);
        c.lq[0] = 1; c.lk[0] = quick ? 1000 : 4096;
        run_case(&c);
        if (!quick) {
            c = mk(FW_F16, K_DENSE, 2, 32, 2, 64);
            c.lq[0] = 4; c.lk[0] = 1000; c.causal = 1; /* 64 rows a KV head */
            run_case(&c);
            c = mk(FW_BF16, K_DENSE, 3, 8, 8, 64);
            c.lq[0] = 1; c.lk[0] = 3000;
            run_case(&c);
            c = mk(FW_BF16, K_DENSE, 1, 16, 2, 256);
            c.lq[0] = 2; c.lk[0] = 517; c.causal = 1; c.wl = 100;
            run_case(&c);
            /* head dims below the padded 128 and 64 on blocks of 8 rows: split and not, and under a window */
            c = mk(FW_BF16, K_DENSE, 2, 8, 2, 96);
            c.lq[0] = 1; c.lk[0] = 2000;
            run_case(&c);
            c.config = "srv-m8-bn64-s2-nosplit";
            run_case(&c);
            c = mk(FW_F16, K_DENSE, 3, 5, 1, 40);
            c.lq[0] = 1; c.lk[0] = 700; c.causal = 1; c.wl = 300;
            run_case(&c);
        }
    }
    /* configurations: split-KV forced off and on, blocks per SM capped, other row heights (8 rows: keys as
     * the MMA's M dimension, over several row blocks in the ragged case) */
    static const char *cfgs[] = {"srv-m16-bn64-s2-nosplit", "srv-m16-bn64-s3-split4", "srv-m16-bn64-s2-split16",
                                 "srv-m16-bn64-s3-occ1", "srv-m64-bn64-s2", "srv-m32-bn64-s2-split4", "srv-m16-bn128-s2-occ1-split4",
                                 "srv-m8-bn64-s2-nosplit", "srv-m8-bn64-s3-split4", "srv-m8-bn128-s2-occ1-split4"};
    const int ncfgs = (int)(sizeof cfgs / sizeof cfgs[0]);
    for (int i = 0; i < (quick ? 2 : ncfgs); i++) {
        sv_case c = cache_case(FW_BF16, 3, 16, 2, 128, 1, NULL, (const int[]){700, 0, 1999}, 16, 2048, 1);
        c.config = cfgs[i];
        run_case(&c);
        sv_case v = mk(FW_F16, K_VARLEN, 5, 8, 2, 128);
        set_lens(&v, L2, L2);
        v.causal = 1;
        v.config = cfgs[i];
        if (!quick || i == 1) run_case(&v);
    }
    /* cuda-flash-f32 */
    {
        sv_case c = mk(FW_F32, K_VARLEN, 8, 8, 2, 64);
        set_lens(&c, L1, L1);
        c.causal = 1;
        run_case(&c);
        c = cache_case(FW_F32, 6, 16, 2, 128, 1, NULL, S6, 16, 1104, 1);
        run_case(&c);
        if (!quick) {
            c = cache_case(FW_F32, 4, 8, 2, 40, 7, (const int[]){1, 4, 0, 9}, (const int[]){33, 0, 200, 5}, 0, 256, 1);
            run_case(&c);
            c = cache_case(FW_F32, 3, 16, 2, 256, 1, NULL, (const int[]){700, 0, 1999}, 256, 2048, 0);
            c.config = "srv-f32-split4";
            run_case(&c);
            c.config = "srv-f32-nosplit";
            run_case(&c);
            sv_case v = mk(FW_F32, K_VARLEN, 5, 20, 4, 96);
            set_lens(&v, H1, L2);
            v.causal = 1;
            v.wl = 31;
            run_case(&v);
        }
    }
    paged_decode_suite(quick);
    grown_cache(FW_BF16, 16);
    if (!quick) {
        grown_cache(FW_F16, 0);
        grown_cache(FW_BF16, 1);
        grown_cache(FW_F32, 16);
    }
    graph_replay();
    garbage_values(FW_BF16, K_CACHE);
    garbage_values(FW_F16, K_VARLEN);
    garbage_values(FW_F32, K_CACHE);
}

#endif
