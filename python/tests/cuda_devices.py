"""Where the torch tests run on CUDA: why the CUDA cases skip (None where they run), their mark, and the
device parameters of a test that runs on the CPU and, where it can, on CUDA."""
import pytest

import flashwatt as fw


def cuda_skip_reason():
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if fw.cuda_device_count() == 0:
        return "libflashwatt sees no CUDA device (built without CUDA?)"
    if not any(b.device == "cuda" and b.usable for b in fw.backends()):
        return "libflashwatt has no usable CUDA backend"
    return None


CUDA_SKIP = cuda_skip_reason()
cuda_only = pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))
DEVICES = ["cpu", pytest.param("cuda", marks=cuda_only)]
