/* Out-of-memory reports of PyTorch (0.4 to 2.6 wording), cuBLAS, cuDNN, NCCL, JAX/XLA,
 * TensorFlow and the host allocator, read from tests/data/oom, and the cause drawn from
 * their numbers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "vramfit.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * MiB)
#define U VF_BYTES_UNKNOWN

static struct vf_oom_report parse_file(const char *name) {
  const char *src = getenv("VF_SOURCE_DIR");
  char path[2048];
  snprintf(path, sizeof path, "%s/tests/data/oom/%s", src ? src : ".", name);
  char *text;
  size_t len;
  assert_int_equal(file_read(path, 1 << 20, &text, &len, NULL), 0);
  struct vf_oom_report r;
  assert_int_equal(vf_oom_parse(text, len, &r), 0);
  free(text);
  return r;
}

/* Sizes in the messages are rounded to 0.01 of their unit. */
static void near(uint64_t got, double want) {
  assert_true(got != U);
  if (fabs((double)got - want) > 0.006 * want + 1) fail_msg("got %llu, want %.0f",
                                                              (unsigned long long)got, want);
}

static void pytorch_1_0_cached(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-1.0-cached.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  assert_true(r.certain);
  assert_int_equal(r.line, 7);
  assert_int_equal(r.gpu, 0);
  near(r.tried_bytes, 1024 * 1024);
  near(r.capacity_bytes, 11.17 * GiB);
  near(r.allocated_bytes, 10.86 * GiB);
  near(r.free_bytes, 832 * 1024);
  near(r.reserved_unallocated_bytes, 26.41 * MiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_TOO_LARGE);
}

static void pytorch_1_13_fragmentation(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-1.13-fragmentation.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  near(r.tried_bytes, 2 * GiB);
  near(r.capacity_bytes, 23.69 * GiB);
  near(r.allocated_bytes, 12.11 * GiB);
  near(r.free_bytes, 1.45 * GiB);
  near(r.reserved_unallocated_bytes, (21.73 - 12.11) * GiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_FRAGMENTATION);
}

static void pytorch_2_1_other_process(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-2.1-other-process.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  near(r.tried_bytes, 256 * MiB);
  near(r.capacity_bytes, 15.77 * GiB); /* 2.1 spelled it "capacty" */
  near(r.free_bytes, 52.38 * MiB);
  near(r.other_process_bytes, 6.02 * GiB);
  near(r.process_bytes, 9.69 * GiB);
  near(r.allocated_bytes, 9.11 * GiB);
  near(r.reserved_unallocated_bytes, 201.44 * MiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_OTHER_PROCESS);
}

static void pytorch_2_3_fragmentation_wrapped(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-2.3-fragmentation.log");
  assert_int_equal(r.line, 4);
  near(r.capacity_bytes, 39.38 * GiB);
  near(r.process_bytes, 38.25 * GiB); /* on the next line of the log */
  near(r.reserved_unallocated_bytes, 9.81 * GiB);
  assert_int_equal(r.other_process_bytes, U); /* unknown */
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_FRAGMENTATION);
}

static void pytorch_2_4_leak_after_progress(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-2.4-leak.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  assert_true(r.progress_lines >= 100);
  near(r.tried_bytes, 20 * MiB);
  near(r.capacity_bytes, 79.14 * GiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_LEAK);
}

static void pytorch_2_5_too_large(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-2.5-too-large.log");
  near(r.tried_bytes, 3.91 * GiB);
  near(r.allocated_bytes, 21.61 * GiB);
  assert_true(r.progress_lines < 5);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_TOO_LARGE);
}

static void libraries_are_likely(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("cublas.log");
  assert_int_equal(r.source, VF_OOM_CUBLAS);
  assert_false(r.certain);
  assert_int_equal(r.tried_bytes, U); /* unknown */
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_TOO_LARGE);
  r = parse_file("cudnn.log");
  assert_int_equal(r.source, VF_OOM_CUDNN);
  assert_false(r.certain);
  r = parse_file("nccl.log");
  assert_int_equal(r.source, VF_OOM_NCCL);
  assert_true(r.certain);
  assert_int_equal(r.line, 1);
  assert_int_equal(r.count, 2);
}

static void jax_and_its_warning(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("jax.log");
  assert_int_equal(r.source, VF_OOM_JAX);
  assert_int_equal(r.line, 5);
  assert_int_equal(r.tried_bytes, 6442450944ull);
  assert_int_equal(r.count, 1); /* the BFC "not a failure" warning is not a report */
  r = parse_file("jax-warning-only.log");
  assert_int_equal(r.source, VF_OOM_NONE);
  r = parse_file("jax-request.log");
  assert_int_equal(r.source, VF_OOM_JAX);
  assert_int_equal(r.tried_bytes, 8589934592ull);
  assert_int_equal(r.gpu, 1);
}

