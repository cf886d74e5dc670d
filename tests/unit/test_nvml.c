/* NVML loading and sampling against the scripted fake library (tests/fake_nvml). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tmpdir.h"
#include "vramfit.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static char dir[1024], trace_path[1200];

/* Points VRAMFIT_NVML at the fake (or its legacy build) running script. */
static void use_script(const char *script, bool legacy) {
  const char *lib = getenv(legacy ? "FAKE_NVML_LEGACY_LIB" : "FAKE_NVML_LIB");
  assert_non_null(lib);
  setenv("VRAMFIT_NVML", lib, 1);
  char path[1200];
  vf_test_write(dir, "script", script, strlen(script), path, sizeof path);
  setenv("FAKE_NVML_SCRIPT", path, 1);
  snprintf(trace_path, sizeof trace_path, "%s/trace", dir);
  unlink(trace_path);
  setenv("FAKE_NVML_TRACE", trace_path, 1);
}

static struct vf_nvml *open_ok(void) {
  struct vf_nvml *n;
  struct vf_diag d;
  int rc = vf_nvml_open(&n, &d);
  if (rc) fail_msg("vf_nvml_open: %s", d.msg);
  return n;
}

/* How many times the fake saw fn called. */
static int calls(const char *fn) {
  FILE *f = fopen(trace_path, "r");
  if (!f) return 0;
  char line[256];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    n += strcmp(line, fn) == 0;
  }
  fclose(f);
  return n;
}

static const struct vf_gpu_proc *find_proc(const struct vf_gpu_sample *s, uint32_t pid) {
  for (size_t i = 0; i < s->nprocs; i++)
    if (s->procs[i].pid == pid) return &s->procs[i];
  return NULL;
}

static int setup(void **state) {
  (void)state;
  vf_test_tmpdir("nvml", dir, sizeof dir);
  unsetenv("CUDA_VISIBLE_DEVICES");
  return 0;
}

static void fields_and_processes(void **state) {
  (void)state;
  char script[1024];
  snprintf(script, sizeof script,
           "driver version=550.54.15 cuda=12040\n"
           "gpu index=0 name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-aaaa-1111 total=81920MiB "
           "reserved=512MiB cc=8.0 util=87 memutil=40 temp=61 power=312W limit=400W base=1GiB\n"
           "gpu index=1 name=\"NVIDIA L4\" total=23034MiB cc=8.9\n"
           "proc gpu=0 pid=%d used=10GiB type=both\n"
           "proc gpu=0 pid=3999999 name=/usr/bin/ghost used=3GiB\n"
           "proc gpu=1 pid=%d used=2GiB type=graphics\n",
           (int)getpid(), (int)getpid());
  use_script(script, false);
  struct vf_nvml *n = open_ok();
  assert_int_equal(vf_nvml_count(n), 2);
  char driver[80];
  int cuda;
  vf_nvml_driver(n, driver, sizeof driver, &cuda);
  assert_string_equal(driver, "550.54.15");
  assert_int_equal(cuda, 12040);

  struct vf_gpu_sample s;
  assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
  assert_string_equal(s.name, "NVIDIA A100-SXM4-80GB");
  assert_string_equal(s.uuid, "GPU-aaaa-1111");
  assert_int_equal(s.cc_major, 8);
  assert_int_equal(s.cc_minor, 0);
  unsigned all = VF_FIELD_MEMORY | VF_FIELD_RESERVED | VF_FIELD_UTIL | VF_FIELD_TEMP |
                 VF_FIELD_POWER | VF_FIELD_POWER_LIMIT | VF_FIELD_PROCS;
  assert_int_equal(s.fields, all);
  assert_int_equal(s.total_bytes, 81920 * MiB);
  assert_int_equal(s.reserved_bytes, 512 * MiB);
  assert_int_equal(s.used_bytes, 14 * GiB); /* v2: without the driver's reserve */
  assert_int_equal(s.free_bytes, 81920 * MiB - 512 * MiB - 14 * GiB);
  assert_int_equal(s.util_gpu, 87);
  assert_int_equal(s.util_memory, 40);
  assert_int_equal(s.temperature_c, 61);
  assert_int_equal(s.power_mw, 312000);
  assert_int_equal(s.power_limit_mw, 400000);
  /* In both the compute and the graphics list, counted once. */
  assert_int_equal(s.nprocs, 2);
  const struct vf_gpu_proc *me = find_proc(&s, (uint32_t)getpid());
  assert_non_null(me);
  assert_int_equal(me->used_bytes, 10 * GiB);
  assert_string_equal(me->name, "test_nvml");
  const struct vf_gpu_proc *ghost = find_proc(&s, 3999999);
  assert_non_null(ghost);
  assert_string_equal(ghost->name, "ghost"); /* not in /proc: NVML's name */

  assert_int_equal(vf_nvml_sample(n, 1, &s), 0);
  assert_int_equal(s.nprocs, 1);
  assert_int_equal(s.procs[0].used_bytes, 2 * GiB);
  assert_int_equal(vf_nvml_sample(n, 2, &s), VF_ENOTFOUND);
  vf_nvml_close(n);
  assert_int_equal(calls("nvmlShutdown"), 1);
  assert_int_equal(calls("nvmlDeviceGetMemoryInfo"), 0); /* the v2 word was accepted */
}

