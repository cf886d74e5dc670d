/* What watch keeps between samples: per-process memory series and their trends, per-GPU
 * utilization and power, and the warnings raised when a trend changes. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/watch.h"

#define HISTORY_POINTS 4096 /* the view's memory graph */

/* Appends (t, v), first dropping what is older than keep_s except the first point. */
static int series_add(struct series *s, double t, double v, double keep_s) {
  if (s->n == s->cap) {
    size_t old = 1;
    while (old < s->n && s->t[old] < t - keep_s) old++;
    if (old > 1 && old - 1 >= s->n / 4) {
      memmove(s->t + 1, s->t + old, (s->n - old) * sizeof *s->t);
      memmove(s->v + 1, s->v + old, (s->n - old) * sizeof *s->v);
      s->n -= old - 1;
    } else {
      size_t cap = s->cap ? s->cap * 2 : 256;
      double *nt = realloc(s->t, cap * sizeof *nt);
      if (nt) s->t = nt;
      double *nv = nt ? realloc(s->v, cap * sizeof *nv) : NULL;
      if (!nv) return VF_ENOMEM;
      s->v = nv;
      s->cap = cap;
    }
  }
  s->t[s->n] = t;
  s->v[s->n++] = v;
  return 0;
}

static void series_free(struct series *s) {
  free(s->t);
  free(s->v);
  *s = (struct series){0};
}

void watch_duration(double seconds, char *buf, size_t size) {
  if (seconds < 90) snprintf(buf, size, "%.0f s", seconds);
  else if (seconds < 90 * 60) snprintf(buf, size, "%.0f min", seconds / 60);
  else snprintf(buf, size, "%.1f h", seconds / 3600);
}

