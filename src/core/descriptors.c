/* The public API's value constructors: tensor descriptors of contiguous buffers and the default
 * attention parameters and policy. */
#include <stdint.h>
#include <string.h>
#include "flashwatt.h"

static fw_tensor make_tensor(void *data, fw_dtype dtype, fw_device device, const int64_t size[4],
                             const int order[4])
{
    /* order lists dims from outermost to innermost in memory */
    fw_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.dtype = dtype; t.device = device;
    memcpy(t.size, size, sizeof t.size);
    /* sizes are not checked here (the calls validate them): a product beyond int64 saturates, and
     * validation refuses the tensor as too large rather than reading a wrapped stride */
    int64_t s = 1;
    for (int i = 3; i >= 0; i--) {
        t.stride[order[i]] = s;
        if (__builtin_mul_overflow(s, size[order[i]], &s)) s = INT64_MAX;
    }
    return t;
}

fw_tensor fw_tensor_bhsd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                         int64_t seq, int64_t head_dim)
{
    const int64_t size[4] = {batch, heads, seq, head_dim};
    const int order[4] = {0, 1, 2, 3};
    return make_tensor(data, dtype, device, size, order);
}

fw_tensor fw_tensor_bshd(void *data, fw_dtype dtype, fw_device device, int64_t batch, int64_t heads,
                         int64_t seq, int64_t head_dim)
{
    const int64_t size[4] = {batch, heads, seq, head_dim};
    const int order[4] = {0, 2, 1, 3};
    return make_tensor(data, dtype, device, size, order);
}

fw_attn_params fw_attn_params_default(void)
{
    fw_attn_params p;
    p.scale = 0.0f;
    p.causal = 0;
    p.window_left = FW_WINDOW_UNLIMITED;
    p.window_right = FW_WINDOW_UNLIMITED;
    return p;
}

fw_policy fw_policy_default(void)
{
    fw_policy p;
    memset(&p, 0, sizeof p);
    p.objective = FW_OBJECTIVE_FASTEST;
    return p;
}
