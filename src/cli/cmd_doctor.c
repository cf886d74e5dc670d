/* vramfit doctor: checks the environment a training run meets and explains an
 * out-of-memory report found in its log. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/doctor.h"
#include "cli/gpu_view.h"
#include "cli/history_cli.h"
#include "io/fileio.h"

static const char usage[] =
    "usage: vramfit doctor [--log FILE] [--plan PLAN.json]\n\n"
    "Checks what the GPU memory guides ask you to check by hand: the NVIDIA driver, other\n"
    "processes holding GPU memory and how much, the allocator variables\n"
    "(PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF) and what they change,\n"
    "CUDA_VISIBLE_DEVICES, and free memory against a plan.\n\n"
    "  --log FILE   a training log: finds the out-of-memory report of PyTorch, cuBLAS,\n"
    "               cuDNN, NCCL, JAX/XLA or TensorFlow, reads its numbers and explains the\n"
    "               likely cause: fragmentation, another process, a leak, or a setting too\n"
    "               large for the GPU ('vramfit watch --log' files count too)\n"
    "  --plan FILE  'vramfit plan --json' (or 'estimate --json') output: does its peak fit in\n"
    "               the memory free now? (default: the last plan 'vramfit plan' made here)\n\n"
    "Exit 0 when nothing is wrong, 1 when a problem was found, 2 for an unreadable file,\n"
    "3 when there is neither a driver to check nor a log to read.\n";

#define NAME "doctor"
#define MAX_LOG (256u << 20)

/* Appends "LABEL SIZE" to line when the report gave that number. */
static void number(char *line, size_t size, const char *label, uint64_t b) {
  if (b == VF_BYTES_UNKNOWN) return;
  char v[32];
  cli_format_bytes(b, v, sizeof v);
  size_t n = strlen(line);
  snprintf(line + n, size - n, "%s%s %s", n ? ", " : "", label, v);
}

static void print_numbers(const struct vf_oom_report *r) {
  char line[512] = "";
  number(line, sizeof line, "asked for", r->tried_bytes);
  number(line, sizeof line, "capacity", r->capacity_bytes);
  number(line, sizeof line, "free", r->free_bytes);
  number(line, sizeof line, "this process", r->process_bytes);
  number(line, sizeof line, "allocated by the framework", r->allocated_bytes);
  number(line, sizeof line, "reserved but unallocated", r->reserved_unallocated_bytes);
  number(line, sizeof line, "other processes", r->other_process_bytes);
  if (r->gpu >= 0) printf("    GPU %d: %s\n", r->gpu, line[0] ? line : "no numbers given");
  else if (line[0]) printf("    %s\n", line);
}

static void explain_fragmentation(const struct vf_oom_report *r) {
  char spare[32], tried[32];
  cli_format_bytes(r->reserved_unallocated_bytes, spare, sizeof spare);
  gpu_view_bytes(r->tried_bytes, tried, sizeof tried);
  printf("  cause: fragmentation: %s sat reserved but unallocated in segments split by other "
         "blocks, more than the %s asked for.\n", spare, tried);
  printf("  fix:   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= 2.1; also set "
         "PYTORCH_ALLOC_CONF to it on 2.9 and later) lets segments grow in place; on older "
         "PyTorch try max_split_size_mb:512.\n");
}

static void explain_other(const struct vf_oom_report *r) {
  char held[32];
  uint64_t b = r->other_process_bytes;
  if (b == VF_BYTES_UNKNOWN && r->capacity_bytes != VF_BYTES_UNKNOWN)
    b = r->capacity_bytes - r->free_bytes - r->process_bytes;
  cli_format_bytes(b, held, sizeof held);
  printf("  cause: another process: %s of the GPU was held outside this process (another "
         "run, a notebook kernel, a data-loader worker that touched CUDA).\n", held);
  printf("  fix:   stop it (the gpu lines above show who holds memory now), or pick a free GPU "
         "with CUDA_VISIBLE_DEVICES.\n");
}

static void explain_leak(const struct vf_oom_report *r) {
  char tried[32];
  gpu_view_bytes(r->tried_bytes, tried, sizeof tried);
  if (r->leak_warning)
    printf("  cause: a leak: 'vramfit watch' saw this run's memory keep growing before it "
           "failed.\n");
  else
    printf("  cause: memory crept up: %u progress lines passed before it failed asking for only "
           "%s: a leak, or a batch longer than any before it.\n", r->progress_lines, tried);
  printf("  fix:   look for tensors kept across steps (a loss summed without .item(), growing "
         "lists, caches); 'vramfit watch -- YOUR COMMAND' shows the growth and when it will "
         "run out.\n");
}

