// flashwatt's dense and ragged attention as C++ autograd nodes for PyTorch (built on demand by _torch_ext.py).
//
// The Python autograd.Function costs more host time to apply and to run backward than SDPA's whole call
// (docs/PERF.md, host overhead); these nodes do what _torch.py's AttentionFunction and VarlenFunction do, in
// C++: forward with the LSE saved, backward through fw_attention_backward / fw_attention_varlen_backward, the LSE
// not differentiable, no double backward. They reach libflashwatt through function pointers that the ctypes
// binding hands over (init), so the extension links nothing of flashwatt and calls the library the package loaded.
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
    decltype(&fw_attention_varlen_forward) varlen_forward = nullptr;
    decltype(&fw_attention_varlen_backward) varlen_backward = nullptr;
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

// Descriptor of t's data with the given logical (B, H, S, D) sizes and strides.
fw_tensor describe_as(const at::Tensor &t, const int64_t (&size)[4], const int64_t (&stride)[4])
{
    fw_tensor d;
    d.data = t.data_ptr();
    d.dtype = dtype_of(t);
    d.device.kind = t.is_cuda() ? FW_DEVICE_CUDA : FW_DEVICE_CPU;
    d.device.index = t.is_cuda() ? t.get_device() : 0;
    for (int i = 0; i < 4; i++) {
        d.size[i] = size[i];
        d.stride[i] = stride[i];
    }
    return d;
}

// A logical (B, H, S, D) tensor with its own strides.
fw_tensor describe(const at::Tensor &t)
{
    return describe_as(t, {t.size(0), t.size(1), t.size(2), t.size(3)}, {t.stride(0), t.stride(1), t.stride(2), t.stride(3)});
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

// ---- what the two autograd nodes share: the call's parameters and context, the backward's errors -------------

int64_t this_thread() { return (int64_t)std::hash<std::thread::id>{}(std::this_thread::get_id()); }

// What a forward keeps for its backward: the tensors (the LSE among them: not differentiable), the parameters
// and where the context is.
void save_forward(torch::autograd::AutogradContext *fctx, const torch::autograd::variable_list &tensors,
                  const at::Tensor &lse, const fw_attn_params &p, int64_t slot, bool is_default)
{
    fctx->save_for_backward(tensors);
    fctx->mark_non_differentiable({lse});
    fctx->set_materialize_grads(false); // no zero tensor for the LSE's (unused) gradient
    fctx->saved_data["scale"] = (double)p.scale;
    fctx->saved_data["causal"] = (bool)p.causal;
    fctx->saved_data["window_left"] = p.window_left;
    fctx->saved_data["window_right"] = p.window_right;
    fctx->saved_data["slot"] = slot;
    fctx->saved_data["is_default"] = is_default;
    fctx->saved_data["thread"] = this_thread();
}

// What a backward starts from: the saved tensors, the parameters, and its context: a context the caller named is
// the backward's too (the binding keeps it alive with the graph); the default one is the forward thread's where
// the backward runs there (CPU tensors), else this thread's own.
struct backward_inputs {
    torch::autograd::variable_list saved; // q, k, v, o, lse first
    const at::Tensor &q, &k, &v, &o, &lse;
    fw_attn_params p;
    fw_context *ctx;

    explicit backward_inputs(torch::autograd::AutogradContext *fctx)
        : saved(fctx->get_saved_variables()), q(saved[0]), k(saved[1]), v(saved[2]), o(saved[3]), lse(saved[4]),
          p(make_params(fctx->saved_data["scale"].toDouble(), fctx->saved_data["causal"].toBool(),
                        fctx->saved_data["window_left"].toInt(), fctx->saved_data["window_right"].toInt()))
    {
        if (fctx->saved_data["is_default"].toBool() && fctx->saved_data["thread"].toInt() != this_thread()) {
            ctx = thread_context();
            TORCH_CHECK(ctx, "flashwatt backward: could not create a context for this thread");
        } else {
            ctx = context_in(fctx->saved_data["slot"].toInt());
        }
    }
};

// The gradient w.r.t. nothing but q, k, v; no double backward (the gradients come from a C call, not from ops
// autograd could differentiate).
bool no_gradient_wanted(const at::Tensor &dout)
{
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "flashwatt attention's backward is not differentiable (no double backward; create_graph=True needs "
                "SDPA's math backend)");
    return !dout.defined(); // only the LSE was used: no gradient flows to q, k, v
}

template <class F> void backward_call(fw_context *ctx, const at::Tensor &q, F fn)
{
    try {
        call_on(ctx, q, fn);
    } catch (const CallFailed &e) {
        if (e.status == FW_ERR_NOT_IMPLEMENTED || e.status == FW_ERR_NO_BACKEND)
            TORCH_CHECK_NOT_IMPLEMENTED(false, "flashwatt backward: ", e.message);
        TORCH_CHECK(false, "flashwatt backward: ", e.message, " (status ", e.status, ")");
    }
}

