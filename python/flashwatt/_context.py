"""flashwatt.Context: backend choice, CPU threads, precision and power policy for calls."""
from __future__ import annotations

import ctypes
import threading
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

    A context is not meant to be shared by threads running calls at the same time (its last error
    and CUDA stream are per context); make one per thread. The module-level functions use a
    per-thread default context.
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
            self._ptr = ctypes.c_void_p()

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
        self._check(self._lib.fw_context_set_threads(self.handle, int(n)))
        self._threads = int(n)

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

    # -- calls --
    def attention(self, q: Any, k: Any, v: Any, **kwargs: Any) -> Any:
        """:func:`flashwatt.attention` on this context."""
        from ._attention import attention

        return attention(q, k, v, context=self, **kwargs)


_tls = threading.local()


def default_context() -> Context:
    """The calling thread's default context (created on first use; backend "auto")."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        ctx = Context()
        _tls.ctx = ctx
    return ctx


__all__ = ["Context", "default_context", "FlashwattError"]
