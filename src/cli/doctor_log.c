/* doctor --log: the out-of-memory report in a training log, its numbers, and the cause they
 * point to (vf_oom_analyze), as text or as the "log" object of --json. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "cli/cli.h"
#include "cli/doctor.h"
#include "cli/gpu_view.h"

#define NAME "doctor"
#define MAX_LOG (256u << 20)
#define KNOWN(x) ((x) != VF_BYTES_UNKNOWN)

/* The explanation of one report: why, and what to do. */
struct why {
  char cause[1024], fix[768];
};

static void bytes(uint64_t b, char *buf, size_t size) { cli_format_bytes(b, buf, size); }

/* Appends "LABEL SIZE" to line when the number is known. */
static void number(char *line, size_t size, const char *label, uint64_t b) {
  if (!KNOWN(b)) return;
  char v[32];
  bytes(b, v, sizeof v);
  size_t n = strlen(line);
  snprintf(line + n, size - n, "%s%s %s", n ? ", " : "", label, v);
}

static void print_numbers(const struct vf_oom_report *r, const struct vf_oom_analysis *a) {
  char line[768] = "";
  number(line, sizeof line, "asked for", r->tried_bytes);
  number(line, sizeof line, "capacity", r->capacity_bytes);
  number(line, sizeof line, "allowed", r->allowed_bytes);
  number(line, sizeof line, "free", r->free_bytes);
  number(line, sizeof line, "this process", r->process_bytes);
  number(line, sizeof line, "allocated by the framework", r->allocated_bytes);
  number(line, sizeof line, "in private pools", r->private_pool_bytes);
  number(line, sizeof line, "reserved but unallocated", r->reserved_unallocated_bytes);
  if (a->self_listed >= 0) {
    char label[64];
    snprintf(label, sizeof label, "process %u (this run)", r->procs[a->self_listed].pid);
    number(line, sizeof line, label, r->procs[a->self_listed].bytes);
  }
  if (r->n_procs) number(line, sizeof line, "other processes", a->others_bytes);
  else number(line, sizeof line, "held outside PyTorch", a->outside_bytes);
  if (r->gpu >= 0) printf("    GPU %d: %s\n", r->gpu, line[0] ? line : "no numbers given");
  else if (line[0]) printf("    %s\n", line);
}

static void why_fragmentation(const struct vf_oom_report *r, struct why *w) {
  char spare[32], tried[32];
  bytes(r->reserved_unallocated_bytes, spare, sizeof spare);
  gpu_view_bytes(r->tried_bytes, tried, sizeof tried);
  snprintf(w->cause, sizeof w->cause, "fragmentation: %s sat reserved but unallocated in segments "
           "split by other blocks, more than the %s asked for.", spare, tried);
  snprintf(w->fix, sizeof w->fix, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PyTorch >= "
           "2.1; also set PYTORCH_ALLOC_CONF to it on 2.9 and later) lets segments grow in place; "
           "on older PyTorch try max_split_size_mb:512.");
}

static void why_other(const struct vf_oom_analysis *a, struct why *w) {
  char held[32];
  if (KNOWN(a->others_bytes) && a->others_bytes >= (KNOWN(a->outside_bytes) ? a->outside_bytes : 0)) {
    bytes(a->others_bytes, held, sizeof held);
    snprintf(w->cause, sizeof w->cause, "another process: %s of the GPU was held outside this "
             "process (another run, a notebook kernel, a data-loader worker that touched CUDA).",
             held);
  } else {
    bytes(a->outside_bytes, held, sizeof held);
    snprintf(w->cause, sizeof w->cause, "memory held outside PyTorch: %s of the GPU was neither "
             "free nor PyTorch's, far more than a CUDA context (0.3 to 1 GiB): another process, or "
             "memory this process took without PyTorch's allocator (TensorFlow, JAX, CuPy, a "
             "custom extension).", held);
  }
  snprintf(w->fix, sizeof w->fix, "stop it (the gpu lines above show who holds memory now), or "
           "pick a free GPU with CUDA_VISIBLE_DEVICES.");
}

