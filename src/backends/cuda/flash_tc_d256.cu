/* cuda-flash instantiations for padded head dim 256 (see flash_tc.cuh). Entry order is
 * irrelevant; cuda_flash.cu picks the default. Fields: D, BM, BN, warps, stages, Q in registers,
 * softmax sub-tile keys. */
#include "flash_tc.cuh"

extern "C" const fw_flash_tc_variant fw_flash_tc_variants_d256[] = {
    FW_FLASH_TC_VARIANT(256, 64, 64, 4, 2, false, 64),
    FW_FLASH_TC_VARIANT(256, 64, 32, 4, 2, false, 32),
    FW_FLASH_TC_VARIANT(256, 128, 64, 8, 2, false, 64),
};
extern "C" const int fw_flash_tc_nvariants_d256 =
    (int)(sizeof fw_flash_tc_variants_d256 / sizeof fw_flash_tc_variants_d256[0]);