static void warn(struct watch *w, unsigned gpu, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void warn(struct watch *w, unsigned gpu, const char *fmt, ...) {
  if (w->nwarn == WATCH_MAX_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->warn[w->nwarn], sizeof w->warn[0], fmt, ap);
  va_end(ap);
  w->warn_gpu[w->nwarn++] = gpu;
}

static struct wproc *find_proc(struct watch *w, unsigned gpu, uint32_t pid) {
  for (size_t i = 0; i < w->nprocs; i++)
    if (w->procs[i].gpu == gpu && w->procs[i].pid == pid) return &w->procs[i];
  if (w->nprocs == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 16;
    struct wproc *grown = realloc(w->procs, cap * sizeof *grown);
    if (!grown) return NULL;
    w->procs = grown;
    w->cap = cap;
  }
  struct wproc *p = &w->procs[w->nprocs++];
  *p = (struct wproc){.gpu = gpu, .pid = pid};
  /* Ancestry is read once: a pid is not reused while NVML still lists it. */
  p->watched = w->tree ? vf_proc_tree_has(w->tree, (pid_t)pid) : !w->root || vf_proc_in_tree((pid_t)pid, w->root);
  return p;
}

/* Warns when a process starts or stops growing. */
static void judge_proc(struct watch *w, struct wproc *p, double headroom) {
  enum vf_trend_state before = p->trend.state;
  vf_trend_analyze(p->mem.t, p->mem.v, p->mem.n, headroom, &w->o.trend, &p->trend);
  char now[32], eta[32];
  cli_format_bytes(p->used_bytes, now, sizeof now);
  if (p->trend.state == VF_TREND_GROWING && before != VF_TREND_GROWING) {
    watch_duration(p->trend.seconds_to_full, eta, sizeof eta);
    warn(w, p->gpu,
         "GPU %u pid %u (%s): " VF_LEAK_WARNING " after warm-up (+%.1f MiB/min, now %s); "
         "out of memory in ~%s at this rate",
         p->gpu, p->pid, p->name, p->trend.slope_bps * 60 / 1048576.0, now, eta);
  } else if (before == VF_TREND_GROWING && p->trend.state == VF_TREND_STEADY) {
    warn(w, p->gpu, "GPU %u pid %u (%s): memory growth stopped at %s", p->gpu, p->pid, p->name,
         now);
  }
}

/* Says once, when it starts, that the watched processes leave most of the GPU's memory
 * unused after warm-up (memory under-use: the guides' "raise the batch"). */
static void judge_headroom(struct watch *w, unsigned gpu) {
  struct wgpu *g = &w->gpus[gpu];
  bool before = g->headroom.flagged;
  vf_headroom_analyze(g->held.t, g->held.v, g->held.n, (double)g->s.total_bytes, w->o.trend.warmup_s,
                      w->o.underuse_window_s, &g->headroom);
  if (!g->headroom.flagged || before) return;
  char held[32], total[32], span[32];
  cli_format_bytes((uint64_t)g->headroom.held_bytes, held, sizeof held);
  cli_format_bytes(g->s.total_bytes, total, sizeof total);
  watch_duration(w->o.underuse_window_s, span, sizeof span);
  warn(w, gpu, "GPU %u memory headroom: the watched processes held at most %s (%.0f%% of %s) for the last %s "
               "after warm-up; the batch could grow at least %.1fx before they hold %.0f%% of it%s%s",
       gpu, held, 100 * g->headroom.share, total, span, g->headroom.growth, 100 * VF_HEADROOM_USE,
       w->plan[0] ? "; " : " ('vramfit probe' finds how far)", w->plan);
}

static int track_procs(struct watch *w, unsigned gpu) {
  const struct vf_gpu_sample *s = &w->gpus[gpu].s;
  uint64_t tree = 0;
  for (size_t i = 0; i < s->nprocs; i++) {
    const struct vf_gpu_proc *sp = &s->procs[i];
    struct wproc *p = find_proc(w, gpu, sp->pid);
    if (!p) return VF_ENOMEM;
    p->seen = true;
    snprintf(p->name, sizeof p->name, "%s", sp->name[0] ? sp->name : "?");
    if (!p->watched || sp->used_bytes == VF_BYTES_UNKNOWN) continue;
    if (w->root || w->tree) w->gpus[gpu].tree_seen = true;
    p->used_bytes = sp->used_bytes;
    tree += sp->used_bytes;
    int rc = series_add(&p->mem, w->now, (double)sp->used_bytes, w->o.trend.window_s);
    if (rc) return rc;
    if (s->fields & VF_FIELD_MEMORY) judge_proc(w, p, (double)s->free_bytes);
  }
  if (tree > w->tree_peak) w->tree_peak = tree, w->tree_peak_gpu = gpu;
  if (!tree || !(s->fields & VF_FIELD_MEMORY)) return 0;
  int rc = series_add(&w->gpus[gpu].held, w->now, (double)tree, w->o.underuse_window_s);
  if (!rc) judge_headroom(w, gpu);
  return rc;
}

/* Under-use is judged only while a watched process holds memory on the GPU. */
static bool gpu_busy_with_watched(const struct watch *w, unsigned gpu) {
  for (size_t i = 0; i < w->nprocs; i++)
    if (w->procs[i].gpu == gpu && w->procs[i].seen && w->procs[i].watched) return true;
  return false;
}

static int track_gpu(struct watch *w, unsigned i) {
  struct wgpu *g = &w->gpus[i];
  const struct vf_gpu_sample *s = &g->s;
  double keep = w->o.underuse_window_s;
  int rc = 0;
  if (s->fields & VF_FIELD_MEMORY)
    rc = series_add(&g->used, w->now, (double)s->used_bytes, w->o.interval * HISTORY_POINTS);
  if (rc || !(s->fields & VF_FIELD_UTIL) || !gpu_busy_with_watched(w, i)) return rc;
  bool power = (s->fields & VF_FIELD_POWER) && (s->fields & VF_FIELD_POWER_LIMIT);
  rc = series_add(&g->util, w->now, s->util_gpu, keep);
  if (!rc) rc = series_add(&g->power, w->now, power ? s->power_mw / (double)s->power_limit_mw : -1,
                           keep);
  if (rc) return rc;
  bool before = g->under.flagged;
  vf_underuse_analyze(g->util.t, g->util.v, g->power.v, g->util.n, keep, &g->under);
  if (g->under.flagged && !before) {
    char span[32], power_text[48] = "";
    watch_duration(keep, span, sizeof span);
    if (g->under.power_ratio >= 0)
      snprintf(power_text, sizeof power_text, ", power %.0f%% of its limit",
               g->under.power_ratio * 100);
    warn(w, i, "GPU %u under-used for the last %s: utilization %.0f%%%s (input pipeline "
               "stalls or a batch too small for this GPU?)",
         i, span, g->under.util_mean, power_text);
  }
  return 0;
}

/* Processes that left: their history goes, and a pid that comes back starts afresh. */
static void drop_gone(struct watch *w) {
  size_t kept = 0;
  for (size_t i = 0; i < w->nprocs; i++) {
    if (w->procs[i].seen || w->gpus[w->procs[i].gpu].err) w->procs[kept++] = w->procs[i];
    else series_free(&w->procs[i].mem);
  }
  w->nprocs = kept;
}

int watch_sample(struct watch *w, double now) {
  w->now = now;
  w->nwarn = 0;
  for (size_t i = 0; i < w->nprocs; i++) w->procs[i].seen = false;
  for (unsigned i = 0; i < w->ngpus; i++) {
    struct wgpu *g = &w->gpus[i];
    g->err = vf_nvml_sample(w->nvml, i, &g->s);
    if (g->err) continue;
    int rc = track_procs(w, i);
    if (!rc) rc = track_gpu(w, i);
    if (rc) return rc;
  }
  drop_gone(w);
  w->samples++;
  return 0;
}

bool watch_gpu_shown(const struct watch *w, unsigned i) {
  bool any = false;
  for (unsigned g = 0; g < w->ngpus; g++) any = any || w->gpus[g].tree_seen;
  return !any || w->gpus[i].tree_seen;
}

void watch_free(struct watch *w) {
  for (size_t i = 0; i < w->nprocs; i++) series_free(&w->procs[i].mem);
  for (unsigned i = 0; i < w->ngpus; i++) {
    series_free(&w->gpus[i].used);
    series_free(&w->gpus[i].util);
    series_free(&w->gpus[i].power);
    series_free(&w->gpus[i].held);
  }
  free(w->procs);
  free(w->gpus);
  w->procs = NULL;
  w->gpus = NULL;
}
