/* Workloads (`workload.yaml`): a training run vramfit knows by its parts rather than by a
 * catalogue model. A workload names its model (encoders with their method, LoRA and
 * checkpointing, a mixture-of-experts fusion, heads; or a Python factory that `vramfit
 * trace --workload` measures), what one sample is (sequences per anchor and tokens per
 * sequence as expressions of the knobs, the loss's extra tensors), the knobs with their
 * ranges and priorities, and the curriculum's stages with their files. `vramfit plan
 * --workload` plans every stage; `vramfit apply --plan` writes the plan where the
 * workload says each value lives. */
#ifndef VRAMFIT_WORKLOAD_H
#define VRAMFIT_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramfit/alloc.h"
#include "vramfit/api.h"
#include "vramfit/error.h"
#include "vramfit/estimate.h"
#include "vramfit/model.h"
#include "vramfit/uncertainty.h"

enum {
  VF_WL_NAME = 48,
  VF_WL_PATH = 512,
  VF_WL_MAX_KNOBS = 12,  /* batch, accumulation and up to ten of the user's own */
  VF_WL_MAX_DEFINES = 12,
  VF_WL_MAX_ENCODERS = 8,
  VF_WL_MAX_HEADS = 4,
  VF_WL_MAX_TENSORS = 6,
  VF_WL_MAX_DIMS = 4,
  VF_WL_MAX_STAGES = 16,
  VF_WL_MAX_POINTS = 12,
  VF_WL_EXPR_CODE = 48, /* operations of one compiled expression */
  VF_WL_EXPR_TEXT = 160
};

/* ---- expressions of the knobs ("1 + n_positives + n_negatives") ----
 * Whole numbers, names (batch, the knobs, the workload's defines), + - * /, parentheses,
 * min(a, b) and max(a, b); / divides rounding down. Compiled into postfix code. */
enum vf_wl_op { VF_WL_NUM, VF_WL_SYM, VF_WL_ADD, VF_WL_SUB, VF_WL_MUL, VF_WL_DIV, VF_WL_MIN, VF_WL_MAX };

struct vf_wl_code {
  uint8_t op;    /* enum vf_wl_op */
  uint8_t sym;   /* VF_WL_SYM: a knob index, or VF_WL_MAX_KNOBS + a define's index */
  int64_t num;   /* VF_WL_NUM */
};

struct vf_wl_expr {
  struct vf_wl_code code[VF_WL_EXPR_CODE];
  uint8_t n;                   /* 0: not given */
  char text[VF_WL_EXPR_TEXT];  /* as written, for messages */
  int line, col;
};

/* ---- the spec ---- */
enum vf_wl_role { VF_WL_KNOB, VF_WL_BATCH, VF_WL_ACCUMULATION };

struct vf_wl_knob {
  char name[VF_WL_NAME];
  enum vf_wl_role role;
  char path[VF_WL_PATH]; /* dotted path of the value in its file ("" when nowhere) */
  bool in_stage;         /* the value lives in each stage's file, else in the main config */
  int64_t min, max;
  int priority;          /* lower first; batch 0 unless given, knobs after it in order */
  int line;
};

struct vf_wl_define {
  char name[VF_WL_NAME];
  struct vf_wl_expr expr;
};

struct vf_wl_encoder {
  char name[VF_WL_NAME];
  char model[VF_WL_PATH]; /* catalogue name, config.json or folder (relative to the workload) */
  enum vf_method method;  /* full, lora or dora */
  uint64_t lora_r;
  uint32_t lora_targets;
  enum vf_ckpt grad_ckpt;
  struct vf_wl_expr tokens; /* tokens per sequence; not given: the sample's */
  int line;
};

/* Mixture-of-experts fusion of the encoders' pooled outputs, concatenated ([sequences,
 * sum of the encoders' hidden sizes]): a router picks top_k of the experts for each
 * sequence; each expert is a two-layer MLP of width hidden to out features. */
