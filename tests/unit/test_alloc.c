/* The caching-allocator model against hand-computed PyTorch behaviour
 * (shared/research/allocator.md §2-§7). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "vramfit.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

static struct vf_alloc_conf conf_of(const char *text) {
  struct vf_alloc_conf c;
  struct vf_diag d;
  assert_int_equal(vf_alloc_conf_parse(text, &c, &d), 0);
  return c;
}

static struct vf_alloc_stats stats_of(const struct vf_allocator *a) {
  struct vf_alloc_stats s;
  vf_allocator_stats(a, &s);
  return s;
}

static uint64_t must_malloc(struct vf_allocator *a, uint64_t bytes, uint32_t stream) {
  uint64_t id = 0;
  assert_int_equal(vf_allocator_malloc(a, bytes, stream, &id), 0);
  assert_true(id != 0);
  return id;
}

/* ---- sizes ---- */

static void worked_examples_table(void **state) {
  (void)state;
  static const struct {
    uint64_t request, block, segment;
  } rows[] = {
      {1, 512, 2 * MiB},
      {700, 1024, 2 * MiB},
      {1 * MiB, 1 * MiB, 2 * MiB},
      {1048577, 1049088, 20 * MiB},
      {5 * MiB, 5 * MiB, 20 * MiB},
      {10 * MiB - 1, 10 * MiB, 10 * MiB},
      {50 * MiB + 1, 50 * MiB + 512, 52 * MiB},
  };
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
    uint64_t block = vf_alloc_round_size(&c, rows[i].request);
    assert_int_equal(block, rows[i].block);
    assert_int_equal(vf_alloc_segment_size(&c, block), rows[i].segment);

    /* The simulator agrees: one segment of that size, one block of that size. */
    struct vf_allocator a;
    assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
    must_malloc(&a, rows[i].request, 0);
    struct vf_alloc_stats s = stats_of(&a);
    assert_int_equal(s.allocated, rows[i].block);
    assert_int_equal(s.requested, rows[i].request);
    assert_int_equal(s.reserved, rows[i].segment);
    assert_int_equal(s.segments, 1);
    vf_allocator_cleanup(&a);
  }
}

static void small_requests_share_a_2mib_segment(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  must_malloc(&a, 1 * MiB, 0);
  must_malloc(&a, 700, 0);
  assert_int_equal(stats_of(&a).reserved, 2 * MiB);
  /* 1 MiB - 1024 bytes are left: the next 1 MiB needs a second small segment. */
  must_malloc(&a, 1 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 4 * MiB);
  assert_int_equal(stats_of(&a).segments, 2);
  vf_allocator_cleanup(&a);
}

static void roundup_power2_divisions(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("roundup_power2_divisions:4");
  assert_int_equal(vf_alloc_round_size(&c, 300 * MiB + 1), 320 * MiB);
  assert_int_equal(vf_alloc_round_size(&c, 300 * MiB), 320 * MiB);
  assert_int_equal(vf_alloc_round_size(&c, 320 * MiB), 320 * MiB);
  assert_int_equal(vf_alloc_round_size(&c, 256 * MiB), 256 * MiB);
  /* The docs' 1200 B -> 1280 example is guarded out: 1200 is not > 512 x 4. */
  assert_int_equal(vf_alloc_round_size(&c, 1200), 1536);
  assert_int_equal(vf_alloc_round_size(&c, 2049), 2560);

  /* Per-interval lists; 1 division is off. */
  c = conf_of("roundup_power2_divisions:[256:1,512:2,>:8]");
  assert_int_equal(vf_alloc_round_size(&c, 300 * MiB + 1), 300 * MiB + 512);
  assert_int_equal(vf_alloc_round_size(&c, 600 * MiB), 768 * MiB);
  assert_int_equal(vf_alloc_round_size(&c, 1100 * MiB), 1152 * MiB);
  assert_int_equal(vf_alloc_round_size(&c, 3 * MiB + 1), 3 * MiB + 512);

  /* cudaMallocAsync ignores them. */
  c = conf_of("roundup_power2_divisions:4,backend:cudaMallocAsync");
  assert_int_equal(vf_alloc_round_size(&c, 300 * MiB + 1), 300 * MiB + 512);
}

/* ---- block reuse and splitting ---- */

