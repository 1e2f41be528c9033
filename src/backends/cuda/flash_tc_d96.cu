/* cuda-flash instantiations for padded head dim 96 (see flash_tc.cuh). Entry order is
 * irrelevant; cuda_flash.cu picks the default. Fields: D, BM, BN, warps, stages, Q in registers,
 * softmax sub-tile keys. */
#include "flash_tc.cuh"

extern "C" const fw_flash_tc_variant fw_flash_tc_variants_d96[] = {
    FW_FLASH_TC_VARIANT(96, 128, 64, 4, 2, false, 64),
    FW_FLASH_TC_VARIANT(96, 64, 64, 4, 2, true, 64),
};
extern "C" const int fw_flash_tc_nvariants_d96 =
    (int)(sizeof fw_flash_tc_variants_d96 / sizeof fw_flash_tc_variants_d96[0]);
