/* Out-of-memory reports in training logs: which framework said it, and the numbers it gave.
 * Matching is on the frameworks' own fixed wording (case-sensitive), never on exit codes. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vramfit/monitor.h"

#define WINDOW 4096      /* one report, continuation lines included */
#define CONTINUATION 3    /* lines a wrapped report may continue on */

static const struct pattern {
  const char *needle;
  const char *also; /* a second phrase the line must hold, or NULL */
  enum vf_oom_source source;
  bool certain, any_case;
} patterns[] = {
    /* PyTorch's caching allocator, CUDA, HIP and XPU builds, every version */
    {" out of memory. Tried to allocate", NULL, VF_OOM_PYTORCH, true, false},
    {"MPS backend out of memory", NULL, VF_OOM_PYTORCH, true, false},
    /* PyTorch 0.x: "cuda runtime error (2) : out of memory at .../THCStorage.cu:58" */
    {"cuda runtime error (2) : out of memory", NULL, VF_OOM_PYTORCH, true, false},
    /* XLA's cudaMallocAsync allocator; the line quotes CUDA_ERROR_OUT_OF_MEMORY too */
    {"cuMemAllocAsync failed to allocate", NULL, VF_OOM_JAX, true, false},
    {"Out of memory while trying to allocate", NULL, VF_OOM_JAX, true, false},
    {"RESOURCE_EXHAUSTED: Out of memory allocating", NULL, VF_OOM_JAX, true, false},
    /* "RESOURCE_EXHAUSTED: Failed to allocate request for 32.00MiB", also "Resource exhausted:" */
    {"Failed to allocate request for", NULL, VF_OOM_JAX, true, true},
    {"OOM when allocating tensor", NULL, VF_OOM_TENSORFLOW, true, false},
    /* NCCL: "Cuda failure 'out of memory'", and "Cuda failure 2 'out of memory'" */
    {"Cuda failure", "'out of memory'", VF_OOM_NCCL, true, false},
    {"CUDA error: out of memory", NULL, VF_OOM_CUDA, true, false},
    /* TensorFlow's stream executor: an allocation it may retry smaller */
    {"failed to allocate", "CUDA_ERROR_OUT_OF_MEMORY", VF_OOM_CUDA, false, false},
    {"CUDA_ERROR_OUT_OF_MEMORY", NULL, VF_OOM_CUDA, true, false},
    {"cudaErrorMemoryAllocation", NULL, VF_OOM_CUDA, true, false},
    {"DefaultCPUAllocator: can't allocate memory", NULL, VF_OOM_HOST, true, false},
    {"DefaultCPUAllocator: not enough memory", NULL, VF_OOM_HOST, true, false},
    /* statuses that are usually, not always, memory running out */
    {"CUBLAS_STATUS_ALLOC_FAILED", NULL, VF_OOM_CUBLAS, false, false},
    {"CUDNN_STATUS_ALLOC_FAILED", NULL, VF_OOM_CUDNN, false, false},
    {"CUDNN_STATUS_NOT_SUPPORTED. This error may appear", NULL, VF_OOM_CUDNN, false, false},
    {"CUDNN_STATUS_INTERNAL_ERROR", NULL, VF_OOM_CUDNN, false, false},
    {"CUDNN_STATUS_EXECUTION_FAILED", NULL, VF_OOM_CUDNN, false, false},
};

/* XLA's BFC allocator warns with similar words when a retry will follow. */
#define NOT_A_FAILURE "The caller indicates that this is not a failure"

const char *vf_oom_source_name(enum vf_oom_source s) {
  static const char *const names[] = {"none", "PyTorch", "CUDA", "cuBLAS", "cuDNN",
                                      "NCCL", "JAX/XLA", "TensorFlow", "host memory"};
  return s <= VF_OOM_HOST ? names[s] : "unknown";
}

/* The needle in line[0..len), in any letter case when asked. */
static const char *find(const char *line, size_t len, const char *needle, bool any_case) {
  size_t n = strlen(needle);
  if (!any_case) return memmem(line, len, needle, n);
  for (size_t i = 0; i + n <= len; i++)
    if (strncasecmp(line + i, needle, n) == 0) return line + i;
  return NULL;
}

