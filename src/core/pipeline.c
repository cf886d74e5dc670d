#include "core/pipeline.h"
#include "core/profile.h"

uint64_t pipeline_chunks(enum vf_pp_schedule schedule, const struct vf_profile *p) {
  return schedule == VF_PP_INTERLEAVED && p->pp_stages_per_rank > 1 ? p->pp_stages_per_rank : 1;
}

/* torchtitan@9dec370 generate_split_points: the first split after the quotient, each
 * following one a layer further while the remainder lasts (parallelisms/pipelining_utils.py). */
uint64_t pipeline_stage_layers(uint64_t layers, uint64_t stages, uint64_t stage, bool even) {
  uint64_t base = layers / stages, extra = layers % stages;
  if (even || stages == 1) return base;
  if (stage == 0) return base;
  if (stage + 1 < stages) return base + (stage <= extra);
  uint64_t middle = stages - 2, boosted = extra < middle ? extra : middle;
  return layers - base * (stages - 1) - boosted;
}

uint64_t pipeline_rank_layers(uint64_t layers, uint64_t pp, uint64_t chunks, uint64_t rank, bool even) {
  uint64_t n = 0;
  for (uint64_t c = 0; c < chunks; c++) n += pipeline_stage_layers(layers, pp * chunks, rank + c * pp, even);
  return n;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

uint64_t pipeline_chunks_in_flight(enum vf_pp_schedule schedule, uint64_t pp, uint64_t chunks, uint64_t m,
                                   uint64_t rank) {
  switch (schedule) {
  case VF_PP_GPIPE:
    return m;
  case VF_PP_INTERLEAVED: {
    /* torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B (get_rank_warmup_ops,
     * microbatches_per_round = m / max(1, m / pp)); Megatron core_v0.9.0
     * pipeline_parallel/schedules.py: (pp - rank - 1) * 2 + (chunks - 1) * pp warm-up
     * micro batches, the same when pp divides m. */
    uint64_t rounds = m / pp ? m / pp : 1, per_round = m / rounds;
    uint64_t warmup = (chunks - 1) * per_round + 2 * (pp - 1 - rank);
    return min_u64(warmup + 1, m * chunks);
  }
  case VF_PP_1F1B:
    return min_u64(m, pp - rank);
  default:
    return 1;
  }
}

/* torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B (the same in the 2.6
 * era and in the newest stored release): number_of_rounds =
 * max(1, m // pp) and backward_stage_index gives the k-th backward of a rank to its local
 * stage chunks - 1 - (k // microbatches_per_round) % chunks; in one round (m < 2 pp) that
 * is m backwards of each chunk in turn, the last chunk first. */
bool pipeline_chunk_backwards_apart(enum vf_pp_schedule schedule, uint64_t pp, uint64_t chunks, uint64_t m) {
  return schedule == VF_PP_INTERLEAVED && chunks > 1 && m / pp <= 1;
}

size_t pipeline_ranks_to_replay(uint64_t pp, uint64_t ranks[3]) {
  size_t n = 0;
  ranks[n++] = 0;
  if (pp > 1) ranks[n++] = pp - 1;
  if (pp > 2) ranks[n++] = 1;
  return n;
}