static void memory_v1_fallback(void **state) {
  (void)state;
  use_script("gpu index=0 total=16GiB reserved=300MiB base=1GiB\n"
             "err fn=nvmlDeviceGetMemoryInfo_v2 code=FUNCTION_NOT_FOUND\n",
             false);
  struct vf_nvml *n = open_ok();
  struct vf_gpu_sample s;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
    assert_true(s.fields & VF_FIELD_MEMORY);
    assert_false(s.fields & VF_FIELD_RESERVED);
    assert_int_equal(s.used_bytes, 1 * GiB + 300 * MiB); /* v1 counts the reserve */
    assert_int_equal(s.total_bytes, 16 * GiB);
  }
  vf_nvml_close(n);
  assert_int_equal(calls("nvmlDeviceGetMemoryInfo_v2"), 1); /* refused once, then not asked */
  assert_int_equal(calls("nvmlDeviceGetMemoryInfo"), 3);
}

static void check_two_procs(bool legacy, const char *extra) {
  char script[1024];
  snprintf(script, sizeof script,
           "gpu index=0 total=24GiB\n"
           "proc gpu=0 pid=%d used=5GiB\n"
           "proc gpu=0 pid=1 used=7GiB\n%s",
           (int)getpid(), extra);
  use_script(script, legacy);
  struct vf_nvml *n = open_ok();
  struct vf_gpu_sample s;
  assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
  vf_nvml_close(n);
  assert_true(s.fields & VF_FIELD_PROCS);
  assert_int_equal(s.nprocs, 2);
  assert_int_equal(find_proc(&s, (uint32_t)getpid())->used_bytes, 5 * GiB);
  assert_int_equal(find_proc(&s, 1)->used_bytes, 7 * GiB);
  assert_int_equal(s.used_bytes, 12 * GiB);
}

static void process_versions(void **state) {
  (void)state;
  check_two_procs(false, "");
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);

  check_two_procs(false, "err fn=nvmlDeviceGetComputeRunningProcesses_v3 "
                         "code=FUNCTION_NOT_FOUND\n");
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses_v2"), 1);
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses"), 0);

  check_two_procs(false, "err fn=nvmlDeviceGetComputeRunningProcesses_v3 code=13\n"
                         "err fn=nvmlDeviceGetComputeRunningProcesses_v2 "
                         "code=ARGUMENT_VERSION_MISMATCH\n");
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses"), 1); /* v1, 16-byte entries */

  /* R535.43-86 wrote 32-byte entries through _v3: caught, and _v2 asked instead. */
  check_two_procs(false, "quirk r535\n");
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses_v2"), 1);
}

