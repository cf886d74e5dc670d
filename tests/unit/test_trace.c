/* Traced event streams: the parser's positions and refusals, and the replay's rounding,
 * phase peaks and categories (the tracer itself is tested in python/tests). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "vramfit.h"

#define MiB (1024ull * 1024)

static int parse(const char *text, struct vf_trace *t, struct vf_diag *d) {
  vf_trace_init(t);
  vf_diag_clear(d);
  return vf_trace_parse(text, strlen(text), t, d);
}

static void replay(const char *text, struct vf_trace_result *r) {
  struct vf_trace t;
  struct vf_diag d;
  struct vf_alloc_conf c;
  assert_int_equal(parse(text, &t, &d), 0);
  vf_alloc_conf_default(&c);
  assert_int_equal(vf_trace_replay(&t, &c, r), 0);
  vf_trace_cleanup(&t);
}

static void sizes_round_as_the_allocator_does(void **state) {
  (void)state;
  struct vf_trace_result r;
  /* 100 bytes take a 512-byte block of a 2 MiB small segment; 11.5 MiB gets a segment of
   * its own rounded to 12 MiB, and as splitting it would leave less than 1 MiB, the whole
   * 12 MiB is charged (CUDACachingAllocator.cpp should_split). */
  replay("vramfit-trace-events 1\np load\na 1 100\na 2 12058624\n", &r);
  assert_int_equal(r.allocated_peak, 512 + 12 * MiB);
  assert_int_equal(r.reserved_peak, 2 * MiB + 12 * MiB);
}

static void peaks_are_per_phase(void **state) {
  (void)state;
  struct vf_trace_result r;
  replay("vramfit-trace-events 1\n"
         "p load\na 1 1048576\n"
         "p forward\na 2 4194304\na 3 4194304\nf 3\n"
         "p backward\nf 2\na 4 2097152\n"
         "c 1 weights\nc 4 gradients\n", &r);
  assert_int_equal(r.phase_peak[0].allocated, 1 * MiB);
  assert_int_equal(r.phase_peak[1].allocated, 9 * MiB);
  assert_int_equal(r.phase_peak[2].allocated, 5 * MiB);
  assert_int_equal(r.allocated_peak, 9 * MiB);
  assert_int_equal(r.peak_phase, 1);
  assert_int_equal(r.by_category[VF_CAT_WEIGHTS], 1 * MiB);
  assert_int_equal(r.by_category[VF_CAT_ACTIVATIONS], 8 * MiB);
  assert_int_equal(r.by_category[VF_CAT_GRADIENTS], 0);
}

static void empty_storages_and_empty_cache(void **state) {
  (void)state;
  struct vf_trace_result r;
  replay("vramfit-trace-events 1\np load\na 1 0\na 2 4194304\nf 2\ne\nf 1\na 3 512\n", &r);
  assert_int_equal(r.allocated_peak, 4 * MiB);
  assert_int_equal(r.reserved_peak, 20 * MiB);
}

static void malformed_lines_are_refused_with_their_position(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int line, col;
  } cases[] = {
      {"not events\n", 1, 1},
      {"vramfit-trace-events 1\na 1\n", 2, 4},
      {"vramfit-trace-events 1\na 1 12x\n", 2, 5},
      {"vramfit-trace-events 1\np load\nx 1\n", 3, 1},
      {"vramfit-trace-events 1\na 0 5\n", 2, 3},
      {"vramfit-trace-events 1\nc 1 snacks\n", 2, 5},
      {"vramfit-trace-events 1\na 99999999999 5\n", 2, 3},
      {"vramfit-trace-events 1\n\n", 2, 1},
      {"vramfit-trace-events 1\nf 1 2\n", 2, 4},
      {"vramfit-trace-events 1\na 1 5 x\n", 2, 6},
      {"vramfit-trace-events 1\na 1 5 1024\n", 2, 6},
      {"vramfit-trace-events 1\nr 1\n", 2, 4},
      {"vramfit-trace-events 1\ns 2 3\n", 2, 2},
      {"vramfit-trace-events 1\nsx\n", 2, 2},
      {"vramfit-trace-events 1\nm 1\n", 2, 4},
      {"vramfit-trace-events 1\nm 0 1\n", 2, 3},
      {"vramfit-trace-events 1\nw 1 2\n", 2, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    struct vf_trace t;
    struct vf_diag d;
    assert_int_equal(parse(cases[i].text, &t, &d), VF_EFORMAT);
    assert_int_equal(d.line, cases[i].line);
    assert_int_equal(d.col, cases[i].col);
    vf_trace_cleanup(&t);
  }
}

