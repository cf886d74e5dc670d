/* Pipeline parallelism as the schedules lay it out: which layers each rank holds and how
 * many micro batches' activations it keeps at once. Pure arithmetic, for the estimator, the
 * planner and tests. */
#ifndef VF_CORE_PIPELINE_H
#define VF_CORE_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "vramfit.h"

/* Model chunks per rank: the profile's under the interleaved schedule, else one. */
uint64_t pipeline_chunks(enum vf_pp_schedule schedule, const struct vf_profile *p);

/* Blocks of one of `stages` virtual stages: the same for every stage (even), or as
 * torchtitan splits them: the first stage the quotient, the following ones one more while
 * the remainder lasts, the last what is left. */
uint64_t pipeline_stage_layers(uint64_t layers, uint64_t stages, uint64_t stage, bool even);

/* Blocks a rank holds: its chunks are the virtual stages rank, rank + pp, rank + 2 pp, ... */
uint64_t pipeline_rank_layers(uint64_t layers, uint64_t pp, uint64_t chunks, uint64_t rank, bool even);

/* Model-chunk forwards whose activations a rank holds at its fullest, of m micro batches:
 * every one under GPipe; under 1F1B the warm-up forwards and the one that starts the
 * steady state, min(m, pp - rank); interleaved, (chunks - 1) rounds of micro batches plus
 * two per rank downstream, plus one, at most all m x chunks. */
uint64_t pipeline_chunks_in_flight(enum vf_pp_schedule schedule, uint64_t pp, uint64_t chunks, uint64_t m,
                                   uint64_t rank);

/* Whether a rank runs its model chunks' backwards one chunk after the other, the last
 * chunk's m first: PyTorch's interleaved schedule with one round of micro batches. */
bool pipeline_chunk_backwards_apart(enum vf_pp_schedule schedule, uint64_t pp, uint64_t chunks, uint64_t m);

/* The ranks worth replaying, at most three: the first (embedding, most in flight), the last
 * (head and loss) and the second (the most in flight of the ranks that hold blocks only). */
size_t pipeline_ranks_to_replay(uint64_t pp, uint64_t ranks[3]);

#endif
