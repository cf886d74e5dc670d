#include <stdio.h>
#include <strings.h>

#include "vramfit.h"

/* Elements per block and bytes per block: 1 and the element size for plain types; the
 * block layout for sub-byte and ggml block-quantized types. */
struct dtype_info {
  const char *name;
  uint32_t block_elems, block_bytes;
};

static const struct dtype_info dtypes[VF_DTYPE_COUNT] = {
    [VF_DTYPE_UNKNOWN] = {"unknown", 0, 0},
    [VF_DTYPE_F32] = {"F32", 1, 4},
    [VF_DTYPE_F16] = {"F16", 1, 2},
    [VF_DTYPE_BF16] = {"BF16", 1, 2},
    [VF_DTYPE_F64] = {"F64", 1, 8},
    [VF_DTYPE_F8_E4M3] = {"F8_E4M3", 1, 1},
    [VF_DTYPE_F8_E5M2] = {"F8_E5M2", 1, 1},
    [VF_DTYPE_F8_E8M0] = {"F8_E8M0", 1, 1},
    [VF_DTYPE_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 1, 1},
    [VF_DTYPE_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 1, 1},
    [VF_DTYPE_F6_E2M3] = {"F6_E2M3", 4, 3},
    [VF_DTYPE_F6_E3M2] = {"F6_E3M2", 4, 3},
    [VF_DTYPE_F4] = {"F4", 2, 1},
    [VF_DTYPE_BOOL] = {"BOOL", 1, 1},
    [VF_DTYPE_I8] = {"I8", 1, 1},
    [VF_DTYPE_U8] = {"U8", 1, 1},
    [VF_DTYPE_I16] = {"I16", 1, 2},
    [VF_DTYPE_U16] = {"U16", 1, 2},
    [VF_DTYPE_I32] = {"I32", 1, 4},
    [VF_DTYPE_U32] = {"U32", 1, 4},
    [VF_DTYPE_I64] = {"I64", 1, 8},
    [VF_DTYPE_U64] = {"U64", 1, 8},
    [VF_DTYPE_C64] = {"C64", 1, 8},
    [VF_DTYPE_Q4_0] = {"Q4_0", 32, 18},
    [VF_DTYPE_Q4_1] = {"Q4_1", 32, 20},
    [VF_DTYPE_Q5_0] = {"Q5_0", 32, 22},
    [VF_DTYPE_Q5_1] = {"Q5_1", 32, 24},
    [VF_DTYPE_Q8_0] = {"Q8_0", 32, 34},
    [VF_DTYPE_Q8_1] = {"Q8_1", 32, 36},
    [VF_DTYPE_Q2_K] = {"Q2_K", 256, 84},
    [VF_DTYPE_Q3_K] = {"Q3_K", 256, 110},
    [VF_DTYPE_Q4_K] = {"Q4_K", 256, 144},
    [VF_DTYPE_Q5_K] = {"Q5_K", 256, 176},
    [VF_DTYPE_Q6_K] = {"Q6_K", 256, 210},
    [VF_DTYPE_Q8_K] = {"Q8_K", 256, 292},
    [VF_DTYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [VF_DTYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [VF_DTYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [VF_DTYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [VF_DTYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [VF_DTYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [VF_DTYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [VF_DTYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [VF_DTYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [VF_DTYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [VF_DTYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [VF_DTYPE_MXFP4] = {"MXFP4", 32, 17},
    [VF_DTYPE_NVFP4] = {"NVFP4", 64, 36},
    [VF_DTYPE_Q1_0] = {"Q1_0", 128, 18},
    [VF_DTYPE_Q2_0] = {"Q2_0", 64, 18},
};

/* Spellings used by torch_dtype in config.json and by our own flags. */
static const struct {
  const char *alias;
  enum vf_dtype t;
} aliases[] = {
    {"float32", VF_DTYPE_F32}, {"fp32", VF_DTYPE_F32},   {"float", VF_DTYPE_F32},
    {"float16", VF_DTYPE_F16}, {"fp16", VF_DTYPE_F16},   {"half", VF_DTYPE_F16},
    {"bfloat16", VF_DTYPE_BF16}, {"float64", VF_DTYPE_F64}, {"int8", VF_DTYPE_I8},
    {"uint8", VF_DTYPE_U8},    {"int32", VF_DTYPE_I32},  {"int64", VF_DTYPE_I64},
};

const char *vf_dtype_name(enum vf_dtype t) {
  return (t >= 0 && t < VF_DTYPE_COUNT) ? dtypes[t].name : "unknown";
}

int vf_dtype_from_name(const char *name, enum vf_dtype *out) {
  for (int t = 1; t < VF_DTYPE_COUNT; t++)
    if (strcasecmp(name, dtypes[t].name) == 0) {
      *out = (enum vf_dtype)t;
      return 0;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (strcasecmp(name, aliases[i].alias) == 0) {
      *out = aliases[i].t;
      return 0;
    }
  return VF_ENOTFOUND;
}

int vf_dtype_bytes(enum vf_dtype t, uint64_t n, uint64_t *out) {
  if (t <= VF_DTYPE_UNKNOWN || t >= VF_DTYPE_COUNT) return VF_EUNSUPPORTED;
  const struct dtype_info *d = &dtypes[t];
  if (n % d->block_elems) return VF_EINVAL;
  uint64_t blocks = n / d->block_elems;
  if (blocks > UINT64_MAX / d->block_bytes) return VF_ERANGE;
  *out = blocks * d->block_bytes;
  return 0;
}