static bool has(const char *line, size_t len, const char *needle) {
  return find(line, len, needle, false) != NULL;
}

/* A number with PyTorch's or TensorFlow's unit: "22.00 MiB", "0 bytes", "1.00GiB". */
static const char *size_at(const char *p, uint64_t *out) {
  while (*p == ' ') p++;
  if (!isdigit((unsigned char)*p)) return NULL;
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

/* The size right after the first `after` in w (any letter case), if any. */
static void size_after(const char *w, const char *after, uint64_t *out) {
  const char *p = strcasestr(w, after);
  if (p) size_at(p + strlen(after), out);
}

/* The size written just before `phrase`: "736.86 MiB is reserved by PyTorch". */
static void size_before(const char *w, const char *phrase, uint64_t *out) {
  const char *p = strstr(w, phrase);
  if (!p) return;
  while (p > w && p[-1] == ' ') p--;
  while (p > w && isalpha((unsigned char)p[-1])) p--; /* the unit */
  while (p > w && p[-1] == ' ') p--;
  while (p > w && (isdigit((unsigned char)p[-1]) || p[-1] == '.')) p--;
  size_at(p, out);
}

/* A plain count of bytes at p ("6442450944 bytes"), if p starts with one. */
static void count_at(const char *p, uint64_t *out) {
  if (!isdigit((unsigned char)*p)) return;
  errno = 0;
  unsigned long long v = strtoull(p, NULL, 10);
  if (errno == 0) *out = v;
}

/* The count right after the first `after` in w (any letter case), if any. */
static void count_after(const char *w, const char *after, uint64_t *out) {
  const char *p = strcasestr(w, after);
  if (p) count_at(p + strlen(after), out);
}

static void int_after(const char *w, const char *after, int *out) {
  const char *p = strstr(w, after);
  if (p && isdigit((unsigned char)p[strlen(after)])) *out = atoi(p + strlen(after));
}

/* "Process 48213 has 6.02 GiB memory in use": each pid once, however often it is listed. */
static void listed_processes(const char *w, struct vf_oom_report *r) {
  for (const char *p = w; (p = strstr(p, "Process ")) != NULL; p++) {
    char *end;
    unsigned long pid = strtoul(p + 8, &end, 10);
    uint64_t b;
    if (end == p + 8 || strncmp(end, " has ", 5) != 0 || !size_at(end + 5, &b)) continue;
    bool seen = false;
    for (unsigned i = 0; i < r->n_procs; i++) seen |= r->procs[i].pid == pid;
    if (seen || r->n_procs == VF_OOM_MAX_PROCS) continue;
    r->procs[r->n_procs++] = (struct vf_oom_proc){(unsigned)pid, b};
    if (r->other_process_bytes == VF_BYTES_UNKNOWN) r->other_process_bytes = 0;
    r->other_process_bytes += b;
  }
}

/* PyTorch >= 2.1: "GPU 0 has a total capacity of X of which Y is free. Process P has Z
 * memory in use. Including non-PyTorch memory, this process has W memory in use. Of the
 * allocated memory A is allocated by PyTorch, [with C allocated in private pools (e.g.,
 * CUDA Graphs),] and R is reserved by PyTorch but unallocated." (2.1 spelled it "capacty"). */
static void pytorch_new(const char *w, struct vf_oom_report *r) {
  const char *cap = strstr(w, "has a total capac");
  if (cap && (cap = strstr(cap, " of "))) {
    const char *p = size_at(cap + 4, &r->capacity_bytes);
    if (p && strncmp(p, " of which ", 10) == 0) size_at(p + 10, &r->free_bytes);
  }
  size_after(w, "this process has ", &r->process_bytes);
  size_after(w, "Of the allocated memory ", &r->allocated_bytes);
  size_before(w, "is reserved by PyTorch but unallocated", &r->reserved_unallocated_bytes);
  size_before(w, "allocated in private pools", &r->private_pool_bytes);
  listed_processes(w, r);
}

/* PyTorch <= 2.0: "(GPU 0; 11.17 GiB total capacity; 10.40 GiB already allocated; 3.81 MiB
 * free; [1.05 GiB allowed;] 10.66 GiB reserved in total by PyTorch)"; before 1.4 the last
 * was "X cached", the cached blocks nothing used. "allowed" is the limit a memory fraction
 * sets. */
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
    else if (!strncmp(label, "allowed", 7)) r->allowed_bytes = b;
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

/* XLA: "Out of memory while trying to allocate N bytes", "Out of memory allocating N bytes",
 * "Failed to allocate request for 8.00GiB (8589934592B) on device ordinal 1" (any case),
 * "cuMemAllocAsync failed to allocate N bytes". */
static void read_jax(const char *w, struct vf_oom_report *r) {
  count_after(w, "trying to allocate ", &r->tried_bytes);
  count_after(w, "memory allocating ", &r->tried_bytes);
  count_after(w, "cuMemAllocAsync failed to allocate ", &r->tried_bytes);
  const char *p = strcasestr(w, "Failed to allocate request for ");
  if (p && (p = strchr(p, '('))) count_after(p, "(", &r->tried_bytes);
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
    count_at(p, &r->tried_bytes);
  } else {
    count_after(w, "failed to alloc ", &r->tried_bytes);
  }
}