static void why_leak(const struct vf_oom_report *r, struct why *w) {
  char tried[32];
  gpu_view_bytes(r->tried_bytes, tried, sizeof tried);
  if (r->leak_warning)
    snprintf(w->cause, sizeof w->cause, "a leak: 'vramfit watch' saw this run's memory keep "
             "growing before it failed.");
  else
    snprintf(w->cause, sizeof w->cause, "memory crept up: %u progress lines passed before it "
             "failed asking for only %s: a leak, or a batch longer than any before it.",
             r->progress_lines, tried);
  snprintf(w->fix, sizeof w->fix, "look for tensors kept across steps (a loss summed without "
           ".item(), growing lists, caches); 'vramfit watch -- YOUR COMMAND' shows the growth and "
           "when it will run out.");
}

static void plan_hint(const struct vf_oom_analysis *a, struct why *w) {
  char gpu[32] = "SIZE";
  if (KNOWN(a->limit_bytes)) snprintf(gpu, sizeof gpu, "%.2fGiB", (double)a->limit_bytes / (1 << 30));
  size_t n = strlen(w->fix);
  snprintf(w->fix + n, sizeof w->fix - n, "run 'vramfit plan MODEL --gpu %s' with this run's "
           "settings (--batch, --seq, --optimizer, ...) for a batch size, checkpointing or "
           "optimizer that fits.", gpu);
}

static void why_limit(const struct vf_oom_report *r, const struct vf_oom_analysis *a, struct why *w) {
  char allowed[32], cap[32];
  bytes(r->allowed_bytes, allowed, sizeof allowed);
  bytes(r->capacity_bytes, cap, sizeof cap);
  snprintf(w->cause, sizeof w->cause, "a memory limit: the process may use only %s of the %s GPU "
           "(torch.cuda.set_per_process_memory_fraction, or a library that sets it) and reached "
           "it.", allowed, cap);
  snprintf(w->fix, sizeof w->fix, "raise or remove the fraction, or ");
  plan_hint(a, w);
}

static void why_not_full(const struct vf_oom_report *r, struct why *w) {
  char free_s[32], tried[32];
  bytes(r->free_bytes, free_s, sizeof free_s);
  gpu_view_bytes(r->tried_bytes, tried, sizeof tried);
  snprintf(w->cause, sizeof w->cause, "not a full GPU: %s was free, more than the %s asked for. "
           "Such reports come from another device than the one the numbers describe (a tensor or "
           "context on a second GPU), a per-process limit (a memory fraction, a MIG slice, a "
           "container's cap), or a driver in a bad state (after an Xid error).", free_s, tried);
  snprintf(w->fix, sizeof w->fix, "check which GPUs the run touches (CUDA_VISIBLE_DEVICES, "
           ".to(device) calls), any memory fraction or limit, and the kernel log for Xid errors "
           "(dmesg); the setting itself need not shrink.");
}

static void why_too_large(const struct vf_oom_report *r, const struct vf_oom_analysis *a, struct why *w) {
  if (r->source == VF_OOM_CUBLAS || r->source == VF_OOM_CUDNN || r->source == VF_OOM_NCCL)
    snprintf(w->cause, sizeof w->cause, "%s could not get memory for its handle, workspace or "
             "buffers: the GPU was already full%s.", vf_oom_source_name(r->source),
             r->certain ? "" : " (this status is memory running out more often than not)");
  else
    snprintf(w->cause, sizeof w->cause, "the setting needs more memory than the GPU has.%s",
             r->source == VF_OOM_JAX ? " JAX takes 75% of the GPU at start "
             "(XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION)." : "");
  plan_hint(a, w);
}

static void explain(const struct vf_oom_report *r, const struct vf_oom_analysis *a, struct why *w) {
  w->fix[0] = '\0';
  if (r->source == VF_OOM_HOST) {
    snprintf(w->cause, sizeof w->cause, "host memory (RAM) ran out, not the GPU.");
    snprintf(w->fix, sizeof w->fix, "smaller data-loader prefetch, fewer workers, or offload "
             "less to the CPU.");
    return;
  }
  switch (a->cause) {
  case VF_OOM_CAUSE_FRAGMENTATION: why_fragmentation(r, w); break;
  case VF_OOM_CAUSE_OTHER_PROCESS: why_other(a, w); break;
  case VF_OOM_CAUSE_LEAK: why_leak(r, w); break;
  case VF_OOM_CAUSE_LIMIT: why_limit(r, a, w); break;
  case VF_OOM_CAUSE_NOT_FULL: why_not_full(r, w); break;
  default: why_too_large(r, a, w); break;
  }
  size_t n = strlen(w->cause);
  if (a->self_listed >= 0)
    snprintf(w->cause + n, sizeof w->cause - n, " Process %u is this run itself, not another "
             "process: its own allocation would not fit beside it (a container shows the run "
             "under a pid PyTorch cannot match).", r->procs[a->self_listed].pid);
}

