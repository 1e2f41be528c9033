#include <stdio.h>
#include <string.h>
#include "sched.h"

static const char *device_kind_name(fw_device_kind k) { return k == FW_DEVICE_CUDA ? "cuda" : "cpu"; }

static void default_config(const fw_backend *b, const fw_problem *p, fw_config *cfg)
{
    fw_config all[FW_MAX_CONFIGS];
    memset(cfg, 0, sizeof *cfg);
    if (b->configs && b->configs(p, all, FW_MAX_CONFIGS) >= 1) *cfg = all[0];
    cfg->precision = p->precision;
}

const fw_backend *fw_sched_choose(const fw_context *ctx, const fw_problem *p, fw_pass pass,
                                  fw_config *cfg, fw_status *st, char *msg, size_t msg_len)
{
    char why[512];
    if (strcmp(ctx->backend, "auto") != 0) {
        const fw_backend *b = fw_registry_find(ctx->backend);
        if (!b) {
            *st = FW_ERR_NO_BACKEND;
            snprintf(msg, msg_len, "backend '%s' is not compiled into this build", ctx->backend);
            return NULL;
        }
        if (b->device != p->device.kind) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' runs on %s but the tensors are on %s", b->name,
                     device_kind_name(b->device), device_kind_name(p->device.kind));
            return NULL;
        }
        if (!b->available(why, sizeof why)) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' is not usable here: %s", b->name, why);
            return NULL;
        }
        if (!b->supports(p, why, sizeof why)) {
            *st = FW_ERR_UNSUPPORTED;
            snprintf(msg, msg_len, "backend '%s' cannot run this problem: %s", b->name, why);
            return NULL;
        }
        if (pass == FW_PASS_BACKWARD && !b->backward) {
            *st = FW_ERR_NOT_IMPLEMENTED;
            snprintf(msg, msg_len, "backend '%s' has no backward pass yet", b->name);
            return NULL;
        }
        default_config(b, p, cfg);
        return b;
    }
    size_t used = (size_t)snprintf(msg, msg_len, "no backend can run this problem:");
    for (int i = 0; i < fw_registry_count(); i++) {
        const fw_backend *b = fw_registry_get(i);
        if (b->device != p->device.kind) continue;
        int ok = b->available(why, sizeof why) && b->supports(p, why, sizeof why);
        if (ok && pass == FW_PASS_BACKWARD && !b->backward) {
            ok = 0;
            snprintf(why, sizeof why, "no backward pass");
        }
        if (ok) {
            default_config(b, p, cfg);
            return b;
        }
        if (used < msg_len) used += (size_t)snprintf(msg + used, msg_len - used, " %s: %s;", b->name, why);
    }
    *st = FW_ERR_NO_BACKEND;
    return NULL;
}