static void explain_too_large(const struct vf_oom_report *r) {
  char cap[32] = "SIZE";
  if (r->capacity_bytes != VF_BYTES_UNKNOWN)
    snprintf(cap, sizeof cap, "%.2fGiB", (double)r->capacity_bytes / (1 << 30));
  if (r->source == VF_OOM_CUBLAS || r->source == VF_OOM_CUDNN || r->source == VF_OOM_NCCL)
    printf("  cause: %s could not get memory for its handle, workspace or buffers: the GPU was "
           "already full%s.\n", vf_oom_source_name(r->source),
           r->certain ? "" : " (this status is memory running out more often than not)");
  else
    printf("  cause: the setting needs more memory than the GPU has.\n");
  if (r->source == VF_OOM_JAX)
    printf("         JAX takes 75%% of the GPU at start (XLA_PYTHON_CLIENT_PREALLOCATE, "
           "XLA_PYTHON_CLIENT_MEM_FRACTION).\n");
  printf("  fix:   run 'vramfit plan MODEL --gpu %s' with this run's settings (--batch, --seq, "
         "--optimizer, ...) for a batch size, checkpointing or optimizer that fits.\n", cap);
}

static void explain(const struct vf_oom_report *r) {
  if (r->source == VF_OOM_HOST) {
    printf("  cause: host memory (RAM) ran out, not the GPU: smaller data-loader prefetch, fewer "
           "workers, or offload less to the CPU.\n");
    return;
  }
  switch (vf_oom_cause(r)) {
  case VF_OOM_CAUSE_FRAGMENTATION: explain_fragmentation(r); break;
  case VF_OOM_CAUSE_OTHER_PROCESS: explain_other(r); break;
  case VF_OOM_CAUSE_LEAK: explain_leak(r); break;
  default: explain_too_large(r); break;
  }
}

static int check_log(struct doctor *d, const char *path) {
  char *text;
  size_t len;
  struct vf_diag diag;
  vf_diag_clear(&diag);
  int rc = vf_read_file(path, MAX_LOG, &text, &len, &diag);
  if (rc) return cli_diag_error(NAME, rc, &diag);
  struct vf_oom_report r;
  vf_oom_parse(text, len, &r);
  free(text);
  printf("\nlog %s\n", path);
  if (r.source == VF_OOM_NONE) {
    doctor_report(d, DOCTOR_OK, "log", "no out-of-memory report%s",
                  r.leak_warning ? "; 'vramfit watch' warned that memory kept growing" : "");
    if (r.leak_warning) d->problems++;
    return 0;
  }
  doctor_report(d, DOCTOR_FAIL, "log", "line %d: %s out-of-memory report%s (%u in the log)",
                r.line, vf_oom_source_name(r.source), r.certain ? "" : " (likely)", r.count);
  printf("    %.200s%s\n", r.excerpt, strlen(r.excerpt) > 200 ? "..." : "");
  print_numbers(&r);
  explain(&r);
  return 0;
}

/* Without --plan: the last plan 'vramfit plan' kept, when there is one. */
static int check_last_plan(struct doctor *d) {
  char *json, *about;
  if (history_last_plan(&json, &about)) return 0;
  doctor_report(d, DOCTOR_INFO, "plan", "the last plan made here: %s", about);
  int rc = doctor_check_plan(d, about, json);
  free(json);
  free(about);
  return rc;
}

int cmd_doctor(int argc, char **argv) {
  static const struct option opts[] = {{"log", required_argument, NULL, 'l'},
                                       {"plan", required_argument, NULL, 'p'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *log = NULL, *plan = NULL;
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == 'l') log = optarg;
    else if (c == 'p') plan = optarg;
    else if (c == 'h') return fputs(usage, stdout), EXIT_OK;
    else return cli_option_error(NAME, c, argv);
  }
  if (optind < argc) return cli_usage_error(NAME, "unexpected argument '%s'", argv[optind]);

  struct doctor d = {.color = cli_use_color(stdout), .gpu = -1};
  struct vf_diag diag;
  vf_diag_clear(&diag);
  bool driver = vf_nvml_open(&d.nvml, &diag) == 0;
  printf("environment\n");
  if (!driver) doctor_report(&d, DOCTOR_FAIL, "driver", "%s", diag.msg);
  doctor_check_env(&d);
  int rc = plan ? doctor_check_plan(&d, plan, NULL) : check_last_plan(&d);
  if (!rc && log) rc = check_log(&d, log);
  vf_nvml_close(d.nvml);
  if (rc) return rc;
  if (!driver && !log) return EXIT_ENV;
  printf("\n%u problem%s found\n", d.problems, d.problems == 1 ? "" : "s");
  return d.problems ? EXIT_NO : EXIT_OK;
}