static void large_segment_remainder_is_reused(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  must_malloc(&a, 1 * MiB + 1, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(s.inactive_split_bytes, 20 * MiB - 1049088);

  must_malloc(&a, 5 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.num_device_alloc, 1);
  assert_int_equal(s.allocated, 1049088 + 5 * MiB);
  assert_int_equal(s.inactive_split_bytes, 20 * MiB - 1049088 - 5 * MiB);
  vf_allocator_cleanup(&a);
}

static void split_remainder_of_52mib_segment(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t big = must_malloc(&a, 50 * MiB + 1, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 52 * MiB);
  assert_int_equal(s.inactive_split_bytes, 2 * MiB - 512);

  /* 1.5 MiB fits the remainder; what is left (< 1 MiB) is not split off, so the whole
   * remainder is allocated. */
  must_malloc(&a, 1536 * KiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 52 * MiB);
  assert_int_equal(s.allocated, 52 * MiB);
  assert_int_equal(s.inactive_split_bytes, 0);

  /* Freeing the front leaves it split and cached. */
  assert_int_equal(vf_allocator_free(&a, big), 0);
  s = stats_of(&a);
  assert_int_equal(s.inactive_split_bytes, 50 * MiB + 512);
  assert_int_equal(s.allocated, 2 * MiB - 512);
  vf_allocator_cleanup(&a);
}

static void merge_on_free_restores_the_segment(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 6 * MiB, 0);
  uint64_t y = must_malloc(&a, 6 * MiB, 0);
  uint64_t z = must_malloc(&a, 6 * MiB, 0);
  assert_int_equal(stats_of(&a).segments, 1);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(stats_of(&a).inactive_split_bytes, 12 * MiB + 2 * MiB);
  assert_int_equal(vf_allocator_free(&a, z), 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.inactive_split_bytes, 0);
  assert_int_equal(s.allocated, 0);
  /* The whole segment is one free block again: a 20 MiB request takes it. */
  must_malloc(&a, 20 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 20 * MiB);
  assert_int_equal(vf_allocator_empty_cache(&a), 0);
  assert_int_equal(stats_of(&a).reserved, 20 * MiB);
  vf_allocator_cleanup(&a);
}

static void max_split_size_and_rounding_limit(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("max_split_size_mb:40");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  assert_int_equal(vf_allocator_free(&a, must_malloc(&a, 100 * MiB, 0)), 0);

  /* 90 MiB is oversize too and within 20 MiB: the 100 MiB block serves it unsplit. */
  uint64_t id = must_malloc(&a, 90 * MiB, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.allocated, 100 * MiB);
  assert_int_equal(s.reserved, 100 * MiB);
  assert_int_equal(s.inactive_split_bytes, 0);
  assert_int_equal(vf_allocator_free(&a, id), 0);

  /* 70 MiB would waste 30 MiB >= max_non_split_rounding: a new segment. */
  id = must_malloc(&a, 70 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 170 * MiB);
  assert_int_equal(vf_allocator_free(&a, id), 0);

  /* A request below max_split_size never takes an oversize block. */
  must_malloc(&a, 30 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 200 * MiB);
  assert_int_equal(s.segments, 3);
  vf_allocator_cleanup(&a);

  c = conf_of("max_split_size_mb:40,max_non_split_rounding_mb:100");
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  assert_int_equal(vf_allocator_free(&a, must_malloc(&a, 100 * MiB, 0)), 0);
  must_malloc(&a, 70 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 100 * MiB);
  assert_int_equal(s.allocated, 100 * MiB);
  vf_allocator_cleanup(&a);
}

static void oom_retry_releases_oversize_blocks_first(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("max_split_size_mb:40");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 170 * MiB), 0);
  uint64_t x = must_malloc(&a, 60 * MiB, 0);
  uint64_t y = must_malloc(&a, 80 * MiB, 0);
  uint64_t small = must_malloc(&a, 5 * MiB, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  assert_int_equal(vf_allocator_free(&a, small), 0);
  assert_int_equal(stats_of(&a).reserved, 160 * MiB);

  /* 30 MiB may not take an oversize block and 160 + 30 > 170: the smallest oversize
   * block >= max_split_size (60 MiB) is freed and cudaMalloc succeeds without the
   * full-cache retry; the unsplit 20 MiB segment stays cached. */
  must_malloc(&a, 30 * MiB, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 130 * MiB);
  assert_int_equal(s.num_alloc_retries, 0);
  assert_int_equal(s.segments, 3);

  /* 100 MiB: freeing the largest oversize blocks (80 MiB) is not enough, so the whole
   * cache goes (the 20 MiB segment too) and the retry succeeds. */
  must_malloc(&a, 100 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 130 * MiB);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.segments, 2);
  vf_allocator_cleanup(&a);
}

