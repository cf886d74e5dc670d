/* Pieces of the planner shared between its files. */
#ifndef VF_CORE_PLAN_INTERNAL_H
#define VF_CORE_PLAN_INTERNAL_H

#include "vramfit.h"

/* Data-parallel replicas: the GPUs left once tensor, pipeline and context parallel
 * groups are formed. */
uint64_t plan_data_parallel(const struct vf_setup *s);

/* Where the GPUs sit: how many share a node (and its GPU-to-GPU links), the network
 * between nodes, and the model chunks per rank of the interleaved pipeline schedule. */
struct plan_cluster {
  uint64_t gpus_per_node;
  double network_gbps; /* GB/s per GPU, one direction */
  uint64_t pp_chunks;
};

/* The cluster of a request: its own figures, else PLAN_NODE_GPUS GPUs a node and
 * PLAN_NETWORK_GBPS between nodes. */
#define PLAN_NODE_GPUS 8
#define PLAN_NETWORK_GBPS 50.0
struct plan_cluster plan_cluster_of(const struct vf_plan_request *r);

/* Tokens per second of setting s for a model of params parameters, trainable of them
 * trained, with activation_bytes of saved activations per micro batch (offloaded ones
 * cross the host link), on cluster c. */
double plan_rate(const struct vf_model *m, const struct vf_setup *s, uint64_t params, uint64_t trainable,
                 uint64_t activation_bytes, const struct vf_gpu_spec *gpu, const struct plan_cluster *c);

/* Fills out->changes: the steps from out->given to the balanced tier, most important
 * first, each with the peak it leads to. */
void plan_changes(const struct vf_plan_request *r, struct vf_plan_result *out);

/* A GPU without bf16: compute capability below 8.0, or no bf16 rate in the catalogue. */
bool plan_lacks_bf16(const struct vf_gpu_spec *g);

/* The allocator configuration of a setting whose alloc_conf is text, the given one's
 * given: the request's, with the option text appends to it (expandable segments or
 * max_split_size_mb, the changes a plan makes to it). */
void plan_alloc_conf(const struct vf_plan_request *r, const char *given, const char *text, struct vf_alloc_conf *out);

/* ---- one plan's search, shared by plan.c, knobs.c, search.c, layouts.c and settle.c ---- */

/* The ranking's charge for each knob a setting changes (plan_score, the search's bound). */
#define CHANGE_PENALTY 0.01
/* Layouts searched at most (tp x pp x cp x schedule). */
#define MAX_LAYOUTS 1024
/* Exact estimates kept while settling; quick ones per configuration searched. */
#define MAX_EXACT 96
#define MAX_TRIED 64
/* The best settings of a tier's search settled on exact estimates, the best of them taken. */
#define MAX_RUNNERS 8
/* max_split_size_mb values tried on each tier's setting, the usual advice's. */
static const unsigned split_mb[] = {128, 512};
#define MAX_ALLOCS (2 + sizeof split_mb / sizeof *split_mb)

/* A parallel layout of the world's GPUs. */
struct layout {
  uint64_t tp, pp, cp, ep;
  enum vf_pp_schedule schedule;
  bool fits; /* a setting of it fits at micro batch 1 (in the level searched) */
};

/* A micro batch estimated for the configuration being searched; ok: the estimator took it. */
struct tried {
  uint64_t batch;
  bool ok;
  struct vf_estimate e;
};

/* A value of the level that a search moves (seq, or the LoRA rank) with its steps
 * (step 0: no value moved). */
struct dial {
  size_t offset; /* of the value in struct vf_setup */
  uint64_t step, given;
};

/* An exact estimate made while settling the tiers. */
struct exact {
  struct vf_setup s;
  size_t alloc;
  struct vf_estimate e;
  bool ok;
};

/* A configuration of a level, every knob set but the micro batch (search.c). */
struct config;

/* The state of one plan's search: the request, the result it fills, the budgets, the
 * layouts and allocator configurations weighed, and each tier's runners. */
