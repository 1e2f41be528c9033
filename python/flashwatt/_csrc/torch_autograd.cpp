// flashwatt's dense attention as a C++ autograd node for PyTorch (built on demand by _torch_ext.py).
//
// The Python autograd.Function costs more host time to apply and to run backward than SDPA's whole call
// (docs/PERF.md, host overhead); this node does the same as _torch.py's AttentionFunction in C++: forward
// with the LSE saved, backward through fw_attention_backward, the LSE not differentiable, no double
// backward. It reaches libflashwatt through function pointers that the ctypes binding hands over (init),
// so it links nothing of flashwatt and always calls the library the package loaded.
#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdint>
#include <string>
#include <thread>
#include <tuple>

#include "flashwatt.h"

namespace {

struct Api {
    decltype(&fw_attention_forward) forward = nullptr;
    decltype(&fw_attention_backward) backward = nullptr;
    decltype(&fw_context_set_stream) set_stream = nullptr;
    decltype(&fw_context_last_error) last_error = nullptr;
    decltype(&fw_context_create) create = nullptr;
    decltype(&fw_context_destroy) destroy = nullptr;
    decltype(&fw_status_string) status_string = nullptr;
};
Api api;

// A failed C call: its status and the context's message (the binding raises flashwatt's exception).
struct CallFailed {
    int status;
    std::string message;
};

fw_dtype dtype_of(const at::Tensor &t)
{
    switch (t.scalar_type()) {
    case at::kFloat: return FW_F32;
    case at::kHalf: return FW_F16;
    case at::kBFloat16: return FW_BF16;
    default: TORCH_CHECK(false, "flashwatt takes float32, float16 or bfloat16 tensors, got ", t.scalar_type());
    }
}

// Descriptor of a logical (B, H, S, D) tensor with its own strides.
fw_tensor describe(const at::Tensor &t)
{
    fw_tensor d;
    d.data = t.data_ptr();
    d.dtype = dtype_of(t);
    d.device.kind = t.is_cuda() ? FW_DEVICE_CUDA : FW_DEVICE_CPU;
    d.device.index = t.is_cuda() ? t.get_device() : 0;
    for (int i = 0; i < 4; i++) {
        d.size[i] = t.size(i);
        d.stride[i] = t.stride(i);
    }
    return d;
}

// t where the C API takes its strides (head_dim stride 1), else a contiguous copy.
at::Tensor describable(const at::Tensor &t)
{
    return t.stride(3) != 1 && t.size(3) != 1 ? t.contiguous() : t;
}

// The context of a backward that runs on another thread than its forward: a context of its own, as
// Python's default context of that thread would be (a context serves one call at a time).
fw_context *thread_context()
{
    struct Holder {
        fw_context *ctx = nullptr;
        ~Holder()
        {
            if (ctx) api.destroy(ctx);
        }
    };
    thread_local Holder h;
    if (!h.ctx && api.create(&h.ctx) != 0) h.ctx = nullptr;
    return h.ctx;
}

// The GIL released for the length of a C call where this thread holds it, as the ctypes binding does (a
// CPU backend computes inside the call).
struct ReleaseGilIfHeld {
    PyThreadState *state = nullptr;
    ReleaseGilIfHeld()
    {
        if (PyGILState_Check()) state = PyEval_SaveThread();
    }
    ~ReleaseGilIfHeld()
    {
        if (state) PyEval_RestoreThread(state);
    }
};

// Calls fn(ctx) on t's device with torch's current stream there handed to the context.
template <class F> void call_on(fw_context *ctx, const at::Tensor &t, F fn)
{
    const ReleaseGilIfHeld unlocked;
    int st = 0;
    if (t.is_cuda()) {
        const c10::DeviceGuard guard(t.device());
        const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device());
        st = api.set_stream(ctx, stream.native_handle());
        if (st == 0) st = fn();
    } else {
        st = fn();
    }
    if (st != 0) {
        const char *msg = api.last_error(ctx);
        throw CallFailed{st, msg && *msg ? msg : api.status_string((fw_status)st)};
    }
}

// The context whose fw_context* the binding keeps at address slot (its ctypes pointer: 0 once closed).
fw_context *context_in(int64_t slot)
{
    fw_context *ctx = *reinterpret_cast<fw_context *const *>(slot);
    TORCH_CHECK_VALUE(ctx, "this flashwatt.Context is closed");
    return ctx;
}

fw_attn_params make_params(double scale, bool causal, int64_t window_left, int64_t window_right)
{
    fw_attn_params p;
    p.scale = (float)scale;
    p.causal = causal ? 1 : 0;
    p.window_left = window_left;
    p.window_right = window_right;
    return p;
}

// (o, lse): o like the user's q (bshd: allocated in that layout, returned as the logical view).
std::tuple<at::Tensor, at::Tensor> forward_call(fw_context *ctx, const at::Tensor &q, const at::Tensor &k,
                                                const at::Tensor &v, const fw_attn_params &p, bool want_lse, bool bshd)
{
    at::Tensor o = bshd ? at::empty_like(q.transpose(1, 2)).transpose(1, 2) : at::empty_like(q);
    at::Tensor lse;
    if (want_lse) lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    const fw_tensor dq = describe(q), dk = describe(k), dv = describe(v);
    fw_tensor d_o = describe(o);
    call_on(ctx, q, [&] { return (int)api.forward(ctx, &dq, &dk, &dv, &d_o, want_lse ? lse.data_ptr<float>() : nullptr, &p); });
    return {o, lse};
}