/* ---- fragmentation and OOM ---- */

static void oom_retry_frees_cached_segments(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 64 * MiB), 0);
  uint64_t x = must_malloc(&a, 20 * MiB, 0);
  uint64_t y = must_malloc(&a, 20 * MiB, 0);
  must_malloc(&a, 20 * MiB, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.allocated, 20 * MiB);
  assert_int_equal(s.reserved, 60 * MiB);

  /* 60 + 30 > 64: cudaMalloc fails, both cached segments go, the retry succeeds. */
  must_malloc(&a, 30 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 50 * MiB);
  assert_int_equal(s.peak_reserved, 60 * MiB);
  assert_int_equal(s.segments, 2);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.num_ooms, 0);
  vf_allocator_cleanup(&a);
}

static void fragmentation_causes_oom(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 44 * MiB), 0);
  must_malloc(&a, 6 * MiB, 0);
  uint64_t mid = must_malloc(&a, 6 * MiB, 0);
  must_malloc(&a, 6 * MiB, 0);
  assert_int_equal(vf_allocator_free(&a, mid), 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.allocated, 12 * MiB);
  assert_int_equal(s.reserved, 20 * MiB);
  assert_int_equal(s.inactive_split_bytes, 8 * MiB); /* 6 MiB hole + 2 MiB tail */

  must_malloc(&a, 16 * MiB, 0);
  /* 16 MiB are unused on the device, but the 10 MiB request fits no hole and a new
   * segment does not fit: the split segment cannot be released. */
  uint64_t id = 123;
  assert_int_equal(vf_allocator_malloc(&a, 10 * MiB, 0, &id), VF_ERANGE);
  assert_int_equal(id, 0);
  s = stats_of(&a);
  assert_int_equal(s.allocated, 28 * MiB);
  assert_int_equal(s.reserved, 36 * MiB);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.num_ooms, 1);
  /* A 6 MiB request still fits the hole. */
  must_malloc(&a, 6 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 36 * MiB);
  vf_allocator_cleanup(&a);
}

static void per_process_fraction_and_garbage_collection(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("per_process_memory_fraction:0.5");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 200 * MiB), 0);
  must_malloc(&a, 80 * MiB, 0);
  uint64_t id;
  assert_int_equal(vf_allocator_malloc(&a, 30 * MiB, 0, &id), VF_ERANGE);
  vf_allocator_cleanup(&a);

  /* GC above 0.5 x 100 MiB: both cached 30 MiB segments are old enough to go. */
  c = conf_of("per_process_memory_fraction:0.5,garbage_collection_threshold:0.5");
  assert_int_equal(vf_allocator_init(&a, &c, 200 * MiB), 0);
  uint64_t x = must_malloc(&a, 30 * MiB, 0);
  uint64_t y = must_malloc(&a, 30 * MiB, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  must_malloc(&a, 40 * MiB, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 40 * MiB);
  assert_int_equal(s.segments, 1);
  assert_int_equal(s.num_alloc_retries, 0);
  vf_allocator_cleanup(&a);
}

/* ---- expandable segments ---- */

static void expandable_segments_round_to_pages(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("expandable_segments:True");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 1 * MiB + 1, 0);
  assert_int_equal(stats_of(&a).reserved, 20 * MiB);
  uint64_t y = must_malloc(&a, 25 * MiB, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.allocated, 1049088 + 25 * MiB);
  assert_int_equal(s.reserved, 40 * MiB); /* allocated rounded up to 20 MiB pages */
  /* memory_stats() counts no expandable segment among "segment" (torch 2.13's allocator
   * on bench/alloc_check). */
  assert_int_equal(s.segments, 0);
  must_malloc(&a, 30 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 60 * MiB);

  /* Small pool: 2 MiB pages in its own segment. */
  for (int i = 0; i < 3; i++) must_malloc(&a, 1 * MiB, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 60 * MiB + 4 * MiB);
  assert_int_equal(s.segments, 0);

  /* empty_cache unmaps only whole free pages. */
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  assert_int_equal(vf_allocator_empty_cache(&a), 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 40 * MiB + 4 * MiB);
  assert_int_equal(s.inactive_split_bytes, 0);
  vf_allocator_cleanup(&a);
}

