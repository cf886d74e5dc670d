/* Planning (`vramfit plan`): the fastest setting that fits a GPU, found by calling the
 * estimator over the knobs the user lets change: first those that leave the trained model
 * as it is (the allocator's configuration, the loss kernel, autocast, the optimizer's
 * storage, checkpointing, ZeRO, offload, the micro batch and accumulation), then, where
 * --keep allows and nothing fits without, the method, seq and the LoRA rank, each to the
 * largest value that fits.
 *
 * Fit: an estimate's device peak (what nvidia-smi shows) at most a tier's budget. The safe
 * and balanced tiers judge the high end of the peak's range (vramfit/uncertainty.h), as
 * `estimate` judges a fit; the aggressive tier judges the point estimate: it bets on the
 * estimate being right. Every setting reported, the given one too, carries the estimate
 * vf_estimate() makes of it.
 * Speed: the throughput model of vf_plan_tokens_per_second(). */
#ifndef VRAMFIT_PLAN_H
#define VRAMFIT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/api.h"
#include "vramfit/estimate.h"
#include "vramfit/gpu.h"
#include "vramfit/uncertainty.h"

/* Knobs that must not change (--keep). */
enum vf_keep {
  VF_KEEP_SEQ = 1 << 0, VF_KEEP_PRECISION = 1 << 1, VF_KEEP_OPTIMIZER = 1 << 2,
  VF_KEEP_METHOD = 1 << 3, VF_KEEP_LORA_R = 1 << 4, VF_KEEP_QUANT = 1 << 5,
  VF_KEEP_GRAD_CKPT = 1 << 6, VF_KEEP_SHARD = 1 << 7, VF_KEEP_OFFLOAD = 1 << 8,
  VF_KEEP_ALLOC_CONF = 1 << 9, VF_KEEP_LOSS = 1 << 10, VF_KEEP_IN_BWD = 1 << 11,
  VF_KEEP_CAPACITY = VF_KEEP_METHOD | VF_KEEP_LORA_R | VF_KEEP_QUANT
};

/* A --keep list ("seq,optimizer", "capacity"; "none" keeps nothing) as VF_KEEP_* bits.
 * VF_EINVAL on an unknown name. */
VF_API int vf_keep_parse(const char *list, uint32_t *bits);
/* What `plan --keep LIST` keeps: the knobs listed on top of capacity, which is kept unless
 * the list names "none" ("optimizer": capacity and the optimizer; "none,seq": seq alone).
 * VF_EINVAL on an unknown name. */
VF_API int vf_keep_list(const char *list, uint32_t *bits);

/* Offload bits as --offload spells them: "none", "optimizer", "optimizer,params". */
VF_API void vf_offload_format(uint32_t bits, char *buf, size_t size);
/* A setting's parallel layout: "tp 8 x pp 8 (1f1b) x dp 8", "tp 1 x pp 1 x cp 2 x dp 4". */
VF_API void vf_layout_format(const struct vf_setup *s, char *buf, size_t size);

enum vf_tier { VF_TIER_SAFE, VF_TIER_BALANCED, VF_TIER_AGGRESSIVE, VF_TIER_COUNT };
VF_API const char *vf_tier_name(enum vf_tier t);

struct vf_plan_request {
  const struct vf_model *model;
  const struct vf_profile *profile;
  const struct vf_alloc_conf *alloc;
  const struct vf_gpu_spec *gpu; /* compute rates; zero rates: nominal ones (see .c) */
  struct vf_setup base;          /* the given setting; base.capacity_bytes is the GPU's */
  double safety;                 /* share of capacity the balanced tier may use; 0: 0.90 */
  uint64_t target_effective_batch; /* 0: base batch x accumulation x data-parallel GPUs */
  uint32_t keep;                 /* VF_KEEP_* bits */
  double batch_scale;            /* >0: every estimate's batch-dependent part scaled by it
                                  * (vf_estimate_calibrate, --calibrate); 0: as estimated */
  /* The framework's measured spread; NULL: every tier judges the point estimate. */
  const struct vf_uncertainty_table *uncertainty;
  /* >0: base.gpus is the world size, in nodes of this many GPUs, and the layout (tp, pp,
   * cp, ep, the pipeline schedule) is searched too: tp a divisor of the heads within a node,
   * pp and cp dividing what is left, ep dividing the experts and dp x cp, each schedule the
   * framework runs. 0: the given layout, in nodes of 8. */
  uint64_t gpus_per_node;
  double network_gbps; /* GB/s per GPU between nodes, one direction; 0: 50 (400 Gb/s) */
  /* The PYTORCH_ALLOC_CONF that alloc was parsed from (NULL or "": none); a setting that
   * adds expandable segments or max_split_size_mb to it reports the string it then needs. */
  const char *alloc_conf_text;
};

