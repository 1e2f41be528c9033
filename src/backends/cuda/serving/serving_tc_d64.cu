/* The serving kernel's configurations for head dims up to 64 (serving_tc.cuh): (head dim, rows, keys a
 * tile, stages). serving.cu's heuristic and configuration list pick among them. */
#include "serving_tc.cuh"

extern "C" const fw_srv_tc_variant fw_srv_tc_variants_d64[] = {
    FW_SRV_TC_VARIANT(64, 8, 128, 2),
    FW_SRV_TC_VARIANT(64, 8, 128, 3),
    FW_SRV_TC_VARIANT(64, 16, 64, 2),
    FW_SRV_TC_VARIANT(64, 16, 64, 3),
    FW_SRV_TC_VARIANT(64, 16, 128, 2),
    FW_SRV_TC_VARIANT(64, 16, 128, 3),
    FW_SRV_TC_VARIANT(64, 32, 64, 2),
    FW_SRV_TC_VARIANT(64, 32, 64, 3),
    FW_SRV_TC_VARIANT(64, 64, 64, 2),
    FW_SRV_TC_VARIANT(64, 64, 64, 3),
};
extern "C" const int fw_srv_tc_nvariants_d64 = (int)(sizeof fw_srv_tc_variants_d64 / sizeof fw_srv_tc_variants_d64[0]);
