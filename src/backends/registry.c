/* Every backend, in order of preference: "auto" takes the first one that is usable and supports
 * the problem on the problem's device (until the scheduler's tuning table says otherwise).
 * Adding a backend = one file + one line here. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "backend.h"

extern const fw_backend fw_backend_cpu_flash;
extern const fw_backend fw_backend_cpu_naive;
extern const fw_backend fw_backend_cpu_ref;
#ifdef FW_HAVE_CUDA
extern const fw_backend fw_backend_cuda_flash;
extern const fw_backend fw_backend_cuda_flash_f32;
extern const fw_backend fw_backend_cuda_tiled;
extern const fw_backend fw_backend_cuda_naive;
#endif

static const fw_backend *const registry[] = {
#ifdef FW_HAVE_CUDA
    &fw_backend_cuda_flash,
    &fw_backend_cuda_flash_f32,
    &fw_backend_cuda_tiled,
    &fw_backend_cuda_naive,
#endif
    &fw_backend_cpu_flash,
    &fw_backend_cpu_naive,
    &fw_backend_cpu_ref,
};

int fw_registry_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const fw_backend *fw_registry_get(int index)
{
    if (index < 0 || index >= fw_registry_count()) return NULL;
    return registry[index];
}

const fw_backend *fw_registry_find(const char *name)
{
    if (!name) return NULL;
    for (int i = 0; i < fw_registry_count(); i++)
        if (strcmp(registry[i]->name, name) == 0) return registry[i];
    return NULL;
}

int fw_why(char *buf, size_t len, const char *fmt, ...)
{
    if (buf && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, len, fmt, ap);
        va_end(ap);
    }
    return 0;
}
