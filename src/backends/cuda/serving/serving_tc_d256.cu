/* The serving kernel's configurations for head dims up to 256 (serving_tc.cuh): (head dim, rows, keys a
 * tile, stages). serving.cu's heuristic and configuration list pick among them. */
#include "serving_tc.cuh"

extern "C" const fw_srv_tc_variant fw_srv_tc_variants_d256[] = {
    FW_SRV_TC_VARIANT(256, 8, 64, 2),
    FW_SRV_TC_VARIANT(256, 8, 64, 3),
    FW_SRV_TC_VARIANT(256, 16, 64, 2),
    FW_SRV_TC_VARIANT(256, 16, 64, 3),
    FW_SRV_TC_VARIANT(256, 32, 64, 2),
    FW_SRV_TC_VARIANT(256, 64, 32, 2),
    FW_SRV_TC_VARIANT(256, 64, 32, 3),
};
extern "C" const int fw_srv_tc_nvariants_d256 = (int)(sizeof fw_srv_tc_variants_d256 / sizeof fw_srv_tc_variants_d256[0]);
