/* One training step of a workload given by its parts, as one allocation stream:
 *
 *   load      every encoder's weights, then the fusion's and heads'
 *   forward   encoder 1, 2, ... each over every sequence of the micro batch (the
 *             estimator's own forward of that encoder), then the fusion and heads
 *   loss      each encoder's pooled output, then the loss's own tensors
 *   backward  the loss, heads and fusion, then the encoders in reverse order (autograd
 *             runs the branch made last first)
 *   optimizer each encoder's states and step, then the fusion's and heads'
 *
 * Each encoder's events come from vf_estimate_timeline() of that encoder alone; they are
 * interleaved phase by phase, renumbered, and replayed together with the parts' events
 * through the caching-allocator model, so that blocks freed by one encoder serve the next
 * as they do on the GPU. The cuBLAS workspaces belong to the thread, not the model: the
 * first encoder's serve all. On several data-parallel GPUs each encoder is estimated as a
 * DistributedDataParallel replica (ddp.c: its broadcast and gradient buckets); the fusion's
 * and heads' gradients, a few MB, get no buckets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/grow.h"
#include "core/profile.h"
#include "vramfit/trace.h"
#include "vramfit/workload.h"

/* ---- the stream being built ---- */

struct stream {
  struct vf_trace_event *ev;
  size_t n, cap;
  uint8_t *category; /* per id */
  uint64_t max_id, next_id;
  int8_t phase_index[VF_PHASE_COUNT]; /* into phases, -1 before the phase first appears */
  char phases[VF_TRACE_MAX_PHASES][VF_TRACE_PHASE_NAME];
  size_t nphases;
  int last_phase;
  bool oom;
};

static void push(struct stream *s, struct vf_trace_event e) {
  if (s->oom) return;
  struct vf_trace_event *grown = array_grow(s->ev, &s->cap, s->n + 1, sizeof *grown);
  if (!grown) {
    s->oom = true;
    return;
  }
  s->ev = grown;
  s->ev[s->n++] = e;
}

static bool reserve_ids(struct stream *s, uint64_t upto) {
  if (upto <= s->max_id) return true;
  uint8_t *grown = realloc(s->category, upto + 1);
  if (!grown) return !(s->oom = true);
  memset(grown + s->max_id + 1, 0, upto - s->max_id);
  s->category = grown, s->max_id = upto;
  return true;
}

static void phase(struct stream *s, enum vf_phase p) {
  if (s->last_phase == (int)p) return;
  s->last_phase = (int)p;
  if (s->phase_index[p] < 0) {
    s->phase_index[p] = (int8_t)s->nphases;
    snprintf(s->phases[s->nphases++], VF_TRACE_PHASE_NAME, "%s", vf_phase_name(p));
  }
  push(s, (struct vf_trace_event){.kind = VF_TRACE_PHASE, .phase = (uint8_t)s->phase_index[p]});
}

static void put(struct stream *s, uint64_t id, uint64_t bytes, enum vf_category cat) {
  if (!reserve_ids(s, id)) return;
  s->category[id] = (uint8_t)cat;
  push(s, (struct vf_trace_event){.kind = VF_TRACE_ALLOC, .id = id, .bytes = bytes});
}

static void drop(struct stream *s, uint64_t id) { push(s, (struct vf_trace_event){.kind = VF_TRACE_FREE, .id = id}); }

/* An allocation of the parts; returns its id (0: nothing allocated). */
static uint64_t take(struct stream *s, uint64_t bytes, enum vf_category cat) {
  if (!bytes) return 0;
  uint64_t id = s->next_id++;
  put(s, id, bytes, cat);
  return id;
}

static void give(struct stream *s, uint64_t *id) {
  if (*id) drop(s, *id);
  *id = 0;
}

/* ---- one encoder's events, cut into its phases ---- */

struct segment {
  size_t begin, end;
  uint8_t phase;
};

struct encoder_run {
  struct vf_timeline_event *ev;
  size_t n, cap;
  struct segment seg[64];
  size_t nseg;
  uint64_t base; /* added to its ids */
  uint64_t max_id;
  struct vf_estimate est;
  bool oom;
};

