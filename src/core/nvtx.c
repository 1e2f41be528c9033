/* NVTX ranges (nvtx.h). The domain is created once; NVTX3 hands back NULL for it when no tool is
 * injected (NVTX_INJECTION64_PATH, which Nsight Systems sets), and then a call costs one branch: no
 * name is formatted and no NVTX function is called. */
#ifdef FW_HAVE_NVTX
#include <pthread.h>
#include <stdio.h>
#include <nvtx3/nvToolsExt.h>
#include "nvtx.h"

static nvtxDomainHandle_t domain;
static pthread_once_t domain_once = PTHREAD_ONCE_INIT;

static void create_domain(void) { domain = nvtxDomainCreateA("flashwatt"); }

static const char *call_name(const fw_problem *p, fw_nvtx_pass pass)
{
    if (pass == FW_NVTX_BACKWARD) return "bwd";
    if (p->kind == FW_CALL_VARLEN) return "varlen";
    if (p->kind == FW_CALL_KVCACHE) return "kvcache";
    return "fwd";
}

int fw_nvtx_push(const char *backend, const fw_problem *p, fw_nvtx_pass pass, const char *config)
{
    pthread_once(&domain_once, create_domain);
    if (!domain) return 0;
    char name[160];
    snprintf(name, sizeof name, "%s %s %s", backend, call_name(p, pass), config && config[0] ? config : "default");
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name;
    nvtxDomainRangePushEx(domain, &a);
    return 1;
}

void fw_nvtx_pop(void) { nvtxDomainRangePop(domain); }
#endif