static void legacy_driver(void **state) {
  (void)state;
  check_two_procs(true, "");
  assert_int_equal(calls("nvmlInit"), 1);
  assert_int_equal(calls("nvmlDeviceGetMemoryInfo"), 1);
  assert_int_equal(calls("nvmlDeviceGetComputeRunningProcesses"), 1);
  assert_int_equal(calls("nvmlDeviceGetTemperature"), 1);
}

static void failing_fields_and_gpus(void **state) {
  (void)state;
  use_script("clock samples\n"
             "gpu index=0 total=24GiB util=50\n"
             "gpu index=1 total=24GiB power=100W\n"
             "gpu index=2 total=24GiB\n"
             "err fn=nvmlDeviceGetUtilizationRates gpu=0 code=NOT_SUPPORTED\n"
             "err fn=nvmlDeviceGetPowerUsage gpu=1 code=NOT_SUPPORTED\n"
             "err fn=nvmlDeviceGetHandleByIndex gpu=2 code=GPU_IS_LOST\n"
             "err fn=* gpu=1 code=GPU_IS_LOST from=2\n",
             false);
  struct vf_nvml *n = open_ok();
  assert_int_equal(vf_nvml_count(n), 3);
  struct vf_gpu_sample s;
  assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
  assert_true(s.fields & VF_FIELD_MEMORY);
  assert_true(s.fields & VF_FIELD_POWER);
  assert_false(s.fields & VF_FIELD_UTIL);
  assert_int_equal(vf_nvml_sample(n, 1, &s), 0);
  assert_true(s.fields & VF_FIELD_UTIL);
  assert_false(s.fields & VF_FIELD_POWER);
  assert_int_equal(vf_nvml_sample(n, 2, &s), VF_EIO);
  /* GPU 1 is lost from its third sample on; GPU 0 carries on. */
  assert_int_equal(vf_nvml_sample(n, 1, &s), 0);
  assert_int_equal(vf_nvml_sample(n, 1, &s), 0);
  assert_int_equal(s.fields, 0);
  assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
  assert_true(s.fields & VF_FIELD_MEMORY);
  vf_nvml_close(n);
}

static void all_ones_are_unknown(void **state) {
  (void)state;
  char script[512];
  snprintf(script, sizeof script,
           "gpu index=0 total=24GiB memory=na\n"
           "proc gpu=0 pid=%d used=na\n",
           (int)getpid());
  use_script(script, false);
  struct vf_nvml *n = open_ok();
  struct vf_gpu_sample s;
  assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
  assert_false(s.fields & VF_FIELD_MEMORY);
  assert_int_equal(s.nprocs, 1);
  assert_int_equal(s.procs[0].used_bytes, VF_BYTES_UNKNOWN);
  vf_nvml_close(n);
}

static void processes_come_and_go(void **state) {
  (void)state;
  char script[512];
  snprintf(script, sizeof script,
           "clock samples\n"
           "gpu index=0 total=24GiB\n"
           "proc gpu=0 pid=%d used=step:0:1GiB,3:2GiB from=2 until=5\n"
           "proc gpu=0 pid=1 used=1GiB from=4\n",
           (int)getpid());
  use_script(script, false);
  struct vf_nvml *n = open_ok();
  static const size_t want_n[] = {0, 0, 1, 1, 2, 1, 1};
  static const uint64_t want_mine[] = {0, 0, 1 * GiB, 2 * GiB, 2 * GiB, 0, 0};
  for (size_t i = 0; i < sizeof want_n / sizeof *want_n; i++) {
    struct vf_gpu_sample s;
    assert_int_equal(vf_nvml_sample(n, 0, &s), 0);
    assert_int_equal(s.nprocs, want_n[i]);
    const struct vf_gpu_proc *me = find_proc(&s, (uint32_t)getpid());
    assert_int_equal(me ? me->used_bytes : 0, want_mine[i]);
  }
  vf_nvml_close(n);
}

