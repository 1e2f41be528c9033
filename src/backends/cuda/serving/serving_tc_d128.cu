/* The serving kernel's configurations for head dims up to 128 (serving_tc.cuh): (head dim, rows, keys a
 * tile, stages). serving.cu's heuristic and configuration list pick among them. */
#include "serving_tc.cuh"

extern "C" const fw_srv_tc_variant fw_srv_tc_variants_d128[] = {
    FW_SRV_TC_VARIANT(128, 8, 64, 2),
    FW_SRV_TC_VARIANT(128, 8, 64, 3),
    FW_SRV_TC_VARIANT(128, 8, 64, 4),
    FW_SRV_TC_VARIANT(128, 8, 128, 2),
    FW_SRV_TC_VARIANT(128, 16, 64, 2),
    FW_SRV_TC_VARIANT(128, 16, 64, 3),
    FW_SRV_TC_VARIANT(128, 16, 64, 4),
    FW_SRV_TC_VARIANT(128, 16, 128, 2),
    FW_SRV_TC_VARIANT(128, 32, 64, 2),
    FW_SRV_TC_VARIANT(128, 32, 64, 3),
    FW_SRV_TC_VARIANT(128, 64, 64, 2),
    FW_SRV_TC_VARIANT(128, 64, 64, 3),
};
extern "C" const int fw_srv_tc_nvariants_d128 = (int)(sizeof fw_srv_tc_variants_d128 / sizeof fw_srv_tc_variants_d128[0]);