static void expandable_oom_unmaps_free_pages(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("expandable_segments:True");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 80 * MiB), 0);
  uint64_t x = must_malloc(&a, 35 * MiB, 0);
  must_malloc(&a, 19 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 60 * MiB);
  assert_int_equal(vf_allocator_free(&a, x), 0);

  /* Stream 1 needs its own segment: 40 MiB more does not fit until the first page of
   * the freed 35 MiB is unmapped (its second page is shared with the live block). */
  must_malloc(&a, 30 * MiB, 1);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 80 * MiB);
  assert_int_equal(s.num_alloc_retries, 1);
  assert_int_equal(s.segments, 0);
  vf_allocator_cleanup(&a);
}

/* find_expandable_block walks the unmapped ranges by address (BlockPool's unmapped set is
 * ordered by BlockComparatorAddress), not by size: the lowest range with room wins. After
 * empty_cache leaves 20 MiB mapped at pages 40 and 47 of one segment, with 40 unmapped
 * pages before page 40 and 6 between, 647.85 MiB start at the segment's base (33 new
 * pages, 700 MiB reserved), not at page 40 over the 6-page range (31 pages, 660 MiB):
 * torch 2.13's allocator on bench/alloc_check, the case reduced from a random replay. */
static void expandable_ranges_are_searched_by_address(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("expandable_segments:True");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 851290513, 0);
  uint64_t y = must_malloc(&a, 152363619, 0);
  uint64_t z = must_malloc(&a, 1048740, 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  uint64_t w = must_malloc(&a, 5867251, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_empty_cache(&a), 0);
  assert_int_equal(vf_allocator_free(&a, z), 0);
  assert_int_equal(vf_allocator_free(&a, w), 0);
  assert_int_equal(stats_of(&a).reserved, 40 * MiB);
  must_malloc(&a, 679326156, 0);
  assert_int_equal(stats_of(&a).reserved, 700 * MiB);
  assert_int_equal(vf_allocator_check(&a), 0);
  vf_allocator_cleanup(&a);
}

static void async_backend_behaves_like_expandable(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("backend:cudaMallocAsync,max_split_size_mb:40");
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  must_malloc(&a, 50 * MiB, 0);
  must_malloc(&a, 5 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 60 * MiB);
  vf_allocator_cleanup(&a);
}

/* ---- streams, peaks, ids ---- */

static void streams_do_not_share_cached_blocks(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  assert_int_equal(vf_allocator_free(&a, must_malloc(&a, 5 * MiB, 0)), 0);
  must_malloc(&a, 5 * MiB, 7);
  assert_int_equal(stats_of(&a).reserved, 40 * MiB);
  must_malloc(&a, 5 * MiB, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 40 * MiB);
  assert_int_equal(s.segments, 2);
  vf_allocator_cleanup(&a);
}

/* recordStream / insert_events / process_events (torch 2.13 c10/cuda/
 * CUDACachingAllocator.cpp): a block another stream used is held out of the cache after its
 * free until that stream's work is done, and comes back at the next malloc. */
static void recorded_stream_holds_a_freed_block(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(vf_allocator_record_stream(&a, x, 0), 0);
  assert_int_equal(vf_allocator_record_stream(&a, x, 1), 0); /* its own stream: nothing */
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, x), VF_EINVAL);
  assert_int_equal(vf_allocator_record_stream(&a, x, 0), VF_EINVAL);
  assert_int_equal(stats_of(&a).allocated, 0);
  assert_int_equal(vf_allocator_check(&a), 0);

  /* Stream 0 has not finished with it: a new 12 MiB on stream 1 takes a new segment. */
  uint64_t y = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(stats_of(&a).reserved, 24 * MiB);
  assert_int_equal(vf_allocator_free(&a, y), 0);

  /* Once stream 0 is synchronized, the next malloc finds it cached. */
  vf_allocator_sync(&a, 0, VF_ALLOC_ALL_WORK);
  assert_int_equal(vf_allocator_check(&a), 0);
  uint64_t z = must_malloc(&a, 12 * MiB, 1);
  uint64_t w = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(stats_of(&a).reserved, 24 * MiB);
  assert_int_equal(vf_allocator_check(&a), 0);

  /* An event's synchronize completes the stream's work up to the event, not after it. */
  uint64_t mark, v = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(vf_allocator_record_stream(&a, v, 0), 0);
  assert_int_equal(vf_allocator_free(&a, v), 0);
  assert_int_equal(vf_allocator_record_event(&a, 0, &mark), 0);
  v = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(vf_allocator_record_stream(&a, v, 0), 0);
  assert_int_equal(vf_allocator_free(&a, v), 0);
  vf_allocator_sync(&a, 0, mark);
  v = must_malloc(&a, 12 * MiB, 1);
  assert_int_equal(stats_of(&a).reserved, 48 * MiB); /* the second block is still held */
  assert_int_equal(vf_allocator_free(&a, v), 0);

  /* empty_cache waits for every stream first. */
  assert_int_equal(vf_allocator_record_stream(&a, z, 5), 0);
  assert_int_equal(vf_allocator_free(&a, z), 0);
  assert_int_equal(vf_allocator_free(&a, w), 0);
  assert_int_equal(vf_allocator_empty_cache(&a), 0);
  assert_int_equal(stats_of(&a).reserved, 0);
  assert_int_equal(vf_allocator_check(&a), 0);
  vf_allocator_cleanup(&a);
}

