/* The public API's names: version, status and dtype strings. */
#include "flashwatt.h"

const char *fw_version(void) { return FW_VERSION_STRING; }

const char *fw_status_string(fw_status s)
{
    switch (s) {
    case FW_OK: return "ok";
    case FW_ERR_NULL_ARGUMENT: return "a required argument is NULL";
    case FW_ERR_INVALID_SHAPE: return "invalid shape";
    case FW_ERR_INVALID_STRIDE: return "invalid stride";
    case FW_ERR_DTYPE_MISMATCH: return "dtype mismatch";
    case FW_ERR_DEVICE_MISMATCH: return "device mismatch";
    case FW_ERR_OVERLAP: return "output overlaps another tensor";
    case FW_ERR_INVALID_VALUE: return "invalid parameter value";
    case FW_ERR_UNSUPPORTED: return "the backend does not support this problem";
    case FW_ERR_NO_BACKEND: return "no backend can run this problem";
    case FW_ERR_DEVICE: return "CUDA error";
    case FW_ERR_OUT_OF_MEMORY: return "out of memory";
    case FW_ERR_NOT_IMPLEMENTED: return "not implemented";
    case FW_ERR_INTERNAL: return "internal error";
    case FW_ERR_CONTEXT_BUSY: return "the context is in use by another thread";
    }
    return "unknown status";
}

const char *fw_dtype_name(fw_dtype t)
{
    switch (t) {
    case FW_F32: return "f32";
    case FW_F16: return "f16";
    case FW_BF16: return "bf16";
    }
    return "unknown";
}