torch::autograd::variable_list grads_of(size_t inputs, const at::Tensor &dq, const at::Tensor &dk, const at::Tensor &dv)
{
    torch::autograd::variable_list out(inputs);
    out[0] = dq;
    out[1] = dk;
    out[2] = dv;
    return out;
}

// A front end's result: (0, "", o, lse or None), or a failed call's (status, message, None, None) for the binding
// to raise as flashwatt's exception.
template <class F> py::tuple front(F fn)
{
    try {
        at::Tensor o, lse;
        std::tie(o, lse) = fn();
        return py::make_tuple(0, "", o, lse.defined() ? py::cast(lse) : py::none());
    } catch (const CallFailed &e) {
        return py::make_tuple(e.status, e.message, py::none(), py::none());
    }
}

bool wants_grad(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v)
{
    return torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// ---- the dense call --------------------------------------------------------------------------------------------

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
    static constexpr size_t INPUTS = 10; // q, k, v and seven values

    static torch::autograd::variable_list forward(torch::autograd::AutogradContext *fctx, const at::Tensor &q_in,
                                                  const at::Tensor &k_in, const at::Tensor &v_in, double scale, bool causal,
                                                  int64_t window_left, int64_t window_right, bool bshd, int64_t slot,
                                                  bool is_default)
    {
        const fw_attn_params p = make_params(scale, causal, window_left, window_right);
        const at::Tensor q = describable(q_in), k = describable(k_in), v = describable(v_in);
        at::Tensor o, lse;
        std::tie(o, lse) = forward_call(context_in(slot), q, k, v, p, true, bshd);
        save_forward(fctx, {q, k, v, o, lse}, lse, p, slot, is_default);
        return {o, lse};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *fctx,
                                                   torch::autograd::variable_list grads)
    {
        if (no_gradient_wanted(grads[0])) return torch::autograd::variable_list(INPUTS);
        const backward_inputs in(fctx);
        const at::Tensor dout = describable(grads[0]);
        at::Tensor dq = at::empty_like(in.q), dk = at::empty_like(in.k), dv = at::empty_like(in.v);
        const fw_tensor tq = describe(in.q), tk = describe(in.k), tv = describe(in.v), to = describe(in.o),
                        tdo = describe(dout);
        fw_tensor tdq = describe(dq), tdk = describe(dk), tdv = describe(dv);
        backward_call(in.ctx, in.q, [&] {
            return (int)api.backward(in.ctx, &tq, &tk, &tv, &to, in.lse.data_ptr<float>(), &tdo, &tdq, &tdk, &tdv, &in.p);
        });
        return grads_of(INPUTS, dq, dk, dv);
    }
};

// flashwatt.attention's torch path: q, k, v logical (B, H, S, D) of a dtype and device flashwatt takes; the
// context's fw_context* at address slot (is_default: the calling thread's default context). The lse is returned
// where asked for or a gradient is wanted.
py::tuple attention(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, double scale, bool causal,
                    int64_t window_left, int64_t window_right, bool want_lse, bool bshd, int64_t slot, bool is_default)
{
    return front([&]() -> std::tuple<at::Tensor, at::Tensor> {
        if (wants_grad(q, k, v)) {
            auto out = Attention::apply(q, k, v, scale, causal, window_left, window_right, bshd, slot, is_default);
            return {out[0], out[1]};
        }
        return forward_call(context_in(slot), describable(q), describable(k), describable(v),
                            make_params(scale, causal, window_left, window_right), want_lse, bshd);
    });
}

// ---- the ragged (varlen) call ----------------------------------------------------------------------------------

// Descriptor of a packed (total, heads, head_dim) tensor: logical (1, heads, total, head_dim).
fw_tensor describe_packed(const at::Tensor &t)
{
    return describe_as(t, {1, t.size(1), t.size(0), t.size(2)}, {t.size(0) * t.stride(0), t.stride(1), t.stride(0), t.stride(2)});
}

at::Tensor describable_packed(const at::Tensor &t) { return t.stride(2) != 1 && t.size(2) != 1 ? t.contiguous() : t; }

fw_varlen make_seqs(const at::Tensor &cu_q, const at::Tensor &cu_k, int64_t max_q, int64_t max_k)
{
    fw_varlen s;
    s.batch = cu_q.size(0) - 1;
    s.cu_seqlens_q = cu_q.data_ptr<int32_t>();
    s.cu_seqlens_k = cu_k.data_ptr<int32_t>();
    s.max_seqlen_q = max_q;
    s.max_seqlen_k = max_k;
    return s;
}