struct vf_wl_moe {
  uint64_t experts, top_k, hidden, out; /* experts 0: no fusion */
  int line;
};

struct vf_wl_head {
  char name[VF_WL_NAME];
  uint64_t out; /* a linear layer from the previous part's width to out features */
  int line;
};

/* A tensor the loss makes beyond the model's outputs (InfoNCE's similarity matrix, anchors
 * x candidates): copies of it live from the loss forward into its backward, whose
 * gradient adds as many again while it runs. */
struct vf_wl_tensor {
  char name[VF_WL_NAME];
  struct vf_wl_expr dims[VF_WL_MAX_DIMS];
  uint32_t ndim;
  uint32_t elem_bytes;
  uint32_t copies;
  int line;
};

struct vf_wl_bound {
  bool set;
  int64_t min, max;
};

struct vf_wl_stage {
  char name[VF_WL_NAME];
  char file[VF_WL_PATH]; /* relative to the workload ("" when the stage has none) */
  struct vf_wl_bound bounds[VF_WL_MAX_KNOBS]; /* by knob index */
  int line, file_line;
};

/* A setting of every knob: values[i] for knobs[i] (batch and accumulation included). */
struct vf_wl_point {
  int64_t values[VF_WL_MAX_KNOBS];
};

/* What one micro batch is at a point. */
struct vf_wl_shape {
  uint64_t sequences;  /* per micro batch, through each encoder: batch x sequences per anchor */
  uint64_t loss_elems; /* elements of the loss's extra tensors, one copy each */
};

/* What `vramfit trace --workload` measured of the user's factory, as linear terms of the
 * micro batch's shape: term[0] bytes, + term[1] per sequence through the encoders, + term[2]
 * per element of the loss's extra tensors (struct vf_wl_shape). */
enum { VF_WL_TERMS = 3 };

struct vf_wl_measure { /* one traced point */
  struct vf_wl_shape shape;
  uint64_t allocated, reserved;       /* max_memory_allocated / reserved, replayed */
  uint64_t by_category[VF_CAT_COUNT]; /* at the allocated peak */
  enum vf_phase phase;                /* of the allocated peak */
};

struct vf_wl_fit {
  size_t n_points; /* 0: nothing measured */
  double allocated[VF_WL_TERMS], reserved[VF_WL_TERMS];
  double by_category[VF_CAT_COUNT][VF_WL_TERMS];
  enum vf_phase phase; /* of the largest point's peak */
  double r2;           /* of the allocated fit over the points (1 when it is exact) */
  double max_error;    /* largest |fit - measured| / measured over the points */
};

struct vf_workload {
  char file[VF_WL_PATH]; /* as given, for messages */
  char dir[VF_WL_PATH];  /* the folder relative paths start from */
  char name[VF_WL_NAME];
  char framework[VF_WL_NAME]; /* the estimator's profile ("hf", "lightning@2.6") */
  enum vf_precision weights, amp;
  enum vf_optimizer optimizer;
  char config[VF_WL_PATH];  /* the main config (shared values); "" when none */
  char factory[VF_WL_PATH]; /* "module.py:build"; "" when the model is given by parts */
  int config_line, factory_line;
  struct vf_wl_knob knobs[VF_WL_MAX_KNOBS];
  size_t n_knobs;
  int batch, accumulation; /* knob indices; accumulation -1 when not given */
  struct vf_wl_define defines[VF_WL_MAX_DEFINES];
  size_t n_defines;
  struct vf_wl_expr sequences, tokens; /* per anchor, through every encoder; per sequence */
  struct vf_wl_encoder encoders[VF_WL_MAX_ENCODERS];
  size_t n_encoders;
  struct vf_model models[VF_WL_MAX_ENCODERS]; /* the encoders' models, once loaded */
  bool models_loaded;
  struct vf_wl_moe moe;
  struct vf_wl_head heads[VF_WL_MAX_HEADS];
  size_t n_heads;
  struct vf_wl_tensor loss[VF_WL_MAX_TENSORS];
  size_t n_loss;
  struct vf_wl_stage stages[VF_WL_MAX_STAGES];
  size_t n_stages;
  uint64_t target_effective_batch; /* 0: not given */
  double safety;                   /* 0: not given */
  struct vf_wl_point points[VF_WL_MAX_POINTS]; /* the settings `trace --workload` runs */
  size_t n_points;
  struct vf_wl_fit fit; /* from the file `trace --workload` wrote beside it, when there is one */
};