enum { VF_PLAN_ALLOC_CONF_LEN = 160 };

/* One setting and what it costs. */
struct vf_plan_choice {
  bool found;
  struct vf_setup setup; /* batch, accumulation (never 0), seq and every knob */
  char alloc_conf[VF_PLAN_ALLOC_CONF_LEN]; /* the PYTORCH_ALLOC_CONF it assumes; "" for none */
  uint64_t effective_batch;
  uint64_t peak_device_bytes;
  uint64_t budget_bytes;
  double tokens_per_second;
  struct vf_range device_range; /* of peak_device_bytes; the point at both ends without a spread */
};

enum { VF_PLAN_MAX_CHANGES = 12, VF_PLAN_CHANGE_LEN = 256, VF_PLAN_MAX_ALLOCS = 4 };

/* An allocator configuration weighed for the recommended setting and not taken. */
struct vf_plan_alloc_tried {
  char alloc_conf[VF_PLAN_ALLOC_CONF_LEN];
  uint64_t peak_device_bytes;
  struct vf_range device_range;
};

struct vf_plan_result {
  struct vf_plan_choice tiers[VF_TIER_COUNT]; /* found == false where nothing fits */
  struct vf_plan_choice given;    /* the base setting as estimated; budget: balanced's */
  struct vf_plan_choice smallest; /* the lowest peak seen: what to report when none fits */
  uint64_t target_effective_batch; /* as asked */
  uint64_t estimates;              /* estimator calls the search made */
  /* From the given setting to the balanced tier, most important first. */
  char changes[VF_PLAN_MAX_CHANGES][VF_PLAN_CHANGE_LEN];
  size_t n_changes;
  /* The other allocator configurations weighed for the balanced tier's setting (expandable
   * segments, max_split_size_mb values), each with the peak it gives that setting. */
  struct vf_plan_alloc_tried alloc_tried[VF_PLAN_MAX_ALLOCS];
  size_t n_alloc_tried;
};

/* Searches the allowed knobs. 0 once searched: out->tiers[VF_TIER_BALANCED].found says
 * whether anything fits (out->smallest says how close it came when not); otherwise the
 * estimator's error for an impossible given setting, or VF_EINVAL for a bad request (d
 * says why). Pure. */
VF_API int vf_plan_search(const struct vf_plan_request *r, struct vf_plan_result *out, struct vf_diag *d);

/* Tokens per second across all GPUs of setting s whose estimate is e, in nodes of 8 GPUs
 * with 50 GB/s between nodes:
 *   GPU-seconds per token = (FLOPs per token / (peak FLOP/s x MFU(tokens per micro batch
 *                           per GPU)) + tensor-, context- and pipeline-parallel traffic)
 *                           x the pipeline's bubble + data-parallel traffic per token,
 *   time per token = GPU-seconds per token / GPUs + host transfers of offloading;
 * FLOPs per token: 6P for full training (forward 2P, backward 4P), 4P + 6T with a frozen
 * base (no weight gradients but the adapters' T), + 2P for full recomputation and + 0.5P
 * for selective, + attention 12 x layers x seq x heads x head_dim (4 per forward pass,
 * one more forward when recomputed). Traffic runs over the GPU's links inside a node
 * (gpus.tsv link_GBps) and the network between nodes, never overlapped (src/core/plan/speed.c). */
VF_API double vf_plan_tokens_per_second(const struct vf_model *m, const struct vf_setup *s,
                                        const struct vf_estimate *e, const struct vf_gpu_spec *gpu);

#endif
