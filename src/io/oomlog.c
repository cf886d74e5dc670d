/* Out-of-memory reports in training logs: which framework said it, and the numbers it gave.
 * Matching is on the frameworks' own fixed wording (case-sensitive), never on exit codes. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vramfit/monitor.h"

#define WINDOW 2048 /* a report and its continuation lines */

static const struct pattern {
  const char *needle;
  enum vf_oom_source source;
  bool certain;
} patterns[] = {
    /* PyTorch's caching allocator, CUDA, HIP and XPU builds, every version */
    {" out of memory. Tried to allocate", VF_OOM_PYTORCH, true},
    {"MPS backend out of memory", VF_OOM_PYTORCH, true},
    {"Out of memory while trying to allocate", VF_OOM_JAX, true},
    {"RESOURCE_EXHAUSTED: Failed to allocate request for", VF_OOM_JAX, true},
    {"OOM when allocating tensor", VF_OOM_TENSORFLOW, true},
    {"Cuda failure 'out of memory'", VF_OOM_NCCL, true},
    {"CUDA error: out of memory", VF_OOM_CUDA, true},
    {"CUDA_ERROR_OUT_OF_MEMORY", VF_OOM_CUDA, true},
    {"cudaErrorMemoryAllocation", VF_OOM_CUDA, true},
    {"DefaultCPUAllocator: can't allocate memory", VF_OOM_HOST, true},
    /* statuses that are usually, not always, memory running out */
    {"CUBLAS_STATUS_ALLOC_FAILED", VF_OOM_CUBLAS, false},
    {"CUDNN_STATUS_ALLOC_FAILED", VF_OOM_CUDNN, false},
    {"CUDNN_STATUS_NOT_SUPPORTED. This error may appear", VF_OOM_CUDNN, false},
    {"CUDNN_STATUS_INTERNAL_ERROR", VF_OOM_CUDNN, false},
    {"CUDNN_STATUS_EXECUTION_FAILED", VF_OOM_CUDNN, false},
};

/* XLA's BFC allocator warns with similar words when a retry will follow. */
#define NOT_A_FAILURE "The caller indicates that this is not a failure"

const char *vf_oom_source_name(enum vf_oom_source s) {
  static const char *const names[] = {"none", "PyTorch", "CUDA", "cuBLAS", "cuDNN",
                                      "NCCL", "JAX/XLA", "TensorFlow", "host memory"};
  return s <= VF_OOM_HOST ? names[s] : "unknown";
}

static bool has(const char *line, size_t len, const char *needle) {
  return memmem(line, len, needle, strlen(needle)) != NULL;
}

/* A number with PyTorch's or TensorFlow's unit: "22.00 MiB", "0 bytes", "1.00GiB". */
static const char *size_at(const char *p, uint64_t *out) {
  while (*p == ' ') p++;
  char *end;
  double v = strtod(p, &end);
  if (end == p || v < 0) return NULL;
  while (*end == ' ') end++;
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"bytes", 1},         {"KiB", 1024.0},          {"MiB", 1048576.0},
               {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"B", 1}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
    size_t n = strlen(units[i].unit);
    if (strncmp(end, units[i].unit, n) != 0) continue;
    double bytes = v * units[i].mult + 0.5;
    if (!(bytes < 18446744073709551616.0)) return NULL; /* beyond 64 bits: not a real size */
    *out = (uint64_t)bytes;
    return end + n;
  }
  return NULL;
}

/* The size right after the first `after` in w, if any. */
static void size_after(const char *w, const char *after, uint64_t *out) {
  const char *p = strstr(w, after);
  if (p) size_at(p + strlen(after), out);
}

static void int_after(const char *w, const char *after, int *out) {
  const char *p = strstr(w, after);
  if (p && isdigit((unsigned char)p[strlen(after)])) *out = atoi(p + strlen(after));
}

/* PyTorch >= 2.1: "GPU 0 has a total capacity of X of which Y is free. Process P has Z
 * memory in use. Including non-PyTorch memory, this process has W memory in use. Of the
 * allocated memory A is allocated by PyTorch, and R is reserved by PyTorch but
 * unallocated." (2.1 spelled it "capacty"). */