struct Attention : public torch::autograd::Function<Attention> {
    static torch::autograd::variable_list forward(torch::autograd::AutogradContext *fctx, const at::Tensor &q_in,
                                                  const at::Tensor &k_in, const at::Tensor &v_in, double scale, bool causal,
                                                  int64_t window_left, int64_t window_right, bool bshd, int64_t slot,
                                                  bool is_default)
    {
        fw_context *ctx = context_in(slot);
        const fw_attn_params p = make_params(scale, causal, window_left, window_right);
        const at::Tensor q = describable(q_in), k = describable(k_in), v = describable(v_in);
        at::Tensor o, lse;
        std::tie(o, lse) = forward_call(ctx, q, k, v, p, true, bshd);
        fctx->save_for_backward({q, k, v, o, lse});
        fctx->saved_data["scale"] = scale;
        fctx->saved_data["causal"] = causal;
        fctx->saved_data["window_left"] = window_left;
        fctx->saved_data["window_right"] = window_right;
        fctx->saved_data["slot"] = slot;
        fctx->saved_data["is_default"] = is_default;
        fctx->saved_data["thread"] = (int64_t)std::hash<std::thread::id>{}(std::this_thread::get_id());
        fctx->mark_non_differentiable({lse});
        fctx->set_materialize_grads(false); // no zero tensor for the LSE's (unused) gradient
        return {o, lse};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *fctx,
                                                   torch::autograd::variable_list grads)
    {
        const at::Tensor &dout_in = grads[0];
        torch::autograd::variable_list none(10); // q, k, v and seven non-tensor arguments
        if (!dout_in.defined()) return none; // only the LSE was used: no gradient flows to q, k, v
        TORCH_CHECK(!torch::GradMode::is_enabled(),
                    "flashwatt attention's backward is not differentiable (no double backward; create_graph=True "
                    "needs SDPA's math backend)");
        const auto saved = fctx->get_saved_variables();
        const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
        const fw_attn_params p =
            make_params(fctx->saved_data["scale"].toDouble(), fctx->saved_data["causal"].toBool(),
                        fctx->saved_data["window_left"].toInt(), fctx->saved_data["window_right"].toInt());
        // A context the caller named is the backward's too (the binding keeps it alive with the graph); the
        // default one is the forward thread's where the backward runs there (CPU tensors), else this thread's.
        const bool same_thread =
            fctx->saved_data["thread"].toInt() == (int64_t)std::hash<std::thread::id>{}(std::this_thread::get_id());
        fw_context *ctx = nullptr;
        if (fctx->saved_data["is_default"].toBool() && !same_thread) {
            ctx = thread_context();
            TORCH_CHECK(ctx, "flashwatt backward: could not create a context for this thread");
        } else {
            ctx = context_in(fctx->saved_data["slot"].toInt());
        }
        const at::Tensor dout = describable(dout_in);
        at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
        const fw_tensor tq = describe(q), tk = describe(k), tv = describe(v), to = describe(o), tdo = describe(dout);
        fw_tensor tdq = describe(dq), tdk = describe(dk), tdv = describe(dv);
        try {
            call_on(ctx, q, [&] {
                return (int)api.backward(ctx, &tq, &tk, &tv, &to, lse.data_ptr<float>(), &tdo, &tdq, &tdk, &tdv, &p);
            });
        } catch (const CallFailed &e) {
            if (e.status == FW_ERR_NOT_IMPLEMENTED || e.status == FW_ERR_NO_BACKEND)
                TORCH_CHECK_NOT_IMPLEMENTED(false, "flashwatt backward: ", e.message);
            TORCH_CHECK(false, "flashwatt backward: ", e.message, " (status ", e.status, ")");
        }
        torch::autograd::variable_list out(10);
        out[0] = dq;
        out[1] = dk;
        out[2] = dv;
        return out;
    }
};

// flashwatt.attention's torch path: q, k, v logical (B, H, S, D) of a dtype and device flashwatt takes; the context's
// fw_context* at address slot (is_default: the calling thread's default context). Returns (status, message, o, lse): status 0 and the outputs (lse None unless asked
// for or a gradient is wanted), or the failed call's status and message for the binding to raise.
py::tuple attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, double scale, bool causal,
                    int64_t window_left, int64_t window_right, bool want_lse, bool bshd, int64_t slot, bool is_default)
{
    try {
        const bool grad = torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
        if (grad) {
            auto out = Attention::apply(q, k, v, scale, causal, window_left, window_right, bshd, slot, is_default);
            return py::make_tuple(0, "", out[0], out[1]);
        }
        at::Tensor o, lse;
        std::tie(o, lse) = forward_call(context_in(slot), describable(q), describable(k), describable(v),
                                        make_params(scale, causal, window_left, window_right), want_lse, bshd);
        return py::make_tuple(0, "", o, want_lse ? py::cast(lse) : py::none());
    } catch (const CallFailed &e) {
        return py::make_tuple(e.status, e.message, py::none(), py::none());
    }
}

void init(int64_t forward, int64_t backward, int64_t set_stream, int64_t last_error, int64_t create, int64_t destroy,
          int64_t status_string)
{
    api.forward = reinterpret_cast<decltype(api.forward)>(forward);
    api.backward = reinterpret_cast<decltype(api.backward)>(backward);
    api.set_stream = reinterpret_cast<decltype(api.set_stream)>(set_stream);
    api.last_error = reinterpret_cast<decltype(api.last_error)>(last_error);
    api.create = reinterpret_cast<decltype(api.create)>(create);
    api.destroy = reinterpret_cast<decltype(api.destroy)>(destroy);
    api.status_string = reinterpret_cast<decltype(api.status_string)>(status_string);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("init", &init, "hand over libflashwatt's entry points (addresses from the ctypes binding)");
    m.def("attention", &attention, "flashwatt.attention's torch path with a C++ autograd node");
}
