/* A stand-in for Nsight Systems: an NVTX3 injection library (loaded by NVTX3 from
 * NVTX_INJECTION64_PATH) that writes every range of the flashwatt domain to $FW_NVTX_LOG, one line
 * each: "push <name>" and "pop". */
#include <stdio.h>
#include <stdlib.h>
#include <nvtx3/nvToolsExt.h>

static FILE *out;
static int domain_object;

static nvtxDomainHandle_t NVTX_API domain_create(const char *name)
{
    if (out) fprintf(out, "domain %s\n", name);
    return (nvtxDomainHandle_t)&domain_object;
}

static int NVTX_API range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    if (out) fprintf(out, "push %s\n", d == (nvtxDomainHandle_t)&domain_object && a->messageType == NVTX_MESSAGE_TYPE_ASCII
                                           ? a->message.ascii : "(unexpected domain or message type)");
    return 0;
}

static int NVTX_API range_pop(nvtxDomainHandle_t d)
{
    if (out) fprintf(out, "pop%s\n", d == (nvtxDomainHandle_t)&domain_object ? "" : " (unexpected domain)");
    return 0;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table)
{
    const char *path = getenv("FW_NVTX_LOG");
    out = path ? fopen(path, "w") : NULL;
    if (out) setvbuf(out, NULL, _IOLBF, 0);
    const NvtxExportTableCallbacks *callbacks = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
        size <= NVTX_CBID_CORE2_DomainCreateA)
        return 0;
    *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)range_push;
    *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)range_pop;
    return 1;
}