static void pytorch_new(const char *w, struct vf_oom_report *r) {
  const char *cap = strstr(w, "has a total capac");
  if (cap && (cap = strstr(cap, " of "))) {
    const char *p = size_at(cap + 4, &r->capacity_bytes);
    if (p && strncmp(p, " of which ", 10) == 0) size_at(p + 10, &r->free_bytes);
  }
  size_after(w, "this process has ", &r->process_bytes);
  size_after(w, "Of the allocated memory ", &r->allocated_bytes);
  const char *p = strstr(w, "is allocated by PyTorch, and ");
  if (p) size_at(p + strlen("is allocated by PyTorch, and "), &r->reserved_unallocated_bytes);
  for (p = w; (p = strstr(p, "Process ")) != NULL; p++) {
    const char *has_at = strstr(p, " has ");
    uint64_t b;
    if (!has_at || has_at - p > 24 || !size_at(has_at + 5, &b)) continue;
    if (r->other_process_bytes == VF_BYTES_UNKNOWN) r->other_process_bytes = 0;
    r->other_process_bytes += b;
  }
}

/* PyTorch <= 2.0: "(GPU 0; 11.17 GiB total capacity; 10.40 GiB already allocated; 3.81 MiB
 * free; 10.66 GiB reserved in total by PyTorch)"; before 1.4 the last was "X cached", the
 * cached blocks nothing used. */
static void pytorch_old(const char *w, struct vf_oom_report *r) {
  const char *p = strstr(w, "(GPU ");
  if (!p) return;
  const char *end = strchr(p, ')');
  uint64_t reserved = VF_BYTES_UNKNOWN;
  for (p = strchr(p, ';'); p && (!end || p < end); p = strchr(p + 1, ';')) {
    uint64_t b;
    const char *label = size_at(p + 1, &b);
    if (!label) continue;
    while (*label == ' ') label++;
    if (!strncmp(label, "total capacity", 14)) r->capacity_bytes = b;
    else if (!strncmp(label, "already allocated", 17)) r->allocated_bytes = b;
    else if (!strncmp(label, "free", 4)) r->free_bytes = b;
    else if (!strncmp(label, "reserved in total", 17)) reserved = b;
    else if (!strncmp(label, "cached", 6)) r->reserved_unallocated_bytes = b;
  }
  if (reserved != VF_BYTES_UNKNOWN && r->allocated_bytes != VF_BYTES_UNKNOWN &&
      reserved >= r->allocated_bytes)
    r->reserved_unallocated_bytes = reserved - r->allocated_bytes;
}

static void read_pytorch(const char *w, struct vf_oom_report *r) {
  size_after(w, "Tried to allocate ", &r->tried_bytes);
  int_after(w, "GPU ", &r->gpu);
  if (strstr(w, "(GPU ")) pytorch_old(w, r);
  else pytorch_new(w, r);
}

static void read_jax(const char *w, struct vf_oom_report *r) {
  const char *p = strstr(w, "trying to allocate ");
  if (p) r->tried_bytes = strtoull(p + strlen("trying to allocate "), NULL, 10);
  p = strstr(w, "Failed to allocate request for ");
  if (p && (p = strchr(p, '('))) r->tried_bytes = strtoull(p + 1, NULL, 10);
  int_after(w, "device ordinal ", &r->gpu);
}

static uint64_t dtype_bytes(const char *t) {
  static const struct {
    const char *name;
    uint64_t bytes;
  } types[] = {{"bfloat16", 2}, {"half", 2},    {"float16", 2}, {"float", 4},
               {"double", 8},   {"int64", 8},   {"int32", 4},   {"int16", 2},
               {"int8", 1},     {"uint8", 1},   {"bool", 1},    {"complex64", 8}};
  for (size_t i = 0; i < sizeof types / sizeof *types; i++)
    if (!strncmp(t, types[i].name, strlen(types[i].name))) return types[i].bytes;
  return 0;
}

/* "OOM when allocating tensor with shape[16,112,112,147] and type float on
 * /job:localhost/replica:0/task:0/device:GPU:0": the size is the shape times the type. */
static void read_tensorflow(const char *w, struct vf_oom_report *r) {
  const char *p = strstr(w, "shape");
  const char *type = strstr(w, " type ");
  if (p && (p = strchr(p, '[')) && type) {
    uint64_t bytes = dtype_bytes(type + 6);
    bool overflow = false;
    for (p++; *p && *p != ']'; p++)
      if (isdigit((unsigned char)*p)) {
        char *end;
        overflow |= __builtin_mul_overflow(bytes, strtoull(p, &end, 10), &bytes);
        p = end - 1;
      }
    if (bytes && !overflow) r->tried_bytes = bytes;
  }
  int_after(w, "device:GPU:", &r->gpu);
}