VF_API void vf_workload_init(struct vf_workload *w);
VF_API void vf_workload_cleanup(struct vf_workload *w);

/* Parses a workload held in memory (file names it in messages, dir is where its relative
 * paths start). Checks names, expressions (an unknown name, a cycle among defines),
 * ranges and stage bounds; reads no other file. VF_EFORMAT / VF_EINVAL with d at
 * file:line:col. */
VF_API int vf_workload_parse(struct vf_workload *w, const char *text, size_t len, const char *file,
                             const char *dir, struct vf_diag *d);
/* Reads the file, parses it, checks that the config, stage files and factory module exist
 * and loads the encoders' models. */
VF_API int vf_workload_load(struct vf_workload *w, const char *path, struct vf_diag *d);

/* The index of a knob by name, or -1. */
VF_API int vf_workload_knob(const struct vf_workload *w, const char *name);
/* A stage's bounds of knob k: its own where it sets them, else the knob's range. */
VF_API void vf_workload_bounds(const struct vf_workload *w, size_t stage, size_t k, int64_t *min, int64_t *max);

/* Compiles text ("1 + n_positives") against the workload's knobs and defines; VF_EINVAL
 * with the reason in d (an unknown name, a syntax error; d->col is the column within
 * text, 1-based). */
VF_API int vf_wl_expr_compile(const struct vf_workload *w, const char *text, struct vf_wl_expr *e, struct vf_diag *d);
/* The value of e at a point; VF_ERANGE on overflow, a negative value or division by zero. */
VF_API int vf_wl_expr_eval(const struct vf_workload *w, const struct vf_wl_expr *e, const struct vf_wl_point *pt,
                           int64_t *out);

/* ---- estimating one step of a workload (pure) ---- */
struct vf_wl_env {
  const struct vf_profile *profile;
  const struct vf_alloc_conf *alloc;
  uint32_t gpu_cc_major, gpu_cc_minor; /* 0: unknown */
  uint64_t context_bytes;              /* CUDA context outside the allocator */
  uint64_t gpus; /* data-parallel GPUs, each encoder a DistributedDataParallel replica (0: 1) */
};

VF_API int vf_workload_shape(const struct vf_workload *w, const struct vf_wl_point *pt, struct vf_wl_shape *out,
                             struct vf_diag *d);

/* Peak memory of a training step of the workload's parts at pt: every encoder's step as
 * the estimator writes it, run one after another in the forward and in reverse in the
 * backward, with the fusion, heads and loss between, replayed together through the
 * caching-allocator model. Once `trace --workload` has measured the factory (w->fit), the
 * estimate is that fit, parts or not; a workload given by its factory only is
 * VF_EUNSUPPORTED before it has been traced. */
VF_API int vf_workload_estimate(const struct vf_workload *w, const struct vf_wl_point *pt, const struct vf_wl_env *env,
                                struct vf_estimate *out, struct vf_diag *d);

/* The settings `trace --workload` runs: the workload's trace.points, else one around the
 * first stage's minimums (a micro batch of at least 4) with the micro batch doubled and
 * quadrupled and each knob of the run's own doubled, within the ranges. Returns how many. */
VF_API size_t vf_workload_trace_points(const struct vf_workload *w, struct vf_wl_point out[VF_WL_MAX_POINTS]);