static void peaks_and_reset(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 10 * MiB, 0);
  uint64_t y = must_malloc(&a, 10 * MiB - 100, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, y), 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.allocated, 0);
  assert_int_equal(s.peak_allocated, 20 * MiB);
  assert_int_equal(s.peak_requested, 20 * MiB - 100);
  assert_int_equal(s.peak_reserved, 20 * MiB);

  vf_allocator_reset_peaks(&a);
  s = stats_of(&a);
  assert_int_equal(s.peak_allocated, 0);
  assert_int_equal(s.peak_requested, 0);
  assert_int_equal(s.peak_reserved, 20 * MiB);
  must_malloc(&a, 4 * MiB, 0);
  assert_int_equal(stats_of(&a).peak_allocated, 4 * MiB);

  /* reset empties the model for a new replay. */
  vf_allocator_reset(&a, &c, 0);
  s = stats_of(&a);
  assert_int_equal(s.reserved, 0);
  assert_int_equal(s.peak_reserved, 0);
  vf_allocator_cleanup(&a);
}

static void ids_and_zero_bytes(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t id = 99;
  assert_int_equal(vf_allocator_malloc(&a, 0, 0, &id), 0);
  assert_int_equal(id, 0);
  assert_int_equal(vf_allocator_free(&a, 0), 0);
  assert_int_equal(stats_of(&a).reserved, 0);

  uint64_t x = must_malloc(&a, 3 * MiB, 0);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  assert_int_equal(vf_allocator_free(&a, x), VF_EINVAL);
  assert_int_equal(vf_allocator_free(&a, 12345), VF_EINVAL);
  assert_int_equal(vf_allocator_malloc(&a, UINT64_MAX, 0, &id), VF_ERANGE);
  vf_allocator_cleanup(&a);
  vf_allocator_cleanup(&a);
}

static void caching_disabled_returns_memory_on_free(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  assert_int_equal(vf_alloc_conf_from_env(NULL, NULL, "1", &c, NULL), 0);
  assert_true(c.caching_disabled);
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 0), 0);
  uint64_t x = must_malloc(&a, 1000, 0);
  must_malloc(&a, 5 * MiB, 0);
  assert_int_equal(stats_of(&a).reserved, 1024 + 5 * MiB);
  assert_int_equal(vf_allocator_free(&a, x), 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 5 * MiB);
  assert_int_equal(s.segments, 1);
  vf_allocator_cleanup(&a);
}

static void hand_filled_conf_is_sanitized(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  vf_alloc_conf_default(&c);
  c.large_segment_size = 0;
  c.per_process_memory_fraction = -3;
  c.garbage_collection_threshold = 1e300;
  c.expandable_segments = true;
  c.roundup_power2_divisions[0] = 3;
  struct vf_allocator a;
  assert_int_equal(vf_allocator_init(&a, &c, 100 * MiB), 0);
  must_malloc(&a, 2 * MiB, 0);
  must_malloc(&a, 1000, 0);
  struct vf_alloc_stats s = stats_of(&a);
  assert_int_equal(s.reserved, 20 * MiB + 2 * MiB);
  assert_int_equal(vf_allocator_check(&a), 0);
  vf_allocator_cleanup(&a);

  /* The parser clamps a huge size at 1 PiB, as PyTorch clamps at SIZE_MAX / 1 MiB. */
  c = conf_of("large_segment_size_mb:99999999999,max_split_size_mb:99999999999");
  assert_int_equal(c.large_segment_size, 1ull << 50);
  assert_int_equal(c.max_split_size, 1ull << 50);
}

