/* The parameters as one training setup sees them on one GPU: the model's tensors split by
 * tensor parallelism, quantized or not, plus adapter and task-head tensors. */
#ifndef VF_CORE_PARAMS_H
#define VF_CORE_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit.h"

/* litgpt's adapters prompt the layers from this one on (litgpt/adapter.py Config
 * adapter_start_layer, also adapter_v2's; 2 by default in 0.3 to 0.5.13). */
#define VF_ADAPTER_START_LAYER 2

struct param {
  int32_t layer;       /* -1 outside the blocks */
  uint64_t numel;      /* elements on this GPU */
  uint64_t bytes;      /* stored bytes on this GPU */
  bool trainable;
  bool linear;         /* a block's projection (quantizable, dequantized per matmul) */
  bool quantized;      /* stored in a 4- or 8-bit format */
  uint64_t quant_state_bytes; /* of bytes, the quantized format's state: no tensor of the parameter */
  bool embedding;      /* the token embedding (its gradient comes last in backward) */
  bool expert;         /* a mixture-of-experts expert's weight */
  uint64_t in, out;    /* a matrix's columns and rows on this GPU (a linear's in and out); 0 for others */
};

struct params {
  struct param *v;
  size_t n, cap;
  uint64_t total, trainable;          /* whole-model counts (before any split) */
  uint64_t layers;
  size_t *first; /* first[l + 1]: where layer l begins in v, for l from -1 to layers (the end) */
};

/* Builds the per-GPU parameter list, ordered by layer (-1, the parts outside the blocks,
 * first). */
int params_build(struct params *ps, const struct vf_model *m, const struct vf_setup *s,
                 const struct vf_profile *p, enum vf_task task);
void params_cleanup(struct params *ps);

/* A pipeline stage's share of the parts outside the blocks: the embedding on the first,
 * the rest (final norm, head) on the last; whole-model counts stay. */
void params_keep_root(struct params *ps, bool embedding, bool rest);

/* The index range [*begin, *end) of a layer's parameters. */
void params_layer(const struct params *ps, int32_t layer, size_t *begin, size_t *end);

uint32_t precision_bytes(enum vf_precision p);

/* Bytes per element of the parameters a setup leaves unquantized (quant_rest_fp32). */
uint32_t params_rest_bytes(const struct vf_setup *s, const struct vf_profile *p);

#endif