static void tensorflow_shape_and_bfc(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("tensorflow.log");
  assert_int_equal(r.source, VF_OOM_TENSORFLOW);
  assert_int_equal(r.line, 7);
  assert_int_equal(r.tried_bytes, 64ull * 256 * 56 * 56 * 4);
  assert_int_equal(r.capacity_bytes, 14328594432ull);
  assert_int_equal(r.allocated_bytes, 14190702336ull);
  assert_int_equal(r.gpu, 0);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_TOO_LARGE);
}

static void first_certain_of_many(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("torchrun-ranks.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  assert_int_equal(r.line, 2);
  assert_int_equal(r.gpu, 0);
  assert_int_equal(r.count, 3);
}

static void nothing_and_host(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("no-oom.log");
  assert_int_equal(r.source, VF_OOM_NONE);
  assert_int_equal(r.count, 0);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_UNKNOWN);
  r = parse_file("host-ram.log");
  assert_int_equal(r.source, VF_OOM_HOST);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_UNKNOWN);
  assert_string_equal(vf_oom_source_name(VF_OOM_JAX), "JAX/XLA");
}

static void watch_leak_warning_wins(void **state) {
  (void)state;
  static const char log[] =
      "12:00:01 warning: GPU 0 pid 4242 (python3): " VF_LEAK_WARNING " (+61.0 MiB/min)\n"
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
      "total capacity of 23.55 GiB of which 1.00 GiB is free.\n";
  struct vf_oom_report r;
  assert_int_equal(vf_oom_parse(log, sizeof log - 1, &r), 0);
  assert_true(r.leak_warning);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_LEAK);
}

static void hostile_input(void **state) {
  (void)state;
  static const char bad[] = "CUDA out of memory. Tried to allocate -5 GiB (GPU ; ; ; ;) "
                            "shape[99999999999999,99999999999] and type float\0\0 Process  has";
  struct vf_oom_report r;
  assert_int_equal(vf_oom_parse(bad, sizeof bad - 1, &r), 0);
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  assert_int_equal(r.tried_bytes, U); /* unknown */
  assert_int_equal(vf_oom_parse("", 0, &r), 0);
  assert_int_equal(r.source, VF_OOM_NONE);
}

/* A container hides the run's pid: PyTorch lists the run as "Process N". Its own allocation
 * would not fit beside it, so it is the run, not another process. */
static void container_lists_the_run_itself(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("container-self-listed.log");
  assert_int_equal(r.n_procs, 1);
  assert_int_equal(r.procs[0].pid, 121503);
  assert_int_equal(r.process_bytes, U);
  struct vf_oom_analysis a;
  vf_oom_analyze(&r, &a);
  assert_int_equal(a.self_listed, 0);
  assert_int_equal(a.others_bytes, 0);
  assert_int_equal(a.cause, VF_OOM_CAUSE_TOO_LARGE);

  r = parse_file("container-zero-bytes.log"); /* "this process has 0 bytes memory in use" */
  assert_int_equal(r.process_bytes, 0);
  vf_oom_analyze(&r, &a);
  assert_int_equal(a.self_listed, 0);
  assert_int_equal(a.others_bytes, 0);
  assert_int_equal(a.cause, VF_OOM_CAUSE_TOO_LARGE);

  /* A real other process stays one: 13.86 GiB of this run fits beside its 17.85 GiB. */
  r = parse_file("two-workers.log");
  vf_oom_analyze(&r, &a);
  assert_int_equal(a.self_listed, -1);
  assert_int_equal(a.cause, VF_OOM_CAUSE_OTHER_PROCESS);
}

/* PyTorch <= 2.0 names no processes: capacity - free - reserved was held outside PyTorch. */
static void old_wording_outside_pytorch(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-1.12-outside.log");
  struct vf_oom_analysis a;
  vf_oom_analyze(&r, &a);
  near(a.outside_bytes, (7.80 - 1.32) * GiB - 5.44 * MiB);
  assert_int_equal(a.cause, VF_OOM_CAUSE_OTHER_PROCESS);
}

static void free_more_than_asked(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-1.3-free-not-full.log");
  near(r.free_bytes, 9.28 * GiB);
  near(r.tried_bytes, 12.5 * MiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_NOT_FULL);
}

static void private_pools_keep_the_reserved_figure(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-2.6-private-pools.log");
  near(r.allocated_bytes, 21.63 * GiB);
  near(r.private_pool_bytes, 46 * MiB);
  near(r.reserved_unallocated_bytes, 736.86 * MiB);
  assert_int_equal(vf_oom_cause(&r), VF_OOM_CAUSE_TOO_LARGE);
}