static void many_events_stay_consistent(void **state) {
  (void)state;
  const char *confs[] = {"", "expandable_segments:True", "max_split_size_mb:64",
                         "roundup_power2_divisions:4", "backend:cudaMallocAsync",
                         "per_process_memory_fraction:0.7,garbage_collection_threshold:0.6",
                         "large_segment_size_mb:40,expandable_segments:True",
                         "max_split_size_mb:40,max_non_split_rounding_mb:200"};
  for (size_t k = 0; k < sizeof confs / sizeof *confs; k++) {
    struct vf_alloc_conf c = conf_of(confs[k]);
    struct vf_allocator a;
    assert_int_equal(vf_allocator_init(&a, &c, 3 * GiB), 0);
    uint64_t live[64] = {0}, seed = 12345;
    for (int step = 0; step < 5000; step++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t slot = (seed >> 33) % 64;
      uint64_t bytes = (seed >> 20) % ((seed & 1) ? 2 * MiB : 96 * MiB) + 1;
      int rc;
      if (live[slot]) {
        rc = vf_allocator_free(&a, live[slot]);
        live[slot] = 0;
      } else {
        rc = vf_allocator_malloc(&a, bytes, (uint32_t)(seed >> 60) & 1, &live[slot]);
      }
      assert_true(rc == 0 || rc == VF_ERANGE);
      /* Some blocks are used on the other stream too, and now and then a stream is done. */
      if (live[slot] && (seed >> 8) % 5 == 0)
        assert_int_equal(vf_allocator_record_stream(&a, live[slot], (uint32_t)(seed >> 40) & 1), 0);
      if (step % 31 == 0)
        vf_allocator_sync(&a, step % 93 == 0 ? VF_ALLOC_ALL_STREAMS : (uint32_t)(seed >> 50) & 1, VF_ALLOC_ALL_WORK);
      if (step % 97 == 0) assert_int_equal(vf_allocator_empty_cache(&a), 0);
      assert_int_equal(vf_allocator_check(&a), 0);
      assert_true(stats_of(&a).reserved <= 3 * GiB);
    }
    for (size_t i = 0; i < 64; i++) assert_int_equal(vf_allocator_free(&a, live[i]), 0);
    assert_int_equal(vf_allocator_empty_cache(&a), 0);
    struct vf_alloc_stats s = stats_of(&a);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.requested, 0);
    assert_int_equal(s.inactive_split_bytes, 0);
    bool grows = c.expandable_segments || c.backend_async;
    if (!grows) assert_int_equal(s.reserved, 0);
    if (!grows) assert_int_equal(s.segments, 0);
    vf_allocator_cleanup(&a);
  }
}

/* ---- configuration ---- */

static void conf_parses_valid_strings(void **state) {
  (void)state;
  struct vf_alloc_conf c = conf_of("");
  assert_int_equal(c.max_split_size, UINT64_MAX);
  assert_int_equal(c.max_non_split_rounding, 20 * MiB);
  assert_int_equal(c.large_segment_size, 20 * MiB);
  assert_false(c.expandable_segments);

  c = conf_of("max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
              "expandable_segments:True,garbage_collection_threshold:0.6,");
  assert_int_equal(c.max_split_size, 128 * MiB);
  assert_true(c.expandable_segments);
  assert_true(c.garbage_collection_threshold > 0.59 && c.garbage_collection_threshold < 0.61);
  for (int i = 0; i <= 8; i++) assert_int_equal(c.roundup_power2_divisions[i], 1);
  assert_int_equal(c.roundup_power2_divisions[9], 2);
  assert_int_equal(c.roundup_power2_divisions[10], 4);
  for (int i = 11; i < 16; i++) assert_int_equal(c.roundup_power2_divisions[i], 8);

  c = conf_of(" expandable_segments : True , backend:cudaMallocAsync ");
  assert_true(c.expandable_segments && c.backend_async);
  c = conf_of("backend:native,per_process_memory_fraction:0.75,max_non_split_rounding_mb:64");
  assert_false(c.backend_async);
  assert_true(c.per_process_memory_fraction == 0.75);
  assert_int_equal(c.max_non_split_rounding, 64 * MiB);

  /* large_segment_size_mb applies wherever it appears, and raises the floors. */
  c = conf_of("max_split_size_mb:40,large_segment_size_mb:40");
  assert_int_equal(c.large_segment_size, 40 * MiB);
  assert_int_equal(c.max_non_split_rounding, 40 * MiB);
  assert_int_equal(c.max_split_size, 40 * MiB);
  assert_int_equal(vf_alloc_segment_size(&c, 2 * MiB), 40 * MiB);

  /* Keys that do not change device memory are accepted. */
  c = conf_of("pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
              "release_lock_on_cudamalloc:False,pinned_use_background_threads:True,"
              "graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:False,"
              "pinned_reserve_segment_size_mb:64,pinned_max_round_threshold_mb:16,"
              "pinned_max_cached_size_mb:1024,expandable_segments_reserve:40G,"
              "expandable_segments_reserve_by_class:[comm:0.1,compute:0.5]");
  assert_int_equal(c.max_split_size, UINT64_MAX);
}

