/* doctor's environment checks: what the memory guides ask users to check by hand. */
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/doctor.h"
#include "cli/gpu_view.h"

void doctor_report(struct doctor *d, enum doctor_level level, const char *topic,
                   const char *fmt, ...) {
  static const char *const tags[] = {"ok", "info", "warn", "FAIL"};
  static const char *const names[] = {"ok", "info", "warn", "fail"};
  static const char *const colors[] = {"\033[32m", "\033[36m", "\033[33m", "\033[31m"};
  if (level >= DOCTOR_WARN) d->problems++;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (d->json) {
    json_array_append_new(json_object_get(d->json, "findings"),
                          json_pack("{s:s, s:s, s:s}", "level", names[level], "topic", topic,
                                    "message", msg));
    return;
  }
  printf("  %s%-4s%s  %-10s %s\n", d->color ? colors[level] : "", tags[level],
         d->color ? "\033[0m" : "", topic, msg);
}

static void check_driver(struct doctor *d) {
  char version[80];
  int cuda;
  vf_nvml_driver(d->nvml, version, sizeof version, &cuda);
  unsigned n = vf_nvml_count(d->nvml);
  doctor_report(d, n ? DOCTOR_OK : DOCTOR_FAIL, "driver", "NVIDIA %s, CUDA %d.%d, %u GPU%s",
                version[0] ? version : "?", cuda / 1000, cuda % 1000 / 10, n, n == 1 ? "" : "s");
}

/* CUDA reads CUDA_VISIBLE_DEVICES up to its first entry that names no GPU. */
static void check_visible(struct doctor *d) {
  const char *env = getenv("CUDA_VISIBLE_DEVICES");
  unsigned n = vf_nvml_count(d->nvml);
  d->gpu = n ? 0 : -1;
  if (!env) {
    doctor_report(d, DOCTOR_INFO, "visible", "CUDA_VISIBLE_DEVICES unset: a run sees %u GPU%s "
                  "and starts on GPU 0", n, n == 1 ? "" : "s");
    return;
  }
  char copy[512];
  snprintf(copy, sizeof copy, "%s", env);
  unsigned good = 0;
  char *save, *e = strtok_r(copy, ",", &save);
  for (unsigned index; e && vf_nvml_find(d->nvml, e, &index) == 0; e = strtok_r(NULL, ",", &save))
    if (good++ == 0) d->gpu = (int)index;
  if (good == 0) {
    d->gpu = -1;
    doctor_report(d, DOCTOR_FAIL, "visible", "CUDA_VISIBLE_DEVICES='%s' hides every GPU: the run "
                  "falls back to the CPU or fails", env);
  } else if (e) {
    doctor_report(d, DOCTOR_WARN, "visible", "CUDA_VISIBLE_DEVICES='%s': CUDA stops at '%s', "
                  "so the run sees only %u GPU%s", env, e, good, good == 1 ? "" : "s");
  } else {
    doctor_report(d, DOCTOR_OK, "visible", "CUDA_VISIBLE_DEVICES='%s': the run starts on GPU %d",
                  env, d->gpu);
  }
}

/* NVML numbers GPUs in PCI order, CUDA fastest first unless told otherwise: the two agree
 * on a machine of identical GPUs only. */
static void check_order(struct doctor *d, const char *first_name, bool mixed) {
  const char *order = getenv("CUDA_DEVICE_ORDER");
  if (!mixed || (order && strcmp(order, "PCI_BUS_ID") == 0)) return;
  doctor_report(d, DOCTOR_WARN, "order", "GPUs differ (GPU 0 is %s): CUDA numbers them fastest "
                "first, nvidia-smi and this report by PCI bus; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                "so that indices agree", first_name);
}

static void describe_procs(const struct vf_gpu_sample *s, char *buf, size_t size) {
  buf[0] = '\0';
  for (size_t i = 0; i < s->nprocs && i < 4; i++) {
    char mem[32];
    gpu_view_bytes(s->procs[i].used_bytes, mem, sizeof mem);
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, "%s%u %s (%s)", i ? ", " : "", s->procs[i].pid,
             s->procs[i].name[0] ? s->procs[i].name : "?", mem);
  }
  if (s->nprocs > 4) snprintf(buf + strlen(buf), size - strlen(buf), ", ...");
}