static void hear(void *arg, const struct vf_timeline_event *e) {
  struct encoder_run *r = arg;
  /* Allocations and frees only: the stream a workload composes runs on one CUDA stream. */
  if (r->oom || e->op > VF_TIMELINE_FREE) return;
  struct vf_timeline_event *grown = array_grow(r->ev, &r->cap, r->n + 1, sizeof *grown);
  if (!grown) {
    r->oom = true;
    return;
  }
  r->ev = grown;
  r->ev[r->n++] = *e;
  if (e->id > r->max_id) r->max_id = e->id;
}

static int cut(struct encoder_run *r) {
  for (size_t i = 0; i < r->n; i++) {
    if (r->nseg && r->seg[r->nseg - 1].phase == r->ev[i].phase) {
      r->seg[r->nseg - 1].end = i + 1;
      continue;
    }
    if (r->nseg == sizeof r->seg / sizeof *r->seg) return VF_EUNSUPPORTED;
    r->seg[r->nseg++] = (struct segment){i, i + 1, r->ev[i].phase};
  }
  return 0;
}

static void encoder_setup(const struct vf_workload *w, size_t i, const struct vf_wl_env *env, uint64_t sequences,
                          uint64_t tokens, struct vf_setup *s) {
  const struct vf_wl_encoder *e = &w->encoders[i];
  vf_setup_default(s);
  s->batch = sequences;
  s->seq = tokens;
  s->accumulation = 1;
  s->task = VF_TASK_SEQ_CLS;
  s->weights = w->weights;
  s->amp = w->amp;
  s->optimizer = w->optimizer;
  s->method = e->method;
  s->lora_r = e->lora_r;
  s->lora_targets = e->lora_targets;
  s->grad_ckpt = e->grad_ckpt;
  s->lengths = VF_LENGTHS_FIXED;
  s->eval = VF_EVAL_NO;
  s->gpus = env->gpus ? env->gpus : 1;
  s->gpu_cc_major = env->gpu_cc_major;
  s->gpu_cc_minor = env->gpu_cc_minor;
  vf_setup_resolve(s, &w->models[i], env->profile);
}

static int run_encoder(const struct vf_workload *w, size_t i, const struct vf_wl_env *env, const struct vf_wl_point *pt,
                       uint64_t sequences, struct encoder_run *r, struct vf_diag *d) {
  const struct vf_wl_expr *te = w->encoders[i].tokens.n ? &w->encoders[i].tokens : &w->tokens;
  int64_t tokens;
  if (vf_wl_expr_eval(w, te, pt, &tokens) || tokens < 1)
    return diag_line(d, VF_ERANGE, w->file, te->line, te->col, "tokens '%s' is not a positive number here", te->text);
  struct vf_setup s;
  encoder_setup(w, i, env, sequences, (uint64_t)tokens, &s);
  struct vf_diag inner;
  vf_diag_clear(&inner);
  int rc = vf_setup_validate(&s, &w->models[i], &inner);
  if (!rc) rc = vf_estimate_timeline(&w->models[i], &s, env->profile, env->alloc, hear, r, &r->est, &inner);
  if (rc)
    return diag_line(d, rc, w->file, w->encoders[i].line, 1, "encoder '%s': %s", w->encoders[i].name, inner.msg);
  return r->oom ? VF_ENOMEM : cut(r);
}

/* Frees that wait for the whole autograd graph (vf_timeline_event.with_graph): the graph
 * of all the encoders goes with the loss, after every encoder's backward. */
struct waiting {
  uint64_t *id;
  size_t n, cap;
};

static void wait_for_graph(struct stream *s, struct waiting *w, uint64_t id) {
  uint64_t *grown = array_grow(w->id, &w->cap, w->n + 1, sizeof *grown);
  if (!grown) {
    s->oom = true;
    return;
  }
  w->id = grown;
  w->id[w->n++] = id;
}

static void graph_freed(struct stream *s, struct waiting *w) {
  for (size_t i = 0; i < w->n; i++) drop(s, w->id[i]);
  w->n = 0;
}

/* Copies segment k of an encoder into the stream, leaving out the cuBLAS workspaces of all
 * but the first encoder (skip marks their ids, whose frees go too), and holding back the
 * frees that wait for the graph. */