static void expect_error(const char *text, uint64_t offset, const char *msg) {
  struct vf_alloc_conf c;
  struct vf_diag d;
  assert_int_equal(vf_alloc_conf_parse(text, &c, &d), VF_EINVAL);
  assert_int_equal(d.code, VF_EINVAL);
  if (!strstr(d.msg, msg)) fail_msg("'%s': got '%s', want '%s'", text, d.msg, msg);
  assert_int_equal(d.offset, offset);
}

static void conf_errors_and_positions(void **state) {
  (void)state;
  expect_error("foo:1", 0, "Unrecognized key 'foo' in CUDA allocator config");
  expect_error("expandable_segments:True,bar:2", 25,
               "Unrecognized key 'bar' in CUDA allocator config");
  expect_error(",max_split_size_mb:20", 0, "Unrecognized key ',' in CUDA allocator config");
  expect_error("max_split_size_mb:19", 18,
               "CachingAllocator option max_split_size_mb too small, must be >= 20");
  expect_error("large_segment_size_mb:30,max_split_size_mb:25", 43,
               "max_split_size_mb too small, must be >= 30");
  expect_error("max_non_split_rounding_mb:10", 26,
               "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20");
  expect_error("large_segment_size_mb:10", 22,
               "CachingAllocator option large_segment_size_mb must be > 10 MB");
  expect_error("garbage_collection_threshold:1.0", 29,
               "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
  expect_error("garbage_collection_threshold:0", 29, "garbage_collect_threshold is invalid");
  expect_error("per_process_memory_fraction:1.5", 28,
               "per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
  expect_error("roundup_power2_divisions:3", 25,
               "For roundups, the divisions has to be power of 2");
  expect_error("roundup_power2_divisions:[256:3]", 30,
               "For roundups, the divisions has to be power of 2 or 0 to disable roundup");
  expect_error("roundup_power2_divisions:[300:2]", 26,
               "For roundups, the intervals have to be power of 2");
  expect_error("roundup_power2_divisions:[256:2", 25, "Expected closing bracket ']'");
  expect_error("roundup_power2_divisions:[256:2;512:4]", 30, "Expected an integer");
  expect_error("expandable_segments:true", 20,
               "Expected a single True/False argument for expandable_segments, got 'true'");
  expect_error("expandable_segments:True max_split_size_mb:40", 20,
               "Expected a single True/False argument for expandable_segments");
  expect_error("backend:foo", 8,
               "Unknown allocator backend, options are native and cudaMallocAsync");
  expect_error("max_split_size_mb", 17, "expected :, got 'end of text'");
  expect_error("max_split_size_mb:abc", 18,
               "Expected an integer for max_split_size_mb, got 'abc'");
  expect_error("max_split_size_mb:-20", 18, "Expected an integer");
  expect_error("expandable_segments:True:False", 24, "expected ,, got ':'");
  expect_error("pinned_num_register_threads:3", 28,
               "Number of register threads has to be power of 2, got 3");
  expect_error("pinned_num_register_threads:256", 28,
               "Number of register threads should be less than or equal to 128, got 256");
  expect_error("pinned_reserve_segment_size_mb:0", 31,
               "Pinned reserve segment size has to be greater than 0");
  expect_error("expandable_segments_reserve_by_class:[a:1", 37, "Expected closing bracket ']'");
  expect_error("expandable_segments_reserve:,", 28, "expected [, got ','");
  expect_error("pinned_use_background_threads:[True]", 30,
               "Expected a single True/False argument for pinned_use_background_threads");
}

/* Mutated configurations parse or fail cleanly, with the fault inside the text. */
static void conf_survives_mutations(void **state) {
  (void)state;
  const char *base = "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:8],"
                     "expandable_segments:True,garbage_collection_threshold:0.6";
  const char alphabet[] = ":,[]> 0123456789abTrueFalsx.-";
  uint64_t seed = 99;
  for (int round = 0; round < 20000; round++) {
    char text[128];
    snprintf(text, sizeof text, "%s", base);
    size_t len = strlen(text);
    for (int m = 0; m < 3; m++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      text[(seed >> 33) % len] = alphabet[(seed >> 13) % (sizeof alphabet - 1)];
    }
    if (round % 7 == 0) text[(seed >> 40) % len] = '\0';
    struct vf_alloc_conf c;
    struct vf_diag d;
    int rc = vf_alloc_conf_parse(text, &c, &d);
    assert_true(rc == 0 || rc == VF_EINVAL);
    if (rc) assert_true(d.offset <= strlen(text) && d.msg[0]);
  }
}

static void conf_from_env_precedence(void **state) {
  (void)state;
  struct vf_alloc_conf c;
  struct vf_diag d;
  /* PYTORCH_ALLOC_CONF wins, even when empty; the CUDA alias is read only without it. */
  assert_int_equal(vf_alloc_conf_from_env("expandable_segments:True", "max_split_size_mb:64",
                                          NULL, &c, &d), 0);
  assert_true(c.expandable_segments);
  assert_int_equal(c.max_split_size, UINT64_MAX);
  assert_int_equal(vf_alloc_conf_from_env("", "max_split_size_mb:64", NULL, &c, &d), 0);
  assert_int_equal(c.max_split_size, UINT64_MAX);
  assert_int_equal(vf_alloc_conf_from_env(NULL, "max_split_size_mb:64", NULL, &c, &d), 0);
  assert_int_equal(c.max_split_size, 64 * MiB);
  assert_false(c.caching_disabled);
  assert_int_equal(vf_alloc_conf_from_env(NULL, NULL, "0", &c, &d), 0);
  assert_true(c.caching_disabled);

  assert_int_equal(vf_alloc_conf_from_env(NULL, "max_split_size_mb:1", NULL, &c, &d),
                   VF_EINVAL);
  assert_string_equal(d.file, "PYTORCH_CUDA_ALLOC_CONF");
  assert_int_equal(d.offset, 18);
  assert_int_equal(vf_alloc_conf_from_env("bad:1", NULL, NULL, &c, &d), VF_EINVAL);
  assert_string_equal(d.file, "PYTORCH_ALLOC_CONF");
  assert_int_equal(vf_alloc_conf_from_env("bad:1", NULL, NULL, &c, NULL), VF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(worked_examples_table),
      cmocka_unit_test(small_requests_share_a_2mib_segment),
      cmocka_unit_test(roundup_power2_divisions),
      cmocka_unit_test(large_segment_remainder_is_reused),
      cmocka_unit_test(split_remainder_of_52mib_segment),
      cmocka_unit_test(merge_on_free_restores_the_segment),
      cmocka_unit_test(max_split_size_and_rounding_limit),
      cmocka_unit_test(oom_retry_releases_oversize_blocks_first),
      cmocka_unit_test(oom_retry_frees_cached_segments),
      cmocka_unit_test(fragmentation_causes_oom),
      cmocka_unit_test(per_process_fraction_and_garbage_collection),
      cmocka_unit_test(expandable_segments_round_to_pages),
      cmocka_unit_test(expandable_oom_unmaps_free_pages),
      cmocka_unit_test(expandable_ranges_are_searched_by_address),
      cmocka_unit_test(async_backend_behaves_like_expandable),
      cmocka_unit_test(streams_do_not_share_cached_blocks),
      cmocka_unit_test(recorded_stream_holds_a_freed_block),
      cmocka_unit_test(peaks_and_reset),
      cmocka_unit_test(ids_and_zero_bytes),
      cmocka_unit_test(caching_disabled_returns_memory_on_free),
      cmocka_unit_test(hand_filled_conf_is_sanitized),
      cmocka_unit_test(many_events_stay_consistent),
      cmocka_unit_test(conf_parses_valid_strings),
      cmocka_unit_test(conf_errors_and_positions),
      cmocka_unit_test(conf_survives_mutations),
      cmocka_unit_test(conf_from_env_precedence),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
