/* A program that uses an installed libflashwatt: one causal forward on the CPU, checked against a
 * naive loop in double precision. Build it with CMake (find_package or pkg-config, see CMakeLists.txt)
 * or by hand: cc consumer.c $(pkg-config --cflags --libs flashwatt) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <flashwatt.h>

enum { B = 2, H = 3, L = 37, D = 16 };

/* o[b, h, i, :] = softmax over j <= i of scale * q_i . k_j, times v (bhsd, causal, Lq == Lk) */
static void naive(const float *q, const float *k, const float *v, double *o)
{
    const double scale = 1.0 / sqrt((double)D);
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < L; i++) {
            const float *qi = q + ((size_t)bh * L + i) * D;
            double s[L], m = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                s[j] = 0;
                for (int d = 0; d < D; d++) s[j] += (double)qi[d] * k[((size_t)bh * L + j) * D + d];
                s[j] *= scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - m));
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = 0; j <= i; j++) acc += s[j] * v[((size_t)bh * L + j) * D + d];
                o[((size_t)bh * L + i) * D + d] = acc / sum;
            }
        }
}

int main(void)
{
    const size_t n = (size_t)B * H * L * D;
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v), *o = malloc(n * sizeof *o);
    double *want = malloc(n * sizeof *want);
    if (!q || !k || !v || !o || !want) return 1;
    srand(7);
    for (size_t i = 0; i < n; i++) {
        q[i] = (float)rand() / RAND_MAX - 0.5f;
        k[i] = (float)rand() / RAND_MAX - 0.5f;
        v[i] = (float)rand() / RAND_MAX - 0.5f;
        o[i] = NAN; /* every element must be written */
    }
    fw_context *ctx;
    if (fw_context_create(&ctx) != FW_OK) return 1;
    const fw_device cpu = {FW_DEVICE_CPU, 0};
    fw_tensor tq = fw_tensor_bhsd(q, FW_F32, cpu, B, H, L, D), tk = fw_tensor_bhsd(k, FW_F32, cpu, B, H, L, D);
    fw_tensor tv = fw_tensor_bhsd(v, FW_F32, cpu, B, H, L, D), to = fw_tensor_bhsd(o, FW_F32, cpu, B, H, L, D);
    fw_attn_params p = fw_attn_params_default();
    p.causal = 1;
    fw_status st = fw_attention_forward(ctx, &tq, &tk, &tv, &to, NULL, &p);
    if (st != FW_OK) {
        fprintf(stderr, "fw_attention_forward: %s: %s\n", fw_status_string(st), fw_context_last_error(ctx));
        return 1;
    }
    naive(q, k, v, want);
    double err = 0;
    for (size_t i = 0; i < n; i++) err = isnan(o[i]) ? INFINITY : fmax(err, fabs(o[i] - want[i]));
    /* the f32 contract: within 1e-5 * max|V| of float64, and |V| <= 0.5 here */
    const int ok = err <= 0.5e-5;
    printf("flashwatt %s (header %s): %s, max abs error %.2e against a naive loop: %s\n", fw_version(),
           FW_VERSION_STRING, fw_context_last_backend(ctx), err, ok ? "ok" : "FAIL");
    fw_context_destroy(ctx);
    free(q); free(k); free(v); free(o); free(want);
    return ok ? 0 : 1;
}