/* Least-squares fit of the measured points (at least VF_WL_TERMS of them, differing in
 * shape): terms that come out negative are dropped and the rest fitted again, so the fit
 * never shrinks as the batch grows. VF_EINVAL when the points cannot determine it (the
 * per-sequence term above all). */
VF_API int vf_workload_fit(const struct vf_wl_measure *m, size_t n, struct vf_wl_fit *out);
/* The fit at a shape, as an estimate (the CUDA context of env added). */
VF_API void vf_workload_fit_eval(const struct vf_wl_fit *f, const struct vf_wl_shape *s, const struct vf_wl_env *env,
                                 struct vf_estimate *out);

/* The file `trace --workload` writes beside a workload, and vf_workload_load() reads the fit
 * back from: its path with .yaml or .yml (if any) replaced by .trace.json. */
VF_API void vf_workload_trace_path(const char *workload_file, char *out, size_t size);
/* The fit as the JSON object of that file's "fit" field (NULL when out of memory); freed
 * with vf_free(). */
VF_API char *vf_workload_fit_text(const struct vf_wl_fit *f);

/* ---- planning every stage (pure) ----
 * The micro batch and accumulation are shared by every stage (they live in the main
 * config); each stage has its own values of the other knobs. Knobs are raised in priority
 * order (lower first; the micro batch is 0 unless given) as far as every stage it belongs
 * to still fits the budget (safety x capacity, judged as a model plan judges its balanced
 * tier: the high end of the device peak's range): the micro batch up to the target
 * effective batch's share of one data-parallel GPU, then snapped to the accumulation that
 * reaches it (micro batch = ceil(share / accumulation)), which leaves the room it frees to
 * the knobs after it. Kept knobs stay at their given values. */
enum { VF_WL_MAX_CHANGES = 24 };

struct vf_wl_plan_request {
  const struct vf_workload *w;
  struct vf_wl_env env;
  uint64_t capacity_bytes;
  double safety;                   /* 0: the workload's, else 0.90 */
  uint64_t target_effective_batch; /* 0: the workload's, else the given one, else none */
  /* The values the configs hold now, per stage (-1 where unknown); NULL: none known. */
  const struct vf_wl_point *given;
  /* The framework's measured spread, whose widest range over the encoders' methods judges a
   * fit; NULL: the point estimate is judged. */
  const struct vf_uncertainty_table *uncertainty;
  uint32_t keep; /* bit (1 << k) per knob index k held at its given value */
};

struct vf_wl_stage_plan {
  struct vf_wl_point point; /* batch, accumulation and every knob */
  struct vf_estimate est;
  struct vf_range device_range; /* of est.device_peak: its high end is what fits the budget */
  struct vf_wl_shape shape;
};

struct vf_wl_plan {
  bool found;              /* every stage fits at its planned point */
  size_t n_stages;         /* the workload's, or 1 when it has none */
  struct vf_wl_stage_plan stages[VF_WL_MAX_STAGES];
  uint64_t batch, accumulation, effective_batch, target_effective_batch; /* target 0: none */
  uint64_t gpus; /* data-parallel GPUs: effective batch = batch x accumulation x gpus */
  double safety;
  uint64_t budget_bytes;
  size_t tightest;         /* the stage whose peak is closest to the budget (or furthest over) */
  uint64_t estimates;
  char changes[VF_WL_MAX_CHANGES][200];
  size_t n_changes;
};

/* 0 once searched (out->found says whether the stages fit at their minimums; when not,
 * out->stages hold the minimums and their peaks); otherwise an estimate's error. */
VF_API int vf_workload_plan(const struct vf_wl_plan_request *r, struct vf_wl_plan *out, struct vf_diag *d);

/* The values the workload's knobs hold in its config and stage files now (-1 where a file
 * or path is missing or the value is not a whole number); given[s] for stage s. */
VF_API void vf_workload_given(const struct vf_workload *w, struct vf_wl_point given[VF_WL_MAX_STAGES]);

#endif
