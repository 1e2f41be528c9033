/* gpu_serving's head dims that cuda-flash's kernels do not read in place (included once by gpu_serving.c, after
 * its cases). Ragged batches at head dims 3, 59, 111, 200 and 255 run staged (src/backends/cuda/common/stage.h:
 * zero-padded to a multiple of 8, the output copied back), by default and, on compute capability 9.0, on the
 * ragged wgmma kernel by name; dense decode shapes take the serving kernel on the staged problem. Two calls are
 * refused with the reason: a KV-cache call (the cache is appended to and read in place) and a ragged call whose
 * context reserved a workspace (it would allocate). */
#ifndef GPU_SERVING_HEADDIMS_H
#define GPU_SERVING_HEADDIMS_H

/* The call must fail with FW_ERR_UNSUPPORTED, a message holding `must_say`, and leave the output as it was. */
static void refused_case(const sv_case *c, void *workspace, size_t ws_bytes, const char *must_say)
{
    char name[320];
    label(c, name, sizeof name);
    sv_bufs b;
    bufs_make(c, &b);
    bufs_upload(c, &b);
    const size_t es = esize(c->dtype);
    fw_context *ctx = make_ctx("cuda-flash", NULL);
    fw_status st = workspace ? fw_context_set_workspace(ctx, workspace, ws_bytes) : FW_OK;
    void *before = xmalloc(b.no * es), *after = xmalloc(b.no * es);
    cudaMemset(b.do_, 0xff, b.no * es);
    from_dev(before, b.do_, b.no * es);
    if (st == FW_OK) st = sv_call(ctx, c, &b, 1, b.do_, b.dlse);
    const cudaError_t ce = cudaDeviceSynchronize();
    from_dev(after, b.do_, b.no * es);
    const char *why = fw_context_last_error(ctx);
    fwt_case(st == FW_ERR_UNSUPPORTED && strstr(why, must_say) && ce == cudaSuccess && !memcmp(before, after, b.no * es),
             "%s%s: cuda-flash refuses (%s, output untouched): %s", name, workspace ? " with a context workspace" : "",
             fw_status_string(st), why);
    free(before);
    free(after);
    fw_context_destroy(ctx);
    bufs_free(&b);
}

static void staged_head_dims(int quick)
{
    const int sm90 = device_is_sm90();
    static const int dims[] = {59, 111, 3, 200, 255};
    for (int i = 0; i < (quick ? 1 : 5); i++) { /* ragged, Lq != Lk per sequence, an empty sequence, GQA */
        sv_case c = mk(i & 1 ? FW_BF16 : FW_F16, K_VARLEN, 5, 8, i % 3 == 2 ? 1 : 2, dims[i]);
        set_lens(&c, (const int[]){1, 3, 300, 0, 130}, (const int[]){1, 5, 257, 9, 130});
        c.causal = i != 1;
        run_case(&c);
        if (sm90 && dims[i] <= 128) { /* the ragged wgmma records of padded head dims 64 and 128 */
            c.config = WS_VARLEN;
            run_case(&c);
        }
    }
    for (int i = 0; i < (quick ? 1 : 3); i++) { /* dense decode shapes: the serving kernel, staged */
        sv_case c = mk(i == 1 ? FW_F16 : FW_BF16, K_DENSE, 2, 16, 2, dims[i]);
        c.lq[0] = i + 1;
        c.lk[0] = 1000;
        c.causal = i == 2;
        run_case(&c);
    }
    sv_case c = cache_case(FW_F16, 2, 4, 2, 59, 1, NULL, (const int[]){30, 77}, 0, 128, 0);
    refused_case(&c, NULL, 0, "KV-cache");
    void *ws = NULL;
    if (cudaMalloc(&ws, 1 << 20) != cudaSuccess) {
        fwt_case(0, "a device workspace of 1 MiB for the ragged refusal");
        return;
    }
    c = mk(FW_BF16, K_VARLEN, 3, 4, 2, 59);
    set_lens(&c, (const int[]){5, 9, 1}, (const int[]){7, 9, 3});
    refused_case(&c, ws, 1 << 20, "workspace");
    cudaFree(ws);
}

#endif