static json_t *known(uint64_t b) { return KNOWN(b) ? json_integer((json_int_t)b) : json_null(); }

static json_t *report_json(const struct vf_oom_report *r, const struct vf_oom_analysis *a,
                           const struct why *w) {
  json_t *procs = json_array();
  for (unsigned i = 0; i < r->n_procs; i++)
    json_array_append_new(procs, json_pack("{s:i, s:I, s:b}", "pid", (json_int_t)r->procs[i].pid,
                                           "bytes", (json_int_t)r->procs[i].bytes, "this_run",
                                           a->self_listed == (int)i));
  json_t *numbers = json_pack(
      "{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "tried_bytes",
      known(r->tried_bytes), "capacity_bytes", known(r->capacity_bytes), "allowed_bytes",
      known(r->allowed_bytes), "free_bytes", known(r->free_bytes), "process_bytes",
      known(r->process_bytes), "allocated_bytes", known(r->allocated_bytes),
      "reserved_unallocated_bytes", known(r->reserved_unallocated_bytes), "private_pool_bytes",
      known(r->private_pool_bytes), "other_process_bytes", known(a->others_bytes),
      "listed_process_bytes", known(r->other_process_bytes), "outside_pytorch_bytes",
      known(a->outside_bytes), "limit_bytes", known(a->limit_bytes));
  return json_pack("{s:s, s:b, s:i, s:i, s:o, s:s, s:i, s:b, s:o, s:o, s:s, s:s, s:s}", "source",
                   vf_oom_source_name(r->source), "certain", r->certain, "line", r->line, "count",
                   (int)r->count, "gpu", r->gpu >= 0 ? json_integer(r->gpu) : json_null(),
                   "excerpt", r->excerpt, "progress_lines", (int)r->progress_lines,
                   "leak_warning", r->leak_warning, "numbers", numbers, "processes", procs,
                   "cause", r->source == VF_OOM_HOST ? "host_memory" : vf_oom_cause_name(a->cause),
                   "explanation", w->cause, "fix", w->fix);
}

static void report_text(const struct vf_oom_report *r, const struct vf_oom_analysis *a,
                        const struct why *w) {
  printf("    %.200s%s\n", r->excerpt, strlen(r->excerpt) > 200 ? "..." : "");
  print_numbers(r, a);
  printf("  cause: %s\n", w->cause);
  if (w->fix[0]) printf("  fix:   %s\n", w->fix);
}

int doctor_check_log(struct doctor *d, const char *path) {
  char *text;
  size_t len;
  struct vf_diag diag;
  vf_diag_clear(&diag);
  int rc = file_read(path, MAX_LOG, &text, &len, &diag);
  if (rc) return cli_diag_error(NAME, rc, &diag);
  struct vf_oom_report r;
  vf_oom_parse(text, len, &r);
  free(text);
  if (!d->json) printf("\nlog %s\n", path);
  if (r.source == VF_OOM_NONE) {
    doctor_report(d, r.leak_warning ? DOCTOR_WARN : DOCTOR_OK, "log", "no out-of-memory report%s",
                  r.leak_warning ? "; 'vramfit watch' warned that memory kept growing" : "");
    if (d->json) json_object_set_new(d->json, "log", json_pack("{s:s, s:n}", "file", path, "report"));
    return 0;
  }
  doctor_report(d, DOCTOR_FAIL, "log", "line %d: %s out-of-memory report%s (%u in the log)",
                r.line, vf_oom_source_name(r.source), r.certain ? "" : " (likely)", r.count);
  struct vf_oom_analysis a;
  vf_oom_analyze(&r, &a);
  struct why w;
  explain(&r, &a, &w);
  if (d->json)
    json_object_set_new(d->json, "log", json_pack("{s:s, s:o}", "file", path, "report", report_json(&r, &a, &w)));
  else
    report_text(&r, &a, &w);
  return 0;
}