/* "failed to allocate 32.00M (33554432 bytes) from device" / "failed to alloc N bytes". */
static void read_cuda(const char *w, struct vf_oom_report *r) {
  const char *p = strstr(w, " bytes)");
  if (p) {
    while (p > w && isdigit((unsigned char)p[-1])) p--;
    r->tried_bytes = strtoull(p, NULL, 10);
  } else if ((p = strstr(w, "failed to alloc "))) {
    r->tried_bytes = strtoull(p + strlen("failed to alloc "), NULL, 10);
  }
}

/* Lines a training loop prints while it makes progress: tqdm bars, "loss" values, numbered
 * steps, epochs and iterations. */
static bool progress_line(const char *line, size_t len) {
  if (has(line, len, "it/s]") || has(line, len, "s/it]")) return true;
  static const char *const words[] = {"loss", "step", "epoch", "iter"};
  for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
    size_t n = strlen(words[w]);
    for (size_t i = 0; i + n < len; i++) {
      if (strncasecmp(line + i, words[w], n) != 0) continue;
      size_t j = i + n;
      while (j < len && (line[j] == ' ' || line[j] == ':' || line[j] == '=' ||
                         line[j] == '\'' || line[j] == '"' || line[j] == 's'))
        j++;
      if (j < len && isdigit((unsigned char)line[j])) return true;
    }
  }
  return false;
}

/* TensorFlow's BFC allocator dump ("Limit:  10625279591", "InUse:  7350513920"). */
static void bfc_stat(const char *line, size_t len, uint64_t *limit, uint64_t *in_use) {
  while (len && isspace((unsigned char)*line)) line++, len--;
  if (len > 6 && !strncmp(line, "Limit:", 6)) *limit = strtoull(line + 6, NULL, 10);
  if (len > 6 && !strncmp(line, "InUse:", 6)) *in_use = strtoull(line + 6, NULL, 10);
}

static const struct pattern *match(const char *line, size_t len) {
  if (has(line, len, NOT_A_FAILURE)) return NULL;
  for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++)
    if (has(line, len, patterns[i].needle)) return &patterns[i];
  return NULL;
}

static void fill(const char *text, size_t len, const char *line, size_t line_len, int lineno,
                 const struct pattern *pat, struct vf_oom_report *r) {
  r->source = pat->source;
  r->certain = pat->certain;
  r->line = lineno;
  const char *start = line;
  while (start < line + line_len && isspace((unsigned char)*start)) start++;
  snprintf(r->excerpt, sizeof r->excerpt, "%.*s", (int)(line + line_len - start), start);
  char w[WINDOW + 1];
  size_t n = (size_t)(text + len - line);
  if (n > WINDOW) n = WINDOW;
  for (size_t i = 0; i < n; i++) w[i] = isspace((unsigned char)line[i]) || !line[i] ? ' ' : line[i];
  w[n] = '\0';
  if (pat->source == VF_OOM_PYTORCH) read_pytorch(w, r);
  else if (pat->source == VF_OOM_JAX) read_jax(w, r);
  else if (pat->source == VF_OOM_TENSORFLOW) read_tensorflow(w, r);
  else if (pat->source == VF_OOM_CUDA) read_cuda(w, r);
}

static void report_init(struct vf_oom_report *r) {
  memset(r, 0, sizeof *r);
  r->gpu = -1;
  r->tried_bytes = r->capacity_bytes = r->free_bytes = r->process_bytes = VF_BYTES_UNKNOWN;
  r->allocated_bytes = r->reserved_unallocated_bytes = r->other_process_bytes =
      VF_BYTES_UNKNOWN;
}

int vf_oom_parse(const char *text, size_t len, struct vf_oom_report *out) {
  report_init(out);
  uint64_t limit = VF_BYTES_UNKNOWN, in_use = VF_BYTES_UNKNOWN;
  unsigned progress = 0, count = 0;
  bool leak = false;
  int lineno = 0;
  for (const char *p = text, *end = text + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    lineno++;
    const struct pattern *pat = match(p, n);
    if (pat) {
      count++;
      bool better = out->source == VF_OOM_NONE || (pat->certain && !out->certain);
      if (better) {
        report_init(out);
        fill(text, len, p, n, lineno, pat, out);
        out->progress_lines = progress;
        if (pat->source == VF_OOM_TENSORFLOW) {
          out->capacity_bytes = limit;
          out->allocated_bytes = in_use;
        }
      }
    } else if (progress_line(p, n)) {
      progress++;
    }
    leak = leak || has(p, n, VF_LEAK_WARNING);
    bfc_stat(p, n, &limit, &in_use);
    p = nl ? nl + 1 : end;
  }
  out->count = count;
  out->leak_warning = leak;
  return 0;
}
