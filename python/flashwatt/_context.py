"""flashwatt.Context: backend choice, CPU threads, precision and power policy for calls."""
from __future__ import annotations

import ctypes
import itertools
import sys
import threading
import weakref
from typing import Any, Optional

from . import _lib
from ._lib import FlashwattError


class Context:
    """Owns one C ``fw_context``: which backend runs, CPU threads, the precision of float32
    inputs and the power policy the scheduler optimises for.

    Args:
        objective: ``"fastest"`` (default), ``"min-energy"`` or ``"power-cap"``.
        power_cap_w: power cap in watts (required > 0 with ``"power-cap"``); None = no cap.
        temperature_limit_c: GPU temperature limit in degrees Celsius; None = no limit.
        reduced_precision_budget: when set, float32 inputs may run in a reduced precision mode
            (tf32, 3xtf32, bf16 compute) whose measured relative error is within this budget;
            None (default) = exact float32 only.
        backend: ``"auto"`` (default) or a backend name from :func:`flashwatt.backends`.
        threads: CPU threads for CPU backends; 0 (default) = all online cores.
        precision: force a precision for float32 inputs: ``"exact"`` (default), ``"tf32"``,
            ``"3xtf32"``, ``"bf16"`` (runs only where a backend has that mode).
        memory_budget: device workspace in bytes a call may take beyond its tensors; 0 (default) =
            no budget. With a budget, the CUDA backward of short sequences may store the attention
            matrices instead of recomputing them (the "recompute strategy" knob).
        deterministic: backward only. True: bit-identical gradients run to run (the GPU computes dQ in
            a separate pass without atomics). False (default): whichever is faster; on Hopper that is
            the same separate pass (its wgmma kernels), elsewhere dQ added with atomics, as
            FlashAttention-2. CPU backends are deterministic either way.

    A context serves one call at a time: a call made on it while another thread's call runs raises
    FlashwattError with ``Status.ERR_CONTEXT_BUSY`` (its last error and CUDA stream are per
    context); make one per thread. The module-level functions use a per-thread default context.
    """

    def __init__(
        self,
        objective: str = "fastest",
        power_cap_w: Optional[float] = None,
        reduced_precision_budget: Optional[float] = None,
        backend: str = "auto",
        threads: int = 0,
        temperature_limit_c: Optional[float] = None,
        precision: str = "exact",
        memory_budget: int = 0,
        deterministic: bool = False,
    ):
        lib = _lib.load()
        self._lib = lib
        self._ptr = ctypes.c_void_p()
        st = lib.fw_context_create(ctypes.byref(self._ptr))
        if st != 0:
            raise _lib.error_for(st, "fw_context_create failed")
        self._backend = "auto"
        self._stream = 0
        self._workspace: Any = None
        self._workspace_device: Optional[str] = None
        self._check_device_values = False
        # The number the torch custom ops take for this context (they cannot take a Python object).
        self.op_id = next(_op_ids)
        _by_op_id[self.op_id] = self
        self.backend = backend
        self.threads = threads
        self.precision = precision
        self.memory_budget = memory_budget
        self.deterministic = deterministic
        self.set_policy(objective, power_cap_w, reduced_precision_budget, temperature_limit_c)

    # -- lifetime --
    def close(self) -> None:
        """Free the C context (also done when the object is garbage collected)."""
        ptr = getattr(self, "_ptr", None)
        if ptr is not None and ptr.value:
            self._lib.fw_context_destroy(ptr)
            ptr.value = None  # in place: the torch extension's autograd nodes read the pointer here
            self._workspace = self._workspace_device = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"flashwatt.Context(objective={self.objective!r}, power_cap_w={self.power_cap_w!r}, "
                f"reduced_precision_budget={self.reduced_precision_budget!r}, backend={self.backend!r}, "
                f"threads={self.threads!r}, precision={self.precision!r}, memory_budget={self.memory_budget!r}, "
                f"deterministic={self.deterministic!r})")

    # -- internals --
    @property
    def handle(self) -> ctypes.c_void_p:
        """The ``fw_context*`` (for ctypes calls)."""
        if not self._ptr.value:
            raise ValueError("this flashwatt.Context is closed")
        return self._ptr

    def _check(self, status: int, not_implemented: bool = False) -> None:
        if status != 0:
            msg = self._lib.fw_context_last_error(self.handle)
            raise _lib.error_for(status, msg.decode(errors="replace") if msg else "", not_implemented)

    # -- settings --
    @property
    def backend(self) -> str:
        """``"auto"`` or the backend every call on this context runs on."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"backend must be a str ('auto' or a name from flashwatt.backends()), got {name!r}")
        self._check(self._lib.fw_context_set_backend(self.handle, name.encode()))
        self._backend = name

    @property
    def threads(self) -> int:
        """CPU threads for CPU backends; 0 = all online cores."""
        return self._threads

    @threads.setter
    def threads(self, n: int) -> None:
        n = _lib.check_int(n, "threads", *_lib.INT32_RANGE)
        self._check(self._lib.fw_context_set_threads(self.handle, n))
        self._threads = n

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, p: str) -> None:
        if p not in _lib.PRECISIONS:
            raise ValueError(f"precision {p!r} is not one of {sorted(_lib.PRECISIONS)}")
        self._check(self._lib.fw_context_set_precision(self.handle, _lib.PRECISIONS[p]))
        self._precision = p

    @property
    def memory_budget(self) -> int:
        """Device workspace budget in bytes; 0 = none (the library's defaults)."""
        return self._memory_budget

    @memory_budget.setter
    def memory_budget(self, nbytes: int) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"memory_budget must be an int number of bytes, got {nbytes!r}")
        if nbytes < 0 or nbytes >= 1 << 64:
            raise ValueError(f"memory_budget must be in [0, 2**64) bytes (0 = no budget), got {nbytes}")
        self._check(self._lib.fw_context_set_memory_budget(self.handle, nbytes))
        self._memory_budget = nbytes

    @property
    def deterministic(self) -> bool:
        """Backward without atomics (bit-identical gradients run to run)."""
        return self._deterministic

    @deterministic.setter
    def deterministic(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"deterministic must be True or False, got {on!r}")
        self._check(self._lib.fw_context_set_deterministic(self.handle, int(on)))
        self._deterministic = on

    def set_policy(
        self,
        objective: str = "fastest",
        power_cap_w: Optional[float] = None,
        reduced_precision_budget: Optional[float] = None,
        temperature_limit_c: Optional[float] = None,
    ) -> None:
        """Set the scheduler's policy (see the class docstring for the arguments and units)."""
        if objective not in _lib.OBJECTIVES:
            raise ValueError(f"objective {objective!r} is not one of {list(_lib.OBJECTIVES)}")
        pol = _lib.FwPolicy()
        pol.objective = _lib.OBJECTIVES[objective]
        pol.power_cap_w = float(power_cap_w) if power_cap_w is not None else 0.0
        pol.temperature_limit_c = float(temperature_limit_c) if temperature_limit_c is not None else 0.0
        pol.allow_reduced_precision = 1 if reduced_precision_budget is not None else 0
        pol.error_budget = float(reduced_precision_budget) if reduced_precision_budget is not None else 0.0
        self._check(self._lib.fw_context_set_policy(self.handle, ctypes.byref(pol)))
        self.objective = objective
        self.power_cap_w = power_cap_w
        self.reduced_precision_budget = reduced_precision_budget
        self.temperature_limit_c = temperature_limit_c

    def set_stream(self, cuda_stream: Optional[int]) -> None:
        """cudaStream_t (as an int, e.g. ``torch.cuda.current_stream().cuda_stream``) for CUDA
        backends; None or 0 = the legacy default stream. Torch calls set it for you."""
        stream = int(cuda_stream or 0)
        if stream == self._stream:
            return
        self._check(self._lib.fw_context_set_stream(self.handle, ctypes.c_void_p(stream or None)))
        self._stream = stream

    @property
    def last_backend(self) -> str:
        """Name of the backend that ran the last successful call on this context ("" before any)."""
        return self._lib.fw_context_last_backend(self.handle).decode()

    @property
    def last_error(self) -> str:
        """Message of the last failed call on this context ("" after a success)."""
        return self._lib.fw_context_last_error(self.handle).decode(errors="replace")

    # -- serving: workspace for CUDA graphs, device-value checks --
    @property
    def workspace(self) -> Any:
        """The tensor set by :meth:`set_workspace`, or None."""
        return self._workspace

    def set_workspace(self, workspace: Any) -> None:
        """Device scratch that this context's ragged and KV-cache calls take instead of allocating
        (split-KV partials), so that a call neither allocates nor synchronises and can be captured
        in a CUDA graph. ``workspace``: a contiguous CUDA torch tensor of any dtype, at least
        :meth:`workspace_size` bytes; the context keeps a reference while it is set. Calls on
        another device than the workspace's are refused. None (or an empty tensor) unsets it: calls
        then allocate their scratch per call, stream-ordered."""
        _lib.require_serving(self._lib)
        if workspace is None or _nbytes(workspace) == 0:
            self._check(self._lib.fw_context_set_workspace(self.handle, None, 0))
            self._workspace = self._workspace_device = None
            return
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(workspace, torch.Tensor) or not workspace.is_cuda:
            raise TypeError(f"workspace must be a CUDA torch tensor (device scratch) or None, got "
                            f"{type(workspace).__name__}{' on ' + str(workspace.device) if hasattr(workspace, 'device') else ''}")
        if not workspace.is_contiguous():
            raise ValueError("workspace must be contiguous (the library takes it as one block of bytes)")
        self._check(self._lib.fw_context_set_workspace(self.handle, ctypes.c_void_p(workspace.data_ptr()),
                                                       _nbytes(workspace)))
        self._workspace, self._workspace_device = workspace, str(workspace.device)

    def _check_workspace_device(self, device: Any) -> None:
        """Refuse a CUDA call on another device than the workspace's (its pointer would be foreign)."""
        if self._workspace_device is not None:
            name = str(device)
            if name.startswith("cuda") and name != self._workspace_device:
                raise ValueError(f"this context's workspace is on {self._workspace_device} but the call's "
                                 f"tensors are on {name}; use one context per device")

    def workspace_size(self, max_batch: int, heads: int, kv_heads: int, head_dim: int, max_seqlen_q: int,
                       max_seqlen_k: int, *, dtype: Any, device: Any = "cuda") -> int:
        """Bytes of workspace that ragged and KV-cache calls up to these sizes take at most with this
        context's backend choice (``fw_attention_workspace_size``). ``max_seqlen_q``: new queries per
        sequence (1 for decode); ``max_seqlen_k``: keys per sequence (the cache's capacity).
        ``dtype``: a torch or NumPy dtype or "float32" / "float16" / "bfloat16"; ``device``: "cuda",
        "cuda:N", "cpu" or a torch.device."""
        _lib.require_serving(self._lib)
        qry = _lib.FwWorkspaceQuery()
        qry.device = _device_struct(device)
        qry.dtype = _dtype_code(dtype)
        for name, value in (("max_batch", max_batch), ("heads", heads), ("kv_heads", kv_heads),
                            ("head_dim", head_dim), ("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            setattr(qry, name, _lib.check_int(value, name, *_lib.INT64_RANGE))
        nbytes = ctypes.c_size_t()
        self._check(self._lib.fw_attention_workspace_size(self.handle, ctypes.byref(qry), ctypes.byref(nbytes)))
        return int(nbytes.value)

    @property
    def check_device_values(self) -> bool:
        """Debugging: also copy offsets, cache lengths and block tables on a CUDA device to the host
        and check them there (synchronises; not for graph capture). False by default."""
        return self._check_device_values

    @check_device_values.setter
    def check_device_values(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise TypeError(f"check_device_values must be True or False, got {on!r}")
        _lib.require_serving(self._lib)
        self._check(self._lib.fw_context_set_check_device_values(self.handle, int(on)))
        self._check_device_values = on

    # -- calls --
    def attention(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """:func:`flashwatt.attention` on this context."""
        return _attention_module().attention(q, k, v, context=self, **kwargs)

    def attention_varlen(self, *args: Any, **kwargs: Any) -> Any:
        """:func:`flashwatt.attention_varlen` on this context."""
        from ._serving import attention_varlen

        return attention_varlen(*args, context=self, **kwargs)

    def attention_with_kvcache(self, *args: Any, **kwargs: Any) -> Any:
        """:func:`flashwatt.attention_with_kvcache` on this context."""
        from ._serving import attention_with_kvcache

        return attention_with_kvcache(*args, context=self, **kwargs)


def _attention_module() -> Any:
    return sys.modules["flashwatt._attention"]  # imported by the package; a module attribute lookup per call


def _nbytes(t: Any) -> int:
    n = getattr(t, "nbytes", None)
    return int(n) if n is not None else t.numel() * t.element_size()


_DTYPE_NAMES = {"float32": _lib.F32, "f32": _lib.F32, "float16": _lib.F16, "f16": _lib.F16, "half": _lib.F16,
                "bfloat16": _lib.BF16, "bf16": _lib.BF16}


def _dtype_code(dtype: Any) -> int:
    """fw_dtype of a torch dtype, a NumPy dtype or a name ("torch.float16" and "float16" alike)."""
    name = str(dtype).replace("torch.", "")
    if not isinstance(dtype, str):
        np = sys.modules.get("numpy")
        if np is not None and not hasattr(dtype, "is_floating_point"):  # not a torch dtype
            try:
                name = np.dtype(dtype).name
            except TypeError:
                pass
    if name not in _DTYPE_NAMES:
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    return _DTYPE_NAMES[name]


def _device_struct(device: Any) -> "_lib.FwDevice":
    """fw_device of "cpu", "cuda", "cuda:N" or a torch.device ("cuda" = torch's current device)."""
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return _lib.FwDevice(_lib.DEVICE_CPU, 0)
    if kind == "cuda":
        if not index:
            torch = sys.modules.get("torch")
            return _lib.FwDevice(_lib.DEVICE_CUDA, torch.cuda.current_device() if torch is not None
                                 and torch.cuda.is_available() else 0)
        if index.isdigit():
            return _lib.FwDevice(_lib.DEVICE_CUDA, _lib.check_int(int(index), "device index", *_lib.INT32_RANGE))
    raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, got {device!r}")


_op_ids = itertools.count(1)
_by_op_id: "weakref.WeakValueDictionary[int, Context]" = weakref.WeakValueDictionary()


def context_of_op_id(op_id: int) -> Context:
    """The context a custom op's number names: 0 the calling thread's default context, else the
    ``op_id`` of a live :class:`Context`."""
    if op_id == 0:
        return default_context()
    ctx = _by_op_id.get(op_id)
    if ctx is None:
        raise ValueError(f"flashwatt context #{op_id} no longer exists (a Context passed to a compiled call "
                         "must outlive the compiled function's calls)")
    return ctx


_tls = threading.local()


def default_context() -> Context:
    """The calling thread's default context (created on first use; backend "auto")."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        ctx = Context()
        _tls.ctx = ctx
    return ctx


__all__ = ["Context", "default_context", "FlashwattError"]
