/* cuda-flash instantiations for padded head dim 128 (see flash_tc.cuh). Entry order is
 * irrelevant; cuda_flash.cu picks the default. Fields: D, BM, BN, warps, stages, Q in registers,
 * softmax sub-tile keys; wgmma variants (sm_90a, flash_wg.cuh): D, BN, warpgroups, stages;
 * warp-specialised TMA variants (ws): D, BN, stages, ping-pong. */
#include "flash_tc.cuh"
#include "flash_wg.cuh"

extern "C" const fw_flash_tc_variant fw_flash_tc_variants_d128[] = {
    FW_FLASH_TC_VARIANT(128, 128, 64, 4, 2, false, 64),
    FW_FLASH_TC_VARIANT(128, 128, 64, 4, 2, false, 32),
    FW_FLASH_TC_VARIANT(128, 128, 32, 4, 2, false, 32),
    FW_FLASH_TC_VARIANT(128, 128, 64, 8, 2, true, 64),
    FW_FLASH_TC_VARIANT(128, 64, 64, 4, 2, true, 64),
    FW_FLASH_WG_VARIANT(128, 128, 2, 3),
    FW_FLASH_WG_VARIANT(128, 64, 3, 3),
    FW_FLASH_WS_VARIANT(128, 128, 3, false),
    FW_FLASH_WS_VARIANT(128, 128, 3, true),
};
extern "C" const int fw_flash_tc_nvariants_d128 =
    (int)(sizeof fw_flash_tc_variants_d128 / sizeof fw_flash_tc_variants_d128[0]);
