/* How the tensor cores read an f32 that is not already a tf32: truncated to its top 19 bits, or rounded?
 * mma.sync m16n8k8 tf32 with one nonzero A (or B) element a row and the other operand 1, so that D = the tensor
 * cores' tf32 of the element; compared with the f32 truncated (bits & 0xffffe000) and rounded to nearest, ties away
 * (cvt.rna: (bits + 0x1000) & 0xffffe000). Decides whether a 3xtf32 big part may be the raw f32 as copied
 * (docs/PERF-gpu-f32.md, "Incomplete / next steps").
 *   built with the CUDA backends (CMake target tf32_input), or: nvcc -gencode=arch=compute_90,code=sm_90 -O3 -o tf32_input
 *   bench/tf32_input.cu && ./tf32_input */
#include <stdint.h>
#include <string.h>

#include "cuda_bench.h"

/* warp w: A[r][0] = x[w][r] (r < 16), B[0][n] = 1 for all n (side 0); or A[r][0] = 1, B[0][n] = x[w][n] (side 1) */
__global__ void probe(const float *x, float *d, int side)
{
    const int lane = threadIdx.x & 31, w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int g = lane >> 2, t4 = lane & 3;
    const float *xw = x + w * 16;
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0;
    if (t4 == 0) { /* column k = 0 of A is held by t4 == 0 in a0 (row g) and a1 (row g + 8) */
        a0 = side ? 1.0f : xw[g];
        a1 = side ? 1.0f : xw[g + 8];
        b0 = side ? xw[g] : 1.0f; /* row k = 0 of B, column n = g */
    }
    float c0 = 0, c1 = 0, c2 = 0, c3 = 0;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
                   "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
    /* D[r][n]: c0 (g, 2 t4), c1 (g, 2 t4 + 1), c2 (g + 8, 2 t4), c3 (g + 8, 2 t4 + 1) */
    float *dw = d + w * 16;
    if (!side && t4 == 0) { dw[g] = c0; dw[g + 8] = c2; }   /* column 0: tf32(x[r]) */
    if (side && g == 0) { dw[2 * t4] = c0; dw[2 * t4 + 1] = c1; } /* row 0: tf32(x[n]), n < 8 */
}

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

int main(void)
{
    const int warps = 4096, n = warps * 16;
    float *hx = (float *)malloc(n * 4), *hd = (float *)malloc(n * 4), *dx, *dd;
    srand(12345);
    for (int i = 0; i < n; i++) { /* random sign, exponent around 1, all 23 mantissa bits random */
        uint32_t m = ((uint32_t)rand() << 8 ^ (uint32_t)rand()) & 0x7fffffu, e = 120u + (uint32_t)(rand() % 16);
        uint32_t u = (uint32_t)(rand() & 1) << 31 | e << 23 | m;
        if (i % 7 == 0) u = (u & ~0x1fffu) | 0x1000u; /* exact ties */
        memcpy(&hx[i], &u, 4);
    }
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&dd, n * 4));
    CK(cudaMemcpy(dx, hx, n * 4, cudaMemcpyHostToDevice));
    for (int side = 0; side < 2; side++) {
        CK(cudaMemset(dd, 0xff, n * 4)); /* poison: NaN */
        probe<<<warps / 4, 128>>>(dx, dd, side);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hd, dd, n * 4, cudaMemcpyDeviceToHost));
        long trunc = 0, rna = 0, both = 0, neither = 0, checked = 0;
        for (int w = 0; w < warps; w++)
            for (int r = 0; r < (side ? 8 : 16); r++) {
                const uint32_t x = bits(hx[w * 16 + r]), d = bits(hd[w * 16 + r]);
                const uint32_t t = x & 0xffffe000u, a = (x + 0x1000u) & 0xffffe000u;
                checked++;
                if (d == t && d == a) both++;
                else if (d == t) trunc++;
                else if (d == a) rna++;
                else if (neither++ < 3) printf("  x %08x: D %08x, trunc %08x, rna %08x\n", x, d, t, a);
            }
        printf("%s operand: %ld values: as truncated %ld, as rounded (rna) %ld, either %ld, neither %ld\n",
               side ? "B" : "A", checked, trunc, rna, both, neither);
    }
    return 0;
}