static void check_gpu(struct doctor *d, const struct vf_gpu_sample *s) {
  char topic[16], free_s[32], total[32], held[32], who[512];
  snprintf(topic, sizeof topic, "gpu %u", s->index);
  if (!(s->fields & VF_FIELD_MEMORY)) {
    doctor_report(d, DOCTOR_WARN, topic, "%s does not report its memory", s->name);
    return;
  }
  gpu_view_bytes(s->free_bytes, free_s, sizeof free_s);
  gpu_view_bytes(s->total_bytes, total, sizeof total);
  uint64_t sum = 0;
  for (size_t i = 0; i < s->nprocs; i++)
    if (s->procs[i].used_bytes != VF_BYTES_UNKNOWN) sum += s->procs[i].used_bytes;
  if (s->nprocs == 0) {
    doctor_report(d, DOCTOR_OK, topic, "%s: %s free of %s, no process holds memory", s->name,
                  free_s, total);
    return;
  }
  cli_format_bytes(sum, held, sizeof held);
  describe_procs(s, who, sizeof who);
  bool runs_here = (int)s->index == d->gpu;
  doctor_report(d, runs_here ? DOCTOR_WARN : DOCTOR_INFO, topic,
                "%s: %s free of %s; %zu other process%s hold%s %s: %s", s->name, free_s, total,
                s->nprocs, s->nprocs == 1 ? "" : "es", s->nprocs == 1 ? "s" : "", held, who);
}

static void check_gpus(struct doctor *d) {
  struct vf_gpu_sample *s = malloc(sizeof *s);
  if (!s) return;
  char first[96] = "";
  bool mixed = false;
  for (unsigned i = 0; i < vf_nvml_count(d->nvml); i++) {
    if (vf_nvml_sample(d->nvml, i, s) != 0) {
      doctor_report(d, DOCTOR_WARN, "gpu", "GPU %u does not answer (lost, or no permission)", i);
      continue;
    }
    if (i == 0) snprintf(first, sizeof first, "%s", s->name);
    mixed = mixed || strcmp(first, s->name) != 0;
    check_gpu(d, s);
  }
  free(s);
  check_order(d, first, mixed);
}

/* What the allocator configuration changes, in a few words. */
static void describe_conf(const struct vf_alloc_conf *c, char *buf, size_t size) {
  buf[0] = '\0';
  if (c->caching_disabled)
    snprintf(buf, size, "caching off: every free returns memory to the driver (slow); ");
  if (c->expandable_segments)
    snprintf(buf + strlen(buf), size - strlen(buf), "segments grow in place, so fragmentation "
             "stays low; ");
  if (c->backend_async)
    snprintf(buf + strlen(buf), size - strlen(buf), "cudaMallocAsync backend; ");
  if (c->max_split_size != UINT64_MAX)
    snprintf(buf + strlen(buf), size - strlen(buf), "blocks over %llu MiB are never split; ",
             (unsigned long long)(c->max_split_size >> 20));
  if (c->garbage_collection_threshold > 0)
    snprintf(buf + strlen(buf), size - strlen(buf), "cached blocks are freed above %.0f%% use; ",
             c->garbage_collection_threshold * 100);
  if (c->per_process_memory_fraction < 1)
    snprintf(buf + strlen(buf), size - strlen(buf), "the process may reserve %.0f%% of the GPU; ",
             c->per_process_memory_fraction * 100);
  size_t n = strlen(buf);
  if (n >= 2) buf[n - 2] = '\0';
  else snprintf(buf, size, "PyTorch's defaults");
}

/* PYTORCH_ALLOC_CONF is the newer name: PyTorch 2.8 and later read it first and then ignore
 * the old one; earlier versions read only PYTORCH_CUDA_ALLOC_CONF, and 2.9.1 ignores the new
 * name for CUDA. */
static void check_names(struct doctor *d, const char *now, const char *old) {
  if (now && old && strcmp(now, old) != 0)
    doctor_report(d, DOCTOR_WARN, "allocator", "PYTORCH_ALLOC_CONF='%s' and PYTORCH_CUDA_ALLOC_CONF"
                  "='%s' differ: PyTorch >= 2.8 reads only the first, older PyTorch only the "
                  "second; set both to one value", now, old);
  else if (now && !old)
    doctor_report(d, DOCTOR_WARN, "allocator", "only PYTORCH_ALLOC_CONF is set: PyTorch before "
                  "2.8 and 2.9.1 ignore it; set PYTORCH_CUDA_ALLOC_CONF to the same value too");
}