/* A block allocated on stream 1 and recorded on stream 0 stays out of the cache after its
 * free until stream 0 is synchronized: the next 12 MiB takes a segment of its own. */
static void recorded_streams_hold_blocks_until_a_sync(void **state) {
  (void)state;
  struct vf_trace_result r;
  replay("vramfit-trace-events 1\np forward\na 1 12582912 1\nr 1 0\nf 1\na 2 12582912 1\nf 2\n"
         "s 0\na 3 12582912 1\na 4 12582912 1\n", &r);
  assert_int_equal(r.reserved_peak, 24 * MiB);
  replay("vramfit-trace-events 1\np forward\na 1 12582912 1\nr 1 0\nf 1\ns\na 2 12582912 1\n", &r);
  assert_int_equal(r.reserved_peak, 12 * MiB);
  replay("vramfit-trace-events 1\np forward\na 1 12582912 1\nr 1 0\nf 1\na 2 12582912 1\n", &r);
  assert_int_equal(r.reserved_peak, 24 * MiB);
  /* A wait on an event recorded after the free returns the block; one recorded before
   * it does not (FSDP1's rate limiter waits on its reshards' events). */
  replay("vramfit-trace-events 1\np forward\na 1 12582912 1\nr 1 0\nf 1\nm 1 0\nw 1\na 2 12582912 1\n", &r);
  assert_int_equal(r.reserved_peak, 12 * MiB);
  replay("vramfit-trace-events 1\np forward\nm 1 0\na 1 12582912 1\nr 1 0\nf 1\nw 1\na 2 12582912 1\n", &r);
  assert_int_equal(r.reserved_peak, 24 * MiB);
  /* The host that waited for one stream's event knows every stream's work queued before
   * it done: a block stream 2 used returns after a wait on stream 0's later event. */
  replay("vramfit-trace-events 1\np backward\na 1 12582912\nr 1 2\nf 1\nm 1 0\nw 1\na 2 12582912\n", &r);
  assert_int_equal(r.reserved_peak, 12 * MiB);
  replay("vramfit-trace-events 1\np backward\na 1 12582912\nr 1 2\nf 1\na 2 12582912\n", &r);
  assert_int_equal(r.reserved_peak, 24 * MiB);
}

static void inconsistent_streams_fail_the_replay(void **state) {
  (void)state;
  static const char *const bad[] = {"vramfit-trace-events 1\nf 1\n",
                                    "vramfit-trace-events 1\na 1 5\na 1 5\n",
                                    "vramfit-trace-events 1\na 1 5\nf 1\nf 1\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct vf_trace t;
    struct vf_diag d;
    struct vf_alloc_conf c;
    struct vf_trace_result r;
    vf_alloc_conf_default(&c);
    assert_int_equal(parse(bad[i], &t, &d), 0);
    assert_int_equal(vf_trace_replay(&t, &c, &r), VF_EFORMAT);
    vf_trace_cleanup(&t);
  }
}

static void too_many_phases(void **state) {
  (void)state;
  char text[2048] = "vramfit-trace-events 1\n";
  for (int i = 0; i <= VF_TRACE_MAX_PHASES; i++)
    snprintf(text + strlen(text), sizeof text - strlen(text), "p phase%d\n", i);
  struct vf_trace t;
  struct vf_diag d;
  assert_int_equal(parse(text, &t, &d), VF_ERANGE);
  vf_trace_cleanup(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_round_as_the_allocator_does),
      cmocka_unit_test(peaks_are_per_phase),
      cmocka_unit_test(empty_storages_and_empty_cache),
      cmocka_unit_test(malformed_lines_are_refused_with_their_position),
      cmocka_unit_test(recorded_streams_hold_blocks_until_a_sync),
      cmocka_unit_test(inconsistent_streams_fail_the_replay),
      cmocka_unit_test(too_many_phases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