static void no_driver(void **state) {
  (void)state;
  use_script("init error=DRIVER_NOT_LOADED\n", false);
  struct vf_nvml *n;
  struct vf_diag d;
  assert_int_equal(vf_nvml_open(&n, &d), VF_ENODRIVER);
  assert_null(n);
  assert_non_null(strstr(d.msg, "Driver Not Loaded"));
  setenv("VRAMFIT_NVML", "/nonexistent/libnvidia-ml.so.1", 1);
  assert_int_equal(vf_nvml_open(&n, &d), VF_ENODRIVER);
  assert_non_null(strstr(d.msg, "VRAMFIT_NVML"));
  struct vf_gpu_spec g;
  assert_int_equal(vf_gpu_detect(&g, &d), VF_ENODRIVER);
}

static void find_visible(void **state) {
  (void)state;
  use_script("gpu index=0 uuid=GPU-abc-0\ngpu index=1 uuid=GPU-abd-1\ngpu index=2 uuid=GPU-b\n",
             false);
  struct vf_nvml *n = open_ok();
  unsigned i = 99;
  assert_int_equal(vf_nvml_find(n, "1", &i), 0);
  assert_int_equal(i, 1);
  assert_int_equal(vf_nvml_find(n, " GPU-abd", &i), 0);
  assert_int_equal(i, 1);
  assert_int_equal(vf_nvml_find(n, "gpu-b", &i), 0);
  assert_int_equal(i, 2);
  assert_int_equal(vf_nvml_find(n, "GPU-ab", &i), VF_ENOTFOUND); /* two match */
  assert_int_equal(vf_nvml_find(n, "3", &i), VF_ENOTFOUND);
  assert_int_equal(vf_nvml_find(n, "1x", &i), VF_ENOTFOUND);
  assert_int_equal(vf_nvml_find(n, "MIG-abc", &i), VF_ENOTFOUND);
  vf_nvml_close(n);
}

static void detect(void **state) {
  (void)state;
  use_script("gpu index=0 name=\"NVIDIA GeForce RTX 4090\" uuid=GPU-40 total=24564MiB cc=8.9 "
             "base=4GiB\n"
             "gpu index=1 name=\"NVIDIA Mystery GPU\" uuid=GPU-99 total=48GiB cc=9.0\n",
             false);
  struct vf_gpu_spec g;
  struct vf_diag d;
  assert_int_equal(vf_gpu_detect(&g, &d), 0);
  assert_true(g.detected);
  assert_string_equal(g.name, "rtx-4090");
  assert_string_equal(g.full_name, "NVIDIA GeForce RTX 4090");
  assert_string_equal(g.uuid, "GPU-40");
  assert_int_equal(g.index, 0);
  assert_int_equal(g.capacity_bytes, 24564 * MiB);
  assert_int_equal(g.free_bytes, 24564 * MiB - 4 * GiB);
  assert_true(g.bf16_tflops > 160);
  assert_int_equal(g.cc_major, 8);
  assert_int_equal(g.cc_minor, 9);

  setenv("CUDA_VISIBLE_DEVICES", "GPU-99,0", 1);
  assert_int_equal(vf_gpu_detect(&g, &d), 0);
  assert_int_equal(g.index, 1);
  assert_string_equal(g.name, ""); /* not in the catalogue */
  assert_int_equal(g.cc_major, 9);
  assert_int_equal(g.capacity_bytes, 48 * GiB);

  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  assert_int_equal(vf_gpu_detect(&g, &d), 0);
  assert_int_equal(g.index, 1);

  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  assert_int_equal(vf_gpu_detect(&g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "hides every GPU"));
  setenv("CUDA_VISIBLE_DEVICES", "5", 1);
  assert_int_equal(vf_gpu_detect(&g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "'5'"));
  unsetenv("CUDA_VISIBLE_DEVICES");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(fields_and_processes, setup),
      cmocka_unit_test_setup(memory_v1_fallback, setup),
      cmocka_unit_test_setup(process_versions, setup),
      cmocka_unit_test_setup(legacy_driver, setup),
      cmocka_unit_test_setup(failing_fields_and_gpus, setup),
      cmocka_unit_test_setup(all_ones_are_unknown, setup),
      cmocka_unit_test_setup(processes_come_and_go, setup),
      cmocka_unit_test_setup(no_driver, setup),
      cmocka_unit_test_setup(find_visible, setup),
      cmocka_unit_test_setup(detect, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