static void check_allocator(struct doctor *d) {
  const char *now = getenv("PYTORCH_ALLOC_CONF"), *old = getenv("PYTORCH_CUDA_ALLOC_CONF");
  const char *no_caching = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  struct vf_alloc_conf c;
  struct vf_diag diag;
  vf_diag_clear(&diag);
  if (vf_alloc_conf_from_env(now, old, no_caching, &c, &diag) != 0) {
    char msg[1200];
    vf_diag_format(&diag, msg, sizeof msg);
    doctor_report(d, DOCTOR_FAIL, "allocator", "PyTorch will refuse it: %s", msg);
    return;
  }
  check_names(d, now, old);
  char effect[512];
  describe_conf(&c, effect, sizeof effect);
  const char *value = now ? now : old;
  if (!value && !no_caching)
    doctor_report(d, DOCTOR_INFO, "allocator", "PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF "
                  "unset: %s (expandable_segments:True lowers fragmentation)", effect);
  else
    doctor_report(d, DOCTOR_OK, "allocator", "%s='%s': %s", now ? "PYTORCH_ALLOC_CONF" :
                  old ? "PYTORCH_CUDA_ALLOC_CONF" : "PYTORCH_NO_CUDA_MEMORY_CACHING",
                  value ? value : no_caching, effect);
}

/* JAX and TensorFlow take most of the GPU at start unless told not to. */
static void check_frameworks(struct doctor *d) {
  static const char *const vars[] = {"XLA_PYTHON_CLIENT_PREALLOCATE",
                                     "XLA_PYTHON_CLIENT_MEM_FRACTION",
                                     "TF_FORCE_GPU_ALLOW_GROWTH"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    if (v) doctor_report(d, DOCTOR_INFO, "framework", "%s=%s", vars[i], v);
  }
}

void doctor_check_env(struct doctor *d) {
  if (d->nvml) {
    check_driver(d);
    check_visible(d);
    check_gpus(d);
  }
  check_allocator(d);
  check_frameworks(d);
}

/* The peak a plan (recommended.peak_device_bytes) or an estimate (peak.device_bytes) gives:
 * the file at path, or text (then path only names it). */
static int plan_peak(const char *path, const char *text, uint64_t *peak) {
  json_error_t err;
  json_t *root = text ? json_loads(text, 0, &err) : json_load_file(path, 0, &err);
  if (!root) {
    fprintf(stderr, "vramfit doctor: %s:%d:%d: %s\n", path, err.line, err.column, err.text);
    return EXIT_BAD_INPUT;
  }
  json_t *v = json_object_get(json_object_get(root, "recommended"), "peak_device_bytes");
  if (!v) v = json_object_get(json_object_get(root, "peak"), "device_bytes");
  int rc = json_is_integer(v) && json_integer_value(v) > 0 ? 0 : EXIT_BAD_INPUT;
  if (rc)
    fprintf(stderr, "vramfit doctor: %s: no recommended.peak_device_bytes (plan --json) nor "
            "peak.device_bytes (estimate --json)\n", path);
  else
    *peak = (uint64_t)json_integer_value(v);
  json_decref(root);
  return rc;
}

int doctor_check_plan(struct doctor *d, const char *path, const char *text) {
  uint64_t peak;
  int rc = plan_peak(path, text, &peak);
  if (rc) return rc;
  struct vf_gpu_sample s;
  if (!d->nvml || d->gpu < 0 || vf_nvml_sample(d->nvml, (unsigned)d->gpu, &s) != 0 ||
      !(s.fields & VF_FIELD_MEMORY)) {
    doctor_report(d, DOCTOR_WARN, "plan", "no GPU to hold the plan's peak");
    return 0;
  }
  char need[32], free_s[32], total[32];
  cli_format_bytes(peak, need, sizeof need);
  cli_format_bytes(s.free_bytes, free_s, sizeof free_s);
  cli_format_bytes(s.total_bytes, total, sizeof total);
  if (peak > s.free_bytes)
    doctor_report(d, DOCTOR_FAIL, "plan", "the plan needs %s on GPU %d; %s is free of %s%s", need,
                  d->gpu, free_s, total, peak <= s.total_bytes ? ": other processes hold the "
                  "rest" : ": the GPU is too small for it");
  else
    doctor_report(d, peak > s.free_bytes / 100 * 95 ? DOCTOR_WARN : DOCTOR_OK, "plan",
                  "the plan needs %s on GPU %d; %s is free of %s", need, d->gpu, free_s, total);
  return 0;
}
