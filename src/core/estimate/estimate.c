/* The estimator's entry points: the setup validated and resolved, the context it sets for
 * the whole estimate, the pipeline ranks worth replaying replayed, and the most loaded
 * one's replay reported in a struct vf_estimate. */
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "core/estimate/estimate.h"
#include "core/estimate/internal.h"
#include "core/pipeline.h"

/* Every layer replayed: the allocator's figures are its own, not extrapolated. */
int vf_estimate(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d) {
  return estimate_replaying(m, s, p, alloc, UINT64_MAX, NULL, NULL, out, d);
}

int estimate_quick(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                   const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d) {
  return estimate_replaying(m, s, p, alloc, REPLAY_B, NULL, NULL, out, d);
}

bool estimate_loss_differs(const struct vf_profile *p, enum vf_loss loss) { return head_loss_differs(p, loss); }

int vf_estimate_timeline(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                         const struct vf_alloc_conf *alloc, vf_timeline_fn fn, void *arg,
                         struct vf_estimate *out, struct vf_diag *d) {
  return estimate_replaying(m, s, p, alloc, UINT64_MAX, fn, arg, out, d);
}

/* What a pipeline rank's replay leaves to report. */
struct rank_result {
  struct result r, reversed; /* reversed: the drawn lengths in the other order */
  uint64_t rank, layers, paged;
  uint64_t params, trainable_params; /* the whole model's */
};

/* One pipeline rank replayed: its blocks, its share of the parts outside them (the
 * embedding on the first, the head and loss on the last), the micro batches it holds. */
static int replay_rank(struct ctx *x, uint64_t rank, enum vf_lengths lengths, const struct vf_alloc_conf *alloc,
                       struct rank_result *out) {
  const struct vf_setup *s = x->s;
  struct params ps;
  int rc = params_build(&ps, x->m, s, x->p, x->task);
  if (rc) return rc;
  pipe_rank(x, rank);
  if (s->pp > 1) params_keep_root(&ps, x->pp.has_embedding, x->pp.has_head);
  x->ps = &ps;
  out->rank = rank;
  out->layers = pipeline_rank_layers(x->m->arch.layers, s->pp, x->pp.chunks, rank, x->p->pp_even_layers);
  zero_rank(x, out->layers);
  rc = replay_layers(x, out->layers, alloc, &out->r);
  /* The replay has run batches of the samples' lengths; the same batches in the other order
   * (the longest but the last coming first) leave the cache otherwise, and the higher of
   * the two is the top of the range. */
  out->reversed = out->r;
  if (!rc && lengths == VF_LENGTHS_VARIED) {
    vf_timeline_fn listener = x->replay.listener; /* a timeline is of the drawn order */
    x->replay.listener = NULL;
    x->sched.lengths_reversed = true;
    rc = replay_layers(x, out->layers, alloc, &out->reversed);
    x->sched.lengths_reversed = false;
    x->replay.listener = listener;
  }
  out->paged = optim_paged_bytes(x);
  out->params = ps.total;
  out->trainable_params = ps.trainable;
  x->ps = NULL;
  params_cleanup(&ps);
  return rc;
}

/* The blocks of the rank holding the most, to size the replay's per-layer tables. */
static uint64_t most_layers(const struct ctx *x, const uint64_t *ranks, size_t n) {
  uint64_t most = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t l = pipeline_rank_layers(x->m->arch.layers, x->s->pp, x->pp.chunks, ranks[i], x->p->pp_even_layers);
    if (l > most) most = l;
  }
  return most;
}

/* Replays the ranks worth replaying and keeps the most loaded (the highest reserved peak);
 * a timeline's listener then hears that rank's replay alone. */
static int replay_ranks(struct ctx *x, enum vf_lengths lengths, const struct vf_alloc_conf *alloc,
                        struct rank_result *best) {
  uint64_t ranks[3];
  size_t n = pipeline_ranks_to_replay(x->s->pp, ranks);
  vf_timeline_fn listener = x->replay.listener;
  if (n > 1) x->replay.listener = NULL;
  int rc = 0;
  struct rank_result *r = malloc(sizeof *r);
  if (!r) return VF_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++) {
    rc = replay_rank(x, ranks[i], lengths, alloc, r);
    if (!rc && (!i || replay_reserved(&r->r) > replay_reserved(&best->r))) *best = *r;
  }
  x->replay.listener = listener;
  if (!rc && listener && n > 1) rc = replay_rank(x, best->rank, lengths, alloc, r);
  free(r);
  return rc;
}

/* The tables the replays share, sized for the deepest. */
static int make_tables(struct ctx *x) {
  uint64_t ranks[3];
  uint64_t layers = most_layers(x, ranks, pipeline_ranks_to_replay(x->s->pp, ranks));
  size_t replayed = (layers <= x->replay.max ? layers : REPLAY_B) + 1;
  x->replay.tables = replayed;
  x->sched.sv = malloc(replayed * sizeof *x->sched.sv);
  x->grads.unsharded = calloc(replayed, sizeof *x->grads.unsharded);
  x->fsdp.held_gather = calloc(replayed, sizeof *x->fsdp.held_gather);
  /* Sized once for a typical replay (a few thousand events), grown if needed. */
  x->tape.ev = array_grow(NULL, &x->tape.cap, 4096, sizeof *x->tape.ev);
  return x->sched.sv && x->grads.unsharded && x->fsdp.held_gather && x->tape.ev ? 0 : VF_ENOMEM;
}