/* Two workers print the same report: each is read alone, and a pid counts once. */
static void two_reports_are_not_summed(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("two-workers.log");
  assert_int_equal(r.count, 2);
  assert_int_equal(r.line, 3);
  near(r.other_process_bytes, 17.85 * GiB);
  static const char twice[] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                              "GiB. GPU 0 has a total capacity of 31.74 GiB of which 1.00 GiB is "
                              "free. Process 7 has 3.00 GiB memory in use. Process 7 has 3.00 GiB "
                              "memory in use. Of the allocated memory 1.00 GiB is allocated by "
                              "PyTorch, and 0 bytes is reserved by PyTorch but unallocated.\n"
                              "step 1 loss 3.5 with 99.00 GiB reserved by PyTorch but unallocated\n";
  assert_int_equal(vf_oom_parse(twice, sizeof twice - 1, &r), 0);
  assert_int_equal(r.n_procs, 1);
  near(r.other_process_bytes, 3 * GiB);
  assert_int_equal(r.reserved_unallocated_bytes, 0); /* not the next line's figure */
}

static void memory_fraction_is_the_limit(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("pytorch-1.9-fraction.log");
  near(r.allowed_bytes, 1.05 * GiB);
  struct vf_oom_analysis a;
  vf_oom_analyze(&r, &a);
  assert_int_equal(a.cause, VF_OOM_CAUSE_LIMIT);
  assert_int_equal(a.limit_bytes, r.allowed_bytes);
}

/* TensorFlow logs allocations it will retry at INFO level: not failures. */
static void tensorflow_retries_are_not_reports(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("tensorflow-retries-finished.log");
  assert_int_equal(r.source, VF_OOM_NONE);
  assert_int_equal(r.count, 0);
  r = parse_file("tensorflow-retries-then-oom.log");
  assert_int_equal(r.source, VF_OOM_TENSORFLOW);
  assert_int_equal(r.line, 10);
  near(r.tried_bytes, 39.81 * MiB); /* from the allocator's "ran out of memory" line */
  assert_int_equal(r.capacity_bytes, 7773945856ull);
}

static void wordings_once_missed(void **state) {
  (void)state;
  struct vf_oom_report r = parse_file("host-not-enough.log");
  assert_int_equal(r.source, VF_OOM_HOST);
  assert_int_equal(r.tried_bytes, 26843545600ull);
  r = parse_file("xla-resource-exhausted-case.log");
  assert_int_equal(r.source, VF_OOM_JAX);
  assert_int_equal(r.line, 5);
  assert_int_equal(r.tried_bytes, 33554432ull);
  assert_int_equal(r.gpu, 0);
  r = parse_file("xla-out-of-memory-allocating.log");
  assert_int_equal(r.source, VF_OOM_JAX);
  assert_int_equal(r.tried_bytes, 17179869184ull);
  r = parse_file("xla-cumemallocasync.log");
  assert_int_equal(r.source, VF_OOM_JAX);
  assert_int_equal(r.tried_bytes, 4294967296ull);
  r = parse_file("nccl-cuda-failure-2.log");
  assert_int_equal(r.source, VF_OOM_NCCL);
  assert_int_equal(r.line, 2);
  assert_int_equal(r.tried_bytes, 6291456ull); /* from the warning on the next line */
  r = parse_file("pytorch-0.4-runtime-error.log");
  assert_int_equal(r.source, VF_OOM_PYTORCH);
  assert_true(r.certain);
  assert_int_equal(r.line, 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pytorch_1_0_cached),
      cmocka_unit_test(pytorch_1_13_fragmentation),
      cmocka_unit_test(pytorch_2_1_other_process),
      cmocka_unit_test(pytorch_2_3_fragmentation_wrapped),
      cmocka_unit_test(pytorch_2_4_leak_after_progress),
      cmocka_unit_test(pytorch_2_5_too_large),
      cmocka_unit_test(libraries_are_likely),
      cmocka_unit_test(jax_and_its_warning),
      cmocka_unit_test(tensorflow_shape_and_bfc),
      cmocka_unit_test(first_certain_of_many),
      cmocka_unit_test(nothing_and_host),
      cmocka_unit_test(watch_leak_warning_wins),
      cmocka_unit_test(hostile_input),
      cmocka_unit_test(container_lists_the_run_itself),
      cmocka_unit_test(old_wording_outside_pytorch),
      cmocka_unit_test(free_more_than_asked),
      cmocka_unit_test(private_pools_keep_the_reserved_figure),
      cmocka_unit_test(two_reports_are_not_summed),
      cmocka_unit_test(memory_fraction_is_the_limit),
      cmocka_unit_test(tensorflow_retries_are_not_reports),
      cmocka_unit_test(wordings_once_missed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
