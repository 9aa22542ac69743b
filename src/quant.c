/* quant: the type traits table (ggml type ids, block sizes, names). */
#include "quant.h"
#include <string.h>
#include <strings.h>

static const hachi_type_traits traits[HACHI_TYPE_COUNT] = {
    [HACHI_TYPE_F32]     = {"f32", 1, 4, true},
    [HACHI_TYPE_F16]     = {"f16", 1, 2, true},
    [HACHI_TYPE_Q4_0]    = {"q4_0", QK4_0, sizeof(block_q4_0), true},
    [HACHI_TYPE_Q4_1]    = {"q4_1", QK4_1, sizeof(block_q4_1), true},
    [HACHI_TYPE_Q5_0]    = {"q5_0", QK5_0, sizeof(block_q5_0), true},
    [HACHI_TYPE_Q5_1]    = {"q5_1", 32, 24, false},
    [HACHI_TYPE_Q8_0]    = {"q8_0", QK8_0, sizeof(block_q8_0), true},
    [HACHI_TYPE_Q8_1]    = {"q8_1", 32, sizeof(block_q8_1), false},
    [HACHI_TYPE_Q2_K]    = {"q2_K", QK_K, 84, false},
    [HACHI_TYPE_Q3_K]    = {"q3_K", QK_K, 110, false},
    [HACHI_TYPE_Q4_K]    = {"q4_K", QK_K, sizeof(block_q4_K), true},
    [HACHI_TYPE_Q5_K]    = {"q5_K", QK_K, sizeof(block_q5_K), true},
    [HACHI_TYPE_Q6_K]    = {"q6_K", QK_K, sizeof(block_q6_K), true},
    [HACHI_TYPE_Q8_K]    = {"q8_K", QK_K, sizeof(block_q8_K), false},
    [HACHI_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 66, false},
    [HACHI_TYPE_IQ2_XS]  = {"iq2_xs", QK_K, 74, false},
    [HACHI_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 98, false},
    [HACHI_TYPE_IQ1_S]   = {"iq1_s", QK_K, 50, false},
    [HACHI_TYPE_IQ4_NL]  = {"iq4_nl", 32, 18, false},
    [HACHI_TYPE_IQ3_S]   = {"iq3_s", QK_K, 110, false},
    [HACHI_TYPE_IQ2_S]   = {"iq2_s", QK_K, 82, false},
    [HACHI_TYPE_IQ4_XS]  = {"iq4_xs", QK_K, 136, false},
    [HACHI_TYPE_I8]      = {"i8", 1, 1, false},
    [HACHI_TYPE_I16]     = {"i16", 1, 2, false},
    [HACHI_TYPE_I32]     = {"i32", 1, 4, false},
    [HACHI_TYPE_I64]     = {"i64", 1, 8, false},
    [HACHI_TYPE_F64]     = {"f64", 1, 8, false},
    [HACHI_TYPE_IQ1_M]   = {"iq1_m", QK_K, 56, false},
    [HACHI_TYPE_BF16]    = {"bf16", 1, 2, true},
    [HACHI_TYPE_TQ1_0]   = {"tq1_0", QK_K, 54, false},
    [HACHI_TYPE_TQ2_0]   = {"tq2_0", QK_K, 66, false},
    [HACHI_TYPE_MXFP4]   = {"mxfp4", 32, 17, false},
};

const hachi_type_traits *hachi_type_info(uint32_t type) {
    return type < HACHI_TYPE_COUNT && traits[type].name ? &traits[type] : NULL;
}

const char *hachi_type_name(uint32_t type) {
    const hachi_type_traits *t = hachi_type_info(type);
    return t ? t->name : "unknown";
}

int hachi_type_from_name(const char *name) {
    for (int i = 0; i < HACHI_TYPE_COUNT; i++)
        if (traits[i].name && !strcasecmp(traits[i].name, name)) return i;
    return -1;
}

uint64_t hachi_row_size(uint32_t type, int64_t n) {
    const hachi_type_traits *t = hachi_type_info(type);
    if (!t || n < 0 || n % t->blck_size) return 0;
    return (uint64_t)(n / t->blck_size) * (uint64_t)t->type_size;
}