static void read_other(const char *w, struct vf_oom_report *r) {
  count_after(w, "Failed to CUDA calloc ", &r->tried_bytes); /* NCCL's warning that follows */
  count_after(w, "you tried to allocate ", &r->tried_bytes); /* DefaultCPUAllocator */
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
  if (len < 7 || (strncmp(line, "Limit:", 6) && strncmp(line, "InUse:", 6))) return;
  size_t i = 6;
  while (i < len && line[i] == ' ') i++;
  char num[32]; /* the line is not NUL-terminated: the count is read from a copy */
  snprintf(num, sizeof num, "%.*s", (int)(len - i < sizeof num ? len - i : sizeof num - 1), line + i);
  count_at(num, line[0] == 'L' ? limit : in_use);
}

static bool digits(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)p[i])) return false;
  return true;
}

/* An INFO line of the glog/absl logs TensorFlow, XLA and NCCL's hosts write: "I0602 11:02:44
 * ..." or "2024-06-02 10:14:07.511203: I tensorflow/...". TensorFlow logs the allocations it
 * will retry smaller there: never a failure. */
static bool info_line(const char *line, size_t len) {
  size_t i = 0;
  while (i < len && line[i] == ' ') i++;
  if (len - i > 20 && digits(line + i, 4) && line[i + 4] == '-' && line[i + 10] == ' ') {
    const char *colon = memchr(line + i + 11, ':', len - i - 11);
    colon = colon ? memchr(colon + 1, ':', (size_t)(line + len - colon - 1)) : NULL;
    colon = colon ? memchr(colon + 1, ':', (size_t)(line + len - colon - 1)) : NULL;
    if (!colon) return false;
    i = (size_t)(colon - line) + 1;
    while (i < len && line[i] == ' ') i++;
    return len - i > 2 && line[i] == 'I' && line[i + 1] == ' ';
  }
  return len - i > 6 && line[i] == 'I' && digits(line + i + 1, 4) && line[i + 5] == ' ';
}

/* XLA's BFC allocator warns with similar words when a retry will follow. */
#define NOT_A_FAILURE "The caller indicates that this is not a failure"

static const struct pattern *match(const char *line, size_t len) {
  if (has(line, len, NOT_A_FAILURE) || info_line(line, len)) return NULL;
  for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
    const struct pattern *p = &patterns[i];
    if (find(line, len, p->needle, p->any_case) && (!p->also || has(line, len, p->also))) return p;
  }
  return NULL;
}

/* A PyTorch report holds all its numbers once it reaches its closing words. */
static bool pytorch_complete(const char *s, size_t n) {
  return !has(s, n, "Tried to allocate") || has(s, n, "but unallocated") ||
         has(s, n, "reserved in total") || has(s, n, "cached)") || has(s, n, "Memory Management");
}

/* Where a report ends: its own line, or for a PyTorch message a launcher wrapped ("[rank0]:
 * ..." lines) and for NCCL's warning (the size follows on the next lines), the lines that
 * continue it, never into the next report. */
