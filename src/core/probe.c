/* The batch search of 'vramfit probe'. Each launch of a training run costs minutes, so the
 * search spends launches where the answer is likely: at the estimator's figure first, in
 * small steps around it, and only then further out. */
#include "core/bisect.h"
#include "vramfit/probe.h"

#include "core/diag.h"

const char *vf_probe_outcome_name(enum vf_probe_outcome o) {
  static const char *const names[] = {"ok", "oom", "error", "timeout"};
  return o <= VF_PROBE_TIMEOUT ? names[o] : "unknown";
}

int vf_probe_init(struct vf_probe *p, uint64_t min, uint64_t max, uint64_t hint) {
  if (min < 1 || min > max) return VF_EINVAL;
  uint64_t start = hint < min ? min : hint > max ? max : hint;
  /* An estimate is usually right within ~10%: a first step of an eighth brackets it in two
   * launches. Without one, doubling from min is the best that can be done. */
  uint64_t step = hint ? start / 8 : start;
  *p = (struct vf_probe){.min = min, .max = max, .start = start, .step = step ? step : 1};
  return 0;
}

static uint64_t step_up(const struct vf_probe *p) {
  return p->step > p->max - p->fit ? p->max : p->fit + p->step;
}

/* Down by the step, but at least halving, so that a hint far too high costs only a
 * logarithm of launches. */
static uint64_t step_down(const struct vf_probe *p) {
  uint64_t step = p->step < p->oom / 2 ? p->step : p->oom / 2;
  uint64_t next = p->oom - step;
  return next < p->min ? p->min : next;
}

uint64_t vf_probe_next(const struct vf_probe *p) {
  if (p->stopped) return 0;
  if (!p->launches) return p->start;
  if (p->fit && p->oom) return p->oom - p->fit > 1 ? p->fit + (p->oom - p->fit) / 2 : 0;
  if (p->fit) return p->fit < p->max ? step_up(p) : 0;
  return p->oom > p->min ? step_down(p) : 0;
}

int vf_probe_record(struct vf_probe *p, uint64_t batch, enum vf_probe_outcome o) {
  if (!batch || batch != vf_probe_next(p)) return VF_EINVAL;
  bool stepping_out = p->launches > 0 && !(p->fit && p->oom);
  p->launches++;
  if (o == VF_PROBE_ERROR) p->stopped = true;
  else if (o == VF_PROBE_OOM) p->oom = batch;
  else p->fit = batch;
  if (stepping_out && p->step <= UINT64_MAX / 2) p->step *= 2;
  return 0;
}

/* Whether batch's estimated device peak fits. A batch the estimator refuses as implausibly
 * large does not; any other refusal already shows at the smallest batch. */
static int fits(const struct vf_model *m, struct vf_setup *s, const struct vf_profile *prof,
                const struct vf_alloc_conf *alloc, uint64_t batch, bool *ok, struct vf_diag *d) {
  s->batch = batch;
  struct vf_estimate e;
  int rc = vf_estimate(m, s, prof, alloc, &e, d);
  *ok = !rc && e.device_peak <= s->capacity_bytes;
  return rc;
}

struct fit_arg {
  const struct vf_model *m;
  struct vf_setup *s;
  const struct vf_profile *prof;
  const struct vf_alloc_conf *alloc;
};

static bool batch_fits(uint64_t batch, void *arg) {
  struct fit_arg *f = arg;
  bool ok;
  fits(f->m, f->s, f->prof, f->alloc, batch, &ok, NULL);
  return ok;
}

int vf_estimate_max_batch(const struct vf_model *m, const struct vf_setup *s,
                          const struct vf_profile *prof, const struct vf_alloc_conf *alloc,
                          uint64_t min, uint64_t max, uint64_t *out, struct vf_diag *d) {
  if (!s->capacity_bytes || min < 1 || min > max)
    return vf_diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "the largest batch needs a GPU and a range");
  struct vf_setup t = *s;
  bool ok;
  int rc = fits(m, &t, prof, alloc, min, &ok, d);
  *out = 0;
  if (rc || !ok) return rc;
  struct fit_arg f = {m, &t, prof, alloc};
  *out = vf_last_fitting(min, max, batch_fits, &f);
  return 0;
}