static void copy_segment(struct stream *s, const struct encoder_run *r, size_t k, uint8_t *skip, struct waiting *w) {
  for (size_t i = r->seg[k].begin; i < r->seg[k].end; i++) {
    const struct vf_timeline_event *e = &r->ev[i];
    if (e->op == VF_TIMELINE_ALLOC && skip && e->category == VF_CAT_RUNTIME) skip[e->id] = 1;
    if (skip && skip[e->id]) continue;
    if (e->op == VF_TIMELINE_ALLOC) put(s, r->base + e->id, e->bytes, (enum vf_category)e->category);
    else if (e->with_graph) wait_for_graph(s, w, r->base + e->id);
    else drop(s, r->base + e->id);
  }
}

/* ---- the parts: fusion, heads, normalization, loss ---- */

struct parts {
  uint64_t S;          /* sequences in the micro batch */
  uint64_t din;        /* the encoders' pooled outputs, concatenated */
  uint32_t c, wbytes;  /* bytes of the compute dtype, of a weight */
  bool casts;          /* autocast keeps compute-dtype copies of fp32 weights */
  uint64_t params[2 + VF_WL_MAX_HEADS];
  size_t nparams;
  uint64_t weights[2 + VF_WL_MAX_HEADS], grads[2 + VF_WL_MAX_HEADS], states[2 + VF_WL_MAX_HEADS];
  uint64_t *kept; /* what the forward saved for the backward */
  size_t nkept, capkept;
  uint64_t loss_bytes[VF_WL_MAX_TENSORS];
  uint64_t input_grad;
  bool stepped;
};

static uint32_t dtype_bytes(enum vf_precision p) { return p == VF_PREC_FP32 ? 4 : 2; }

static void keep_alloc(struct stream *s, struct parts *p, uint64_t bytes) {
  uint64_t id = take(s, bytes, VF_CAT_ACTIVATIONS);
  if (!id || s->oom) return;
  if (p->nkept == p->capkept) {
    size_t cap = p->capkept ? 2 * p->capkept : 64;
    uint64_t *grown = realloc(p->kept, cap * sizeof *grown);
    if (!grown) {
      s->oom = true;
      return;
    }
    p->kept = grown, p->capkept = cap;
  }
  p->kept[p->nkept++] = id;
}

static void parts_init(const struct vf_workload *w, uint64_t S, struct parts *p) {
  p->S = S;
  for (size_t i = 0; i < w->n_encoders; i++) p->din += w->models[i].arch.hidden;
  p->wbytes = dtype_bytes(w->weights);
  p->c = w->amp != VF_PREC_NONE ? dtype_bytes(w->amp) : p->wbytes;
  p->casts = w->amp != VF_PREC_NONE && w->weights == VF_PREC_FP32;
  uint64_t width = p->din;
  if (w->moe.experts) {
    const struct vf_wl_moe *m = &w->moe;
    p->params[p->nparams++] = width * m->experts + m->experts;
    p->params[p->nparams++] = m->experts * (width * m->hidden + m->hidden + m->hidden * m->out + m->out);
    width = m->out;
  }
  for (size_t h = 0; h < w->n_heads; h++) {
    p->params[p->nparams++] = width * w->heads[h].out + w->heads[h].out;
    width = w->heads[h].out;
  }
}

static void parts_load(struct stream *s, struct parts *p) {
  for (size_t i = 0; i < p->nparams; i++) p->weights[i] = take(s, p->params[i] * p->wbytes, VF_CAT_WEIGHTS);
}

/* Rows each expert runs: every sequence. The gate is zero outside a sequence's top_k, as a
 * dense mixture computes it (no data-dependent gather). */