struct search {
  const struct vf_plan_request *r;
  struct vf_plan_result *out;
  uint64_t budget[VF_TIER_COUNT];
  double score[VF_TIER_COUNT];
  /* Per tier, the best settings found, one per setting of the knobs and the allocator (one may
   * let a larger micro batch fit where it lowers no peak at the smaller), best first (score[t]
   * is the first's): the quick estimates misjudge the micro batch that fits by a GiB or two,
   * so a runner-up may fit a larger one exactly (guide 003: adafactor at micro batch 2 where
   * adamw-8bit fits only 1). */
  struct vf_plan_choice runners[VF_TIER_COUNT][MAX_RUNNERS];
  double runner_score[VF_TIER_COUNT][MAX_RUNNERS], runner_bound[VF_TIER_COUNT][MAX_RUNNERS];
  size_t n_runners[VF_TIER_COUNT];
  bool settled[VF_TIER_COUNT];
  uint32_t tiers;  /* the tiers the level being searched is for (bit per tier) */
  bool probing;    /* the level is searched only to learn whether anything fits */
  bool algorithms; /* optimizers that change the update may be tried (optimizers()) */
  uint64_t target; /* the effective batch asked for */
  size_t smallest_alloc; /* the allocator configuration of out->smallest */
  /* The given allocator configuration and, where it lacks them, expandable segments (the
   * n_alloc searched); then the max_split_size_mb values tried on the settings chosen, up to
   * n_alloc_all (plan_find_allocs). */
  struct vf_alloc_conf alloc[MAX_ALLOCS];
  char alloc_text[MAX_ALLOCS][VF_PLAN_ALLOC_CONF_LEN];
  size_t n_alloc, n_alloc_all;
  struct tried tried[MAX_TRIED];
  size_t n_tried;
  struct plan_cluster cluster;
  struct layout layouts[MAX_LAYOUTS];
  size_t n_layouts;
  struct config *configs; /* a level's: every layout with every combination of the knobs */
  size_t cap_configs;
  struct exact exact[MAX_EXACT];
  size_t n_exact;
  struct dial dialed[VF_TIER_COUNT]; /* per tier, the value a seq or rank search settled it at */
};

/* The knob values one level combines (the layouts aside). */
struct knobs {
  enum vf_precision prec[2][2];
  enum vf_optimizer opt[4];
  enum vf_ckpt ck[3];
  enum vf_shard sh[4];
  uint32_t off[6];
  enum vf_loss loss[2];
  enum vf_in_bwd in_bwd[2];
  size_t np, no, nc, ns, nf, nl, nb;
};

/* The range of setting s's device peak, as estimated in e. */
struct vf_range plan_device_range(const struct vf_plan_request *r, const struct vf_setup *s,
                                  const struct vf_estimate *e);

/* The peak tier t holds to its budget: the point estimate for the aggressive tier, the high
 * end of the range for the others. */
uint64_t plan_judged_peak(const struct vf_plan_request *r, enum vf_tier t, const struct vf_setup *s,
                          const struct vf_estimate *e);

/* Setting s, under allocator configuration alloc and estimated in e, as a tier's choice
 * against budget: its effective batch, peak, range and rate. */
struct vf_plan_choice plan_choice(const struct search *S, const struct vf_setup *s, size_t alloc,
                                  const struct vf_estimate *e, uint64_t budget);

/* The quick or exact estimate of s under allocator configuration alloc into e, counted in
 * the result, the lowest peak kept for the nothing-fits report. */
int plan_estimate_with(struct search *S, const struct vf_setup *s, size_t alloc, bool exact,
                       struct vf_estimate *e, struct vf_diag *d);

/* The knobs setting s changes from base, a change of layout counting as one. */
int plan_changes_from_base(const struct vf_setup *base, const struct vf_setup *s);

/* The ranking score of setting s running at rate tokens per second. */
double plan_score(const struct search *S, const struct vf_setup *s, double rate);

/* The values each knob may take on top of level, the given one first. */
void plan_knobs_of(const struct search *S, const struct vf_setup *level, struct knobs *k);

/* The methods a plan may train with into out, the given setting first; returns how many. */
size_t plan_methods(const struct vf_plan_request *r, struct vf_setup *out);

/* Sets micro batch b of setting s, with the accumulation nearest to n samples per replica. */
void plan_set_micro(struct vf_setup *s, uint64_t n, uint64_t b);

/* The samples per replica of layout s for the effective batch asked for. */
uint64_t plan_samples_per_replica(const struct search *S, const struct vf_setup *s);

/* The smallest micro batch searched for setting s with n samples per replica: 1, or under a
 * step in the backward the smallest whose accumulation is 1. */
uint64_t plan_lowest_micro(const struct vf_setup *s, uint64_t n);

/* Of the micro batches from half of most up to most, the one that ranks best. */
uint64_t plan_best_micro(const struct search *S, struct vf_setup s, uint64_t n, uint64_t most,
                         const struct vf_estimate *e);

/* The value dial v moves in setting s. */
uint64_t *plan_dial_field(struct vf_setup *s, const struct dial *v);

/* The number of values below the given one that dial v takes. */
uint64_t plan_dial_count(const struct dial *v);

/* Value i of dial v, from 0 (the smallest). */
uint64_t plan_dial_value(const struct dial *v, uint64_t i);

/* Searches the levels on quick estimates, each tier's runners and choice into S. */
void plan_search(struct search *S);

/* The layouts the search weighs into S->layouts. */
void plan_find_layouts(struct search *S);

/* The allocator configurations the plan weighs into S->alloc and S->alloc_text. */
void plan_find_allocs(struct search *S);

/* Settles each tier's choice on exact estimates. */
void plan_confirm(struct search *S);

/* The allocator settings weighed against the balanced tier's choice, each with its peak,
 * into the result. */
void plan_note_allocs(struct search *S);

#endif