static void free_tables(struct ctx *x) {
  free(x->tape.ev);
  free(x->sched.sv);
  for (size_t i = 0; x->grads.unsharded && i < x->replay.tables; i++) free(x->grads.unsharded[i].id);
  free(x->grads.unsharded);
  free(x->grads.embedding_unit.id);
  free(x->fsdp.held_gather);
  free(x->grads.list.id);
  free(x->tape.graph.id);
  free(x->grads.stale.id);
  free(x->pp.outputs.id);
  free(x->autocast.cache.id);
  free(x->opt.foreach_tmp.id);
}

static void describe_layout(struct vf_estimate *out, const struct ctx *x, const struct rank_result *best) {
  out->pp_schedule = x->s->pp_schedule;
  out->pp_rank = best->rank;
  out->pp_rank_layers = best->layers;
  out->pp_in_flight =
      (double)pipeline_chunks_in_flight(x->s->pp_schedule, x->s->pp, x->pp.chunks, x->accumulation, best->rank) /
      (double)x->pp.chunks;
  out->sequence_parallel = x->d.sp;
}

/* What the most loaded rank's replay tells. */
static void fill_estimate(struct vf_estimate *out, const struct ctx *x, const struct rank_result *best,
                   const struct vf_setup *s) {
  replay_fill(out, &best->r, s);
  describe_layout(out, x, best);
  out->by_category[VF_CAT_OPTIMIZER] += best->paged;
  out->device_peak += best->paged;
  out->params = best->params;
  out->trainable_params = best->trainable_params;
  out->attention = x->attn.kind;
  out->accumulation = x->accumulation;
  out->loss_compiled = head_loss_compiled(x);
  out->allocator_capacity = x->replay.capacity;
  out->cache_releases = best->r.cache_releases;
  out->out_of_memory = best->r.out_of_memory;
  out->lengths = x->s->lengths;
  out->eval = x->s->eval;
  if (x->s->lengths == VF_LENGTHS_VARIED) {
    uint64_t other = replay_reserved(&best->reversed);
    out->reserved_worst = other > out->reserved_peak ? other : out->reserved_peak;
  }
}

/* What the layers here cannot replay is refused with the reason, never estimated as
 * something else: deepseek_v2's attention (transformers 5.23 modeling_deepseek_v2.py
 * DeepseekV2Attention: its compressed K/V expanded per head, rotated parts concatenated,
 * query and value heads of different widths) and its MLP (a dense first layer, shared
 * experts beside the routed ones, an fp32 router). */
static int refuse_unmodelled(const struct vf_model *m, struct vf_diag *d) {
  const struct vf_arch *a = &m->arch;
  if (!a->kv_lora_rank && !a->dense_layers && !a->shared_intermediate) return 0;
  return diag_at(d, VF_EUNSUPPORTED, NULL, UINT64_MAX,
                 "%s is not modelled yet: %s; 'vramfit trace' measures it", a->model_type,
                 a->kv_lora_rank ? "multi-head latent attention (compressed K/V, query and value heads of "
                                   "different widths) and MoE layers with shared experts after dense ones"
                                 : "MoE layers with shared experts after dense ones");
}

/* What PyTorch's allocator may reserve on the GPU: its memory less the CUDA context, which
 * cudaMalloc cannot hand out (0: no GPU given, no limit). */
static uint64_t allocator_capacity(const struct vf_setup *s) {
  return s->capacity_bytes > s->context_bytes ? s->capacity_bytes - s->context_bytes : 0;
}

int estimate_replaying(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                       const struct vf_alloc_conf *alloc, uint64_t replay_max, vf_timeline_fn fn, void *arg,
                       struct vf_estimate *out, struct vf_diag *d) {
  int rc = vf_setup_validate(s, m, d);
  if (!rc) rc = refuse_unmodelled(m, d);
  if (rc) return rc;
  memset(out, 0, sizeof *out);
  struct vf_setup resolved = *s;
  vf_setup_resolve(&resolved, m, p);
  vf_setup_assume_lengths(&resolved);
  if ((rc = vf_layout_validate(&resolved, m, p, d)) || (rc = head_loss_offered(&resolved, p, d)) ||
      (rc = optim_in_backward_offered(&resolved, p, d)))
    return rc;
  if (replay_max < REPLAY_B) replay_max = REPLAY_B;
  struct ctx x = {.m = m, .s = &resolved, .p = p, .task = resolved.task, .accumulation = resolved.accumulation,
                  .eval = resolved.eval == VF_EVAL_YES, .base_trainable = s->method == VF_METHOD_FULL,
                  .replay = {.max = replay_max, .listener = fn, .listener_arg = arg,
                             .capacity = allocator_capacity(&resolved)}};
  x.layers_train = grads_layers_train(&x);
  pipe_setup(&x);
  parallel_dims(&x);
  attention_choose(&x);
  rc = make_tables(&x);
  struct rank_result *best = malloc(sizeof *best);
  if (!best) rc = VF_ENOMEM;
  if (!rc) rc = replay_ranks(&x, resolved.lengths, alloc, best);
  free_tables(&x);
  if (!rc) fill_estimate(out, &x, best, s);
  free(best);
  return rc;
}

static const char *const category_names[VF_CAT_COUNT] = {
    "weights", "gradients", "optimizer", "activations", "temporaries", "runtime"};
static const char *const phase_names[VF_PHASE_COUNT] = {"load", "forward", "loss", "backward",
                                                        "optimizer", "eval", "save"};

const char *vf_category_name(enum vf_category c) {
  return c >= 0 && c < VF_CAT_COUNT ? category_names[c] : "unknown";
}

const char *vf_phase_name(enum vf_phase ph) {
  return ph >= 0 && ph < VF_PHASE_COUNT ? phase_names[ph] : "unknown";
}