static void moe_forward(struct stream *s, const struct vf_workload *w, struct parts *p) {
  const struct vf_wl_moe *m = &w->moe;
  uint64_t S = p->S;
  if (p->casts) keep_alloc(s, p, p->din * m->experts * p->c);
  keep_alloc(s, p, S * m->experts * 4);          /* the router's probabilities (softmax in fp32) */
  keep_alloc(s, p, S * m->top_k * (4 + 8));      /* top_k weights and indices */
  keep_alloc(s, p, S * m->experts * 4);          /* the gate, zero outside the top_k */
  uint64_t out = 0;
  for (uint64_t e = 0; e < m->experts; e++) {
    if (p->casts) keep_alloc(s, p, (p->din * m->hidden + m->hidden * m->out) * p->c);
    keep_alloc(s, p, S * m->hidden * p->c);      /* first layer's output, the activation's input */
    keep_alloc(s, p, S * m->hidden * p->c);      /* the activation, the second layer's input */
    keep_alloc(s, p, S * m->out * p->c);         /* the expert's output, kept by the gate's product */
    uint64_t sum = take(s, S * m->out * 4, VF_CAT_ACTIVATIONS); /* gated sum in the gate's fp32 */
    give(s, &out);
    out = sum;
  }
  p->input_grad = out; /* the fused output lives until the heads have cast it */
}

static void parts_forward(struct stream *s, const struct vf_workload *w, struct parts *p) {
  uint64_t S = p->S, width = p->din;
  if (w->n_encoders > 1) keep_alloc(s, p, S * p->din * p->c); /* the concatenated pooled outputs */
  if (w->moe.experts) moe_forward(s, w, p), width = w->moe.out;
  for (size_t h = 0; h < w->n_heads; h++) {
    if (p->casts) keep_alloc(s, p, width * w->heads[h].out * p->c);
    keep_alloc(s, p, S * width * p->c); /* the head's input, in the compute dtype */
    give(s, &p->input_grad);
    width = w->heads[h].out;
  }
  give(s, &p->input_grad);
  keep_alloc(s, p, S * width * 4); /* the embeddings, normalized in fp32 */
  keep_alloc(s, p, S * width * 4);
}

static int parts_loss(struct stream *s, const struct vf_workload *w, const struct vf_wl_point *pt, struct parts *p,
                      struct vf_diag *d) {
  for (size_t i = 0; i < w->n_loss; i++) {
    const struct vf_wl_tensor *t = &w->loss[i];
    uint64_t elems = 1;
    for (uint32_t k = 0; k < t->ndim; k++) {
      int64_t v;
      if (vf_wl_expr_eval(w, &t->dims[k], pt, &v) || __builtin_mul_overflow(elems, (uint64_t)v, &elems))
        return diag_line(d, VF_ERANGE, w->file, t->dims[k].line, t->dims[k].col, "loss tensor '%s': '%s' cannot be "
                         "evaluated here", t->name, t->dims[k].text);
    }
    p->loss_bytes[i] = elems * t->elem_bytes;
    for (uint32_t c = 0; c < t->copies; c++) keep_alloc(s, p, p->loss_bytes[i]);
  }
  return 0;
}

/* The loss's gradients as large as its tensors, then each part's input gradient while its
 * saved tensors go; the parameters' gradients appear and stay until zero_grad. */
static void parts_backward(struct stream *s, const struct vf_workload *w, const struct vf_profile *prof,
                           struct parts *p) {
  if (p->stepped && prof->zero_grad_before_backward && prof->zero_grad_frees)
    for (size_t i = 0; i < p->nparams; i++) give(s, &p->grads[i]);
  p->stepped = false;
  uint64_t grads[VF_WL_MAX_TENSORS * 16];
  size_t ng = 0;
  for (size_t i = 0; i < w->n_loss; i++)
    for (uint32_t c = 0; c < w->loss[i].copies; c++) grads[ng++] = take(s, p->loss_bytes[i], VF_CAT_TEMPORARIES);
  for (size_t i = 0; i < ng; i++) give(s, &grads[i]);
  for (size_t i = 0; i < p->nparams; i++)
    if (!p->grads[i]) p->grads[i] = take(s, p->params[i] * p->wbytes, VF_CAT_GRADIENTS);
  uint64_t transient = take(s, p->S * (p->din > 0 ? p->din : 1) * 4, VF_CAT_TEMPORARIES);
  while (p->nkept) give(s, &p->kept[--p->nkept]);
  give(s, &transient);
  /* The gradient of the concatenated outputs: each encoder's backward starts from a view of it. */
  p->input_grad = take(s, p->S * p->din * p->c, VF_CAT_TEMPORARIES);
}

