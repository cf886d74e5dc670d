/* The estimator as the rest of src/core/ calls it beyond the public vf_estimate(): the
 * quick estimate for searches, and the replaying one that lets tests check the layer
 * extension against a replay of every layer. */
#ifndef VF_CORE_ESTIMATE_ESTIMATE_H
#define VF_CORE_ESTIMATE_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit.h"

/* vf_estimate(), replaying models of up to replay_max layers one by one (vf_estimate: all
 * of them; estimate_quick: 6) and extending deeper ones from replays of 3 and 6 layers; fn
 * (may be NULL) hears every replayed event. */
int estimate_replaying(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                       const struct vf_alloc_conf *alloc, uint64_t replay_max, vf_timeline_fn fn, void *arg,
                       struct vf_estimate *out, struct vf_diag *d);

/* vf_estimate() from replays of 3 and 6 layers extended to all: about ten times faster on
 * deep models, its reserved figure looser. For searches (plan), whose choice is then
 * replayed in full. */
int estimate_quick(const struct vf_model *m, const struct vf_setup *s, const struct vf_profile *p,
                   const struct vf_alloc_conf *alloc, struct vf_estimate *out, struct vf_diag *d);

/* Whether the framework of p runs loss and it is not the framework's own: a loss a plan
 * may switch to. */
bool estimate_loss_differs(const struct vf_profile *p, enum vf_loss loss);

#endif
