/* The parallel layout against what the framework can run: a pipeline it has, with a schedule
 * it has, over layers it can split that way. */
#include <stdio.h>

#include "base/diag.h"
#include "core/pipeline.h"
#include "core/profile.h"
#include "vramfit.h"

typedef unsigned long long ull;

static int bad(struct vf_diag *d, const char *why) { return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "%s", why); }

/* "1f1b, interleaved-1f1b": the schedules a profile lists. */
static void schedule_list(uint32_t bits, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (int k = VF_PP_GPIPE; k <= VF_PP_INTERLEAVED && o < size; k++)
    if (bits & (1u << k))
      o += (size_t)snprintf(buf + o, size - o, "%s%s", o ? ", " : "", vf_enum_name(VF_ENUM_PP_SCHEDULE, k));
}

static int check_schedule(const struct vf_setup *s, const struct vf_profile *p, struct vf_diag *d) {
  char msg[256], list[96];
  if (s->pp == 1 && s->pp_schedule != VF_PP_NONE) return bad(d, "--pp-schedule needs --pp 2 or more");
  if (s->pp == 1) return 0;
  if (!p->pp_schedules) {
    snprintf(msg, sizeof msg, "--pp %llu: %s has no pipeline parallelism", (ull)s->pp, p->name);
    return bad(d, msg);
  }
  if (p->pp_schedules & (1u << s->pp_schedule)) return 0;
  schedule_list(p->pp_schedules, list, sizeof list);
  snprintf(msg, sizeof msg, "--pp-schedule %s: %s runs %s", vf_enum_name(VF_ENUM_PP_SCHEDULE, s->pp_schedule),
           p->name, list);
  return bad(d, msg);
}

static int check_stages(const struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p,
                        struct vf_diag *d) {
  char msg[256], chunks_text[48] = "";
  uint64_t chunks = pipeline_chunks(s->pp_schedule, p), stages = s->pp * chunks, layers = m->arch.layers;
  if (chunks > 1) snprintf(chunks_text, sizeof chunks_text, " x %llu model chunks", (ull)chunks);
  if (stages > layers) {
    snprintf(msg, sizeof msg, "--pp %llu%s makes %llu stages, more than the %llu layers", (ull)s->pp, chunks_text,
             (ull)stages, (ull)layers);
    return bad(d, msg);
  }
  if (p->pp_even_layers && layers % stages) {
    snprintf(msg, sizeof msg, "--pp %llu%s does not divide the %llu layers: %s gives every stage as many",
             (ull)s->pp, chunks_text, (ull)layers, p->name);
    return bad(d, msg);
  }
  /* Megatron core_v0.9.0 pipeline_parallel/schedules.py: the interleaved schedule needs the
   * micro batches in whole groups of pp. */
  if (s->pp_schedule == VF_PP_INTERLEAVED && p->pp_even_layers && s->accumulation % s->pp) {
    snprintf(msg, sizeof msg, "--pp-schedule interleaved-1f1b: %s needs the micro batches (--accumulation %llu) "
             "in whole groups of --pp %llu", p->name, (ull)s->accumulation, (ull)s->pp);
    return bad(d, msg);
  }
  return 0;
}

int vf_layout_validate(const struct vf_setup *s, const struct vf_model *m, const struct vf_profile *p,
                       struct vf_diag *d) {
  int rc = check_schedule(s, p, d);
  if (!rc && s->pp > 1) rc = check_stages(s, m, p, d);
  return rc;
}