static void parts_optimizer(struct stream *s, const struct vf_workload *w, const struct vf_profile *prof,
                            struct parts *p) {
  uint32_t per_state = w->optimizer == VF_OPT_NONE ? 0 : w->optimizer == VF_OPT_ADAMW ? 8 : 4;
  for (size_t i = 0; i < p->nparams; i++) {
    if (!p->states[i]) p->states[i] = take(s, p->params[i] * per_state, VF_CAT_OPTIMIZER);
    if (prof->foreach_optimizer) {
      uint64_t scratch = take(s, p->params[i] * 4, VF_CAT_TEMPORARIES);
      give(s, &scratch);
    }
  }
  p->stepped = true;
  if (prof->zero_grad_frees && !prof->zero_grad_before_backward)
    for (size_t i = 0; i < p->nparams; i++) give(s, &p->grads[i]);
}

/* ---- putting it together ---- */

struct compose {
  struct stream s;
  struct encoder_run runs[VF_WL_MAX_ENCODERS];
  uint8_t *skip[VF_WL_MAX_ENCODERS];
  struct parts parts;
  struct waiting graph; /* frees waiting for the graph to go */
};

static void compose_free(struct compose *c) {
  free(c->s.ev);
  free(c->s.category);
  for (size_t i = 0; i < VF_WL_MAX_ENCODERS; i++) free(c->runs[i].ev), free(c->skip[i]);
  free(c->parts.kept);
  free(c->graph.id);
  free(c);
}

static int check_alike(const struct vf_workload *w, const struct compose *c, struct vf_diag *d) {
  for (size_t i = 1; i < w->n_encoders; i++) {
    bool same = c->runs[i].nseg == c->runs[0].nseg;
    for (size_t k = 0; same && k < c->runs[0].nseg; k++) same = c->runs[i].seg[k].phase == c->runs[0].seg[k].phase;
    if (!same)
      return diag_line(d, VF_EINTERNAL, w->file, w->encoders[i].line, 1,
                       "encoder '%s': its step has other phases than the first encoder's", w->encoders[i].name);
  }
  return 0;
}

static void encoders_in_order(struct compose *c, size_t n, size_t k, bool reverse) {
  for (size_t j = 0; j < n; j++) {
    size_t i = reverse ? n - 1 - j : j;
    copy_segment(&c->s, &c->runs[i], k, c->skip[i], &c->graph);
  }
}

static int interleave(struct compose *c, const struct vf_workload *w, const struct vf_wl_point *pt,
                      const struct vf_wl_env *env, struct vf_diag *d) {
  size_t n = w->n_encoders;
  for (size_t k = 0; k < c->runs[0].nseg; k++) {
    enum vf_phase ph = (enum vf_phase)c->runs[0].seg[k].phase;
    phase(&c->s, ph);
    if (ph == VF_PHASE_BACKWARD) parts_backward(&c->s, w, env->profile, &c->parts);
    encoders_in_order(c, n, k, ph == VF_PHASE_BACKWARD);
    /* The loss follows the forward, in the encoders' loss phase where they have one. */
    bool loss_next = k + 1 < c->runs[0].nseg && c->runs[0].seg[k + 1].phase == VF_PHASE_LOSS;
    int rc = 0;
    if (ph == VF_PHASE_LOAD) parts_load(&c->s, &c->parts);
    else if (ph == VF_PHASE_FORWARD) parts_forward(&c->s, w, &c->parts);
    else if (ph == VF_PHASE_BACKWARD) give(&c->s, &c->parts.input_grad), graph_freed(&c->s, &c->graph);
    else if (ph == VF_PHASE_OPTIMIZER) parts_optimizer(&c->s, w, env->profile, &c->parts);
    if ((ph == VF_PHASE_FORWARD && !loss_next) || ph == VF_PHASE_LOSS) rc = parts_loss(&c->s, w, pt, &c->parts, d);
    if (rc) return rc;
  }
  return c->s.oom ? VF_ENOMEM : 0;
}

