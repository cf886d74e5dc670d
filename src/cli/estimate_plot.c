/* --plot of `vramfit estimate` (estimate_plot.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/estimate_plot.h"

void estimate_plot_init(struct estimate_plot *p, const char *path) {
  memset(p, 0, sizeof *p);
  p->path = path;
}

void estimate_plot_cleanup(struct estimate_plot *p) {
  free(p->points[0]);
  free(p->points[1]);
  estimate_plot_init(p, NULL);
}

void estimate_plot_add(struct estimate_plot *p, const struct vf_timeline_event *e) {
  int s = e->stage ? 1 : 0;
  if (p->oom) return;
  if (p->n[s] == p->cap[s]) {
    size_t cap = p->cap[s] ? 2 * p->cap[s] : 16384;
    struct vf_plot_point *grown = realloc(p->points[s], cap * sizeof *grown);
    if (!grown) {
      p->oom = true;
      return;
    }
    p->points[s] = grown;
    p->cap[s] = cap;
  }
  p->points[s][p->n[s]++] = (struct vf_plot_point){e->allocated, e->reserved, e->phase};
}

static uint64_t highest_allocated(const struct vf_plot_point *pts, size_t n) {
  uint64_t top = 0;
  for (size_t i = 0; i < n; i++)
    if (pts[i].allocated > top) top = pts[i].allocated;
  return top;
}

static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, size - n, fmt, ap);
  va_end(ap);
}

/* "hf, sdpa attention, bf16 weights, lora r 8, adamw, batch 1 x 2048 tokens, ...": what
 * sets the memory, as the estimate resolved it. */
static void describe_setup(const struct setup_request *r, const struct vf_estimate *e, int stage,
                           char *buf, size_t size) {
  const struct vf_setup *s = &r->setup;
  snprintf(buf, size, "%s, %s attention, %s weights", r->framework, vf_enum_name(VF_ENUM_ATTENTION, e->attention),
           vf_enum_name(VF_ENUM_PRECISION, s->weights));
  if (s->amp != VF_PREC_NONE) append(buf, size, ", %s autocast", vf_enum_name(VF_ENUM_PRECISION, s->amp));
  append(buf, size, ", %s", vf_enum_name(VF_ENUM_METHOD, s->method));
  if (s->method == VF_METHOD_LORA || s->method == VF_METHOD_QLORA || s->method == VF_METHOD_DORA)
    append(buf, size, " r %llu", (unsigned long long)s->lora_r);
  enum vf_quant quant = vf_setup_quant(s);
  if (quant != VF_QUANT_NONE) append(buf, size, " on %s", vf_enum_name(VF_ENUM_QUANT, quant));
  append(buf, size, ", %s, batch %llu x %llu tokens, %llu micro batch%s a step",
         vf_enum_name(VF_ENUM_OPTIMIZER, s->optimizer), (unsigned long long)s->batch, (unsigned long long)s->seq,
         (unsigned long long)e->accumulation, e->accumulation == 1 ? "" : "es");
  if (s->grad_ckpt != VF_CKPT_NONE) append(buf, size, ", %s checkpointing", vf_enum_name(VF_ENUM_CKPT, s->grad_ckpt));
  if (s->gpus > 1)
    append(buf, size, ", %llu GPUs %s", (unsigned long long)s->gpus,
           s->shard == VF_SHARD_NONE ? "DDP" : vf_enum_name(VF_ENUM_SHARD, s->shard));
  if (s->tp > 1) append(buf, size, ", tp %llu", (unsigned long long)s->tp);
  if (s->pp > 1) append(buf, size, ", pp %llu (its %s stage)", (unsigned long long)s->pp, stage ? "last" : "first");
  if (s->cp > 1) append(buf, size, ", cp %llu", (unsigned long long)s->cp);
}

int estimate_plot_write(const struct estimate_plot *p, const struct setup_request *r,
                        const struct setup_context *c, const struct vf_estimate *e) {
  if (p->oom) return cli_error("estimate", EXIT_INTERNAL, "--plot %s: out of memory", p->path);
  int stage = p->n[1] && highest_allocated(p->points[0], p->n[0]) != e->allocated_peak;
  char title[256], subtitle[512];
  snprintf(title, sizeof title, "%s: GPU memory over the run, as vramfit estimates it", c->model.name);
  describe_setup(r, e, stage, subtitle, sizeof subtitle);
  struct vf_plot plot = {.title = title, .subtitle = subtitle, .points = p->points[stage], .n_points = p->n[stage],
                         .estimate = e, .capacity = c->gpu.capacity_bytes, .gpu = c->gpu.name};
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_plot_svg_write(&plot, p->path, &d);
  return rc ? cli_diag_error("estimate", rc, &d) : EXIT_OK;
}