// (o, lse (heads, total_q) or undefined): o like q.
std::tuple<at::Tensor, at::Tensor> varlen_forward_call(fw_context *ctx, const at::Tensor &q, const at::Tensor &k,
                                                       const at::Tensor &v, const fw_varlen &seqs,
                                                       const fw_attn_params &p, bool want_lse)
{
    at::Tensor o = at::empty_like(q), lse;
    if (want_lse) lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
    const fw_tensor tq = describe_packed(q), tk = describe_packed(k), tv = describe_packed(v);
    fw_tensor to = describe_packed(o);
    call_on(ctx, q, [&] {
        return (int)api.varlen_forward(ctx, &tq, &tk, &tv, &to, want_lse ? lse.data_ptr<float>() : nullptr, &seqs, &p);
    });
    return {o, lse};
}

struct VarlenAttention : public torch::autograd::Function<VarlenAttention> {
    static constexpr size_t INPUTS = 13; // q, k, v, the two offsets and eight values

    static torch::autograd::variable_list forward(torch::autograd::AutogradContext *fctx, const at::Tensor &q_in,
                                                  const at::Tensor &k_in, const at::Tensor &v_in, const at::Tensor &cu_q,
                                                  const at::Tensor &cu_k, int64_t max_q, int64_t max_k, double scale,
                                                  bool causal, int64_t window_left, int64_t window_right, int64_t slot,
                                                  bool is_default)
    {
        const fw_attn_params p = make_params(scale, causal, window_left, window_right);
        const at::Tensor q = describable_packed(q_in), k = describable_packed(k_in), v = describable_packed(v_in);
        at::Tensor o, lse;
        std::tie(o, lse) = varlen_forward_call(context_in(slot), q, k, v, make_seqs(cu_q, cu_k, max_q, max_k), p, true);
        save_forward(fctx, {q, k, v, o, lse, cu_q, cu_k}, lse, p, slot, is_default);
        fctx->saved_data["max_q"] = max_q;
        fctx->saved_data["max_k"] = max_k;
        return {o, lse};
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *fctx,
                                                   torch::autograd::variable_list grads)
    {
        if (no_gradient_wanted(grads[0])) return torch::autograd::variable_list(INPUTS);
        const backward_inputs in(fctx);
        const fw_varlen seqs = make_seqs(in.saved[5], in.saved[6], fctx->saved_data["max_q"].toInt(),
                                         fctx->saved_data["max_k"].toInt());
        const at::Tensor dout = describable_packed(grads[0]);
        at::Tensor dq = at::empty_like(in.q), dk = at::empty_like(in.k), dv = at::empty_like(in.v);
        const fw_tensor tq = describe_packed(in.q), tk = describe_packed(in.k), tv = describe_packed(in.v),
                        to = describe_packed(in.o), tdo = describe_packed(dout);
        fw_tensor tdq = describe_packed(dq), tdk = describe_packed(dk), tdv = describe_packed(dv);
        backward_call(in.ctx, in.q, [&] {
            return (int)api.varlen_backward(in.ctx, &tq, &tk, &tv, &to, in.lse.data_ptr<float>(), &tdo, &tdq, &tdk,
                                            &tdv, &seqs, &in.p);
        });
        return grads_of(INPUTS, dq, dk, dv);
    }
};

// flashwatt.attention_varlen's torch path: q (total_q, H, D), k, v (total_k, H_kv, D) and the int32 offsets
// checked by the binding; context as attention's.
py::tuple attention_varlen(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &cu_q,
                           const at::Tensor &cu_k, int64_t max_q, int64_t max_k, double scale, bool causal,
                           int64_t window_left, int64_t window_right, bool want_lse, int64_t slot, bool is_default)
{
    return front([&]() -> std::tuple<at::Tensor, at::Tensor> {
        if (wants_grad(q, k, v)) {
            auto out = VarlenAttention::apply(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal, window_left,
                                              window_right, slot, is_default);
            return {out[0], out[1]};
        }
        return varlen_forward_call(context_in(slot), describable_packed(q), describable_packed(k), describable_packed(v),
                                   make_seqs(cu_q, cu_k, max_q, max_k),
                                   make_params(scale, causal, window_left, window_right), want_lse);
    });
}

void init(int64_t forward, int64_t backward, int64_t varlen_forward, int64_t varlen_backward, int64_t set_stream,
          int64_t last_error, int64_t create, int64_t destroy, int64_t status_string)
{
    api.forward = reinterpret_cast<decltype(api.forward)>(forward);
    api.backward = reinterpret_cast<decltype(api.backward)>(backward);
    api.varlen_forward = reinterpret_cast<decltype(api.varlen_forward)>(varlen_forward);
    api.varlen_backward = reinterpret_cast<decltype(api.varlen_backward)>(varlen_backward);
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
    m.def("attention_varlen", &attention_varlen, "flashwatt.attention_varlen's torch path with a C++ autograd node");
}