static void report(const struct compose *c, const struct vf_trace_result *r, const struct vf_wl_env *env,
                   struct vf_estimate *out) {
  memset(out, 0, sizeof *out);
  out->allocated_peak = r->allocated_peak;
  out->reserved_peak = r->reserved_peak;
  out->context = env->context_bytes;
  out->device_peak = r->reserved_peak + env->context_bytes;
  out->allocator_slack = r->reserved_peak - r->allocated_peak;
  memcpy(out->by_category, r->by_category, sizeof out->by_category);
  for (int p = 0; p < VF_PHASE_COUNT; p++) {
    int i = c->s.phase_index[p];
    if (i < 0) continue;
    out->phase_allocated[p] = r->phase_peak[i].allocated;
    out->phase_reserved[p] = r->phase_peak[i].reserved;
    if ((size_t)i == r->peak_phase) out->peak_phase = (enum vf_phase)p;
  }
  const struct encoder_run *first = &c->runs[0];
  out->attention = first->est.attention;
  out->accumulation = 1;
  out->lengths = VF_LENGTHS_FIXED;
  out->eval = VF_EVAL_NO;
}

static void count_params(const struct vf_workload *w, const struct compose *c, struct vf_estimate *out) {
  for (size_t i = 0; i < w->n_encoders; i++) {
    out->params += c->runs[i].est.params;
    out->trainable_params += c->runs[i].est.trainable_params;
  }
  for (size_t i = 0; i < c->parts.nparams; i++) out->params += c->parts.params[i], out->trainable_params += c->parts.params[i];
}

static int replay(struct compose *c, const struct vf_wl_env *env, struct vf_trace_result *r) {
  struct vf_trace t = {.events = c->s.ev, .n = c->s.n, .cap = c->s.cap, .nphases = c->s.nphases,
                       .category = c->s.category, .category_cap = c->s.max_id + 1, .max_id = c->s.max_id};
  memcpy(t.phases, c->s.phases, sizeof t.phases);
  return vf_trace_replay(&t, env->alloc, r);
}

static int run_all(struct compose *c, const struct vf_workload *w, const struct vf_wl_point *pt,
                   const struct vf_wl_env *env, uint64_t S, struct vf_diag *d) {
  uint64_t base = 0;
  for (size_t i = 0; i < w->n_encoders; i++) {
    struct encoder_run *r = &c->runs[i];
    int rc = run_encoder(w, i, env, pt, S, r, d);
    if (rc) return rc;
    r->base = base;
    base += r->max_id + 1;
    if (i > 0 && !(c->skip[i] = calloc(r->max_id + 1, 1))) return VF_ENOMEM;
  }
  c->s.next_id = base + 1;
  return check_alike(w, c, d);
}

int vf_workload_estimate(const struct vf_workload *w, const struct vf_wl_point *pt, const struct vf_wl_env *env,
                         struct vf_estimate *out, struct vf_diag *d) {
  if (!w->n_encoders && !w->fit.n_points)
    return diag_line(d, VF_EUNSUPPORTED, w->file, w->factory_line, 1,
                     "the model is a factory that has not been measured: run 'vramfit trace --workload %s'",
                     w->file);
  if (w->n_encoders && !w->models_loaded)
    return diag_line(d, VF_EINVAL, w->file, 0, 0, "the encoders' models are not loaded");
  struct vf_wl_shape shape;
  int rc = vf_workload_shape(w, pt, &shape, d);
  if (rc) return rc;
  /* What the user's own code measured beats the parts' model of it. */
  if (w->fit.n_points) return vf_workload_fit_eval(&w->fit, &shape, env, out), 0;
  if (!shape.sequences) return diag_line(d, VF_ERANGE, w->file, w->sequences.line, w->sequences.col, "no sequences");
  struct compose *c = calloc(1, sizeof *c);
  if (!c) return VF_ENOMEM;
  memset(c->s.phase_index, -1, sizeof c->s.phase_index);
  c->s.last_phase = -1;
  rc = run_all(c, w, pt, env, shape.sequences, d);
  struct vf_trace_result r;
  if (!rc) {
    parts_init(w, shape.sequences, &c->parts);
    rc = interleave(c, w, pt, env, d);
  }
  if (!rc && (rc = replay(c, env, &r))) diag_line(d, rc, w->file, 0, 0, "replaying the step: %s", vf_strerror(rc));
  if (!rc) {
    report(c, &r, env, out);
    count_params(w, c, out);
  }
  compose_free(c);
  return rc;
}