static size_t report_len(const char *text, size_t len, const char *line, size_t line_len,
                         enum vf_oom_source s) {
  const char *end = line + line_len, *stop = text + len;
  if (s != VF_OOM_PYTORCH && s != VF_OOM_NCCL) return line_len;
  for (int k = 0; k < CONTINUATION && end < stop; k++) {
    if (s == VF_OOM_PYTORCH && pytorch_complete(line, (size_t)(end - line))) break;
    const char *next = end + 1, *nl = next < stop ? memchr(next, '\n', (size_t)(stop - next)) : NULL;
    size_t n = next < stop ? (size_t)((nl ? nl : stop) - next) : 0;
    if (next >= stop || match(next, n)) break;
    end = next + n;
  }
  return (size_t)(end - line);
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
  size_t n = report_len(text, len, line, line_len, pat->source);
  if (n > WINDOW) n = WINDOW;
  for (size_t i = 0; i < n; i++) w[i] = isspace((unsigned char)line[i]) || !line[i] ? ' ' : line[i];
  w[n] = '\0';
  if (pat->source == VF_OOM_PYTORCH) read_pytorch(w, r);
  else if (pat->source == VF_OOM_JAX) read_jax(w, r);
  else if (pat->source == VF_OOM_TENSORFLOW) read_tensorflow(w, r);
  else if (pat->source == VF_OOM_CUDA) read_cuda(w, r);
  else read_other(w, r);
}

static void report_init(struct vf_oom_report *r) {
  memset(r, 0, sizeof *r);
  r->gpu = -1;
  r->tried_bytes = r->capacity_bytes = r->free_bytes = r->process_bytes = VF_BYTES_UNKNOWN;
  r->allocated_bytes = r->reserved_unallocated_bytes = r->other_process_bytes =
      VF_BYTES_UNKNOWN;
  r->allowed_bytes = r->private_pool_bytes = VF_BYTES_UNKNOWN;
}

/* What TensorFlow's allocator said before its report: its limits, and the request it could
 * not serve ("ran out of memory trying to allocate 39.81MiB"), for a report without a shape. */
struct tf_context {
  uint64_t limit, in_use, request;
};

#define TF_REQUEST "ran out of memory trying to allocate "

static void tf_note(const char *line, size_t n, struct tf_context *tf) {
  bfc_stat(line, n, &tf->limit, &tf->in_use);
  const char *p = find(line, n, TF_REQUEST, true);
  if (!p || has(line, n, NOT_A_FAILURE)) return;
  p += strlen(TF_REQUEST);
  char num[64]; /* the line is not NUL-terminated: the size is read from a copy */
  size_t k = (size_t)(line + n - p);
  snprintf(num, sizeof num, "%.*s", (int)(k < sizeof num ? k : sizeof num - 1), p);
  size_at(num, &tf->request);
}

static void take_report(const char *text, size_t len, const char *p, size_t n, int lineno,
                        const struct pattern *pat, unsigned progress, const struct tf_context *tf,
                        struct vf_oom_report *out) {
  report_init(out);
  fill(text, len, p, n, lineno, pat, out);
  out->progress_lines = progress;
  if (pat->source != VF_OOM_TENSORFLOW) return;
  out->capacity_bytes = tf->limit;
  out->allocated_bytes = tf->in_use;
  if (out->tried_bytes == VF_BYTES_UNKNOWN) out->tried_bytes = tf->request;
}

int vf_oom_parse(const char *text, size_t len, struct vf_oom_report *out) {
  report_init(out);
  struct tf_context tf = {VF_BYTES_UNKNOWN, VF_BYTES_UNKNOWN, VF_BYTES_UNKNOWN};
  unsigned progress = 0, count = 0;
  bool leak = false;
  int lineno = 0;
  for (const char *p = text, *end = text + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    lineno++;
    tf_note(p, n, &tf);
    const struct pattern *pat = match(p, n);
    if (pat) {
      count++;
      if (out->source == VF_OOM_NONE || (pat->certain && !out->certain))
        take_report(text, len, p, n, lineno, pat, progress, &tf, out);
    } else if (progress_line(p, n)) {
      progress++;
    }
    leak = leak || has(p, n, VF_LEAK_WARNING);
    p = nl ? nl + 1 : end;
  }
  out->count = count;
  out->leak_warning = leak;
  return 0;
}
