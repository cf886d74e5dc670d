/* A fake libnvidia-ml for tests, driven by the script file named by $FAKE_NVML_SCRIPT.
 *
 * It writes NVML's structs byte by byte at the offsets NVIDIA documents (not through
 * vramfit's own declarations), so a wrong layout or version word in vramfit shows up as
 * wrong numbers or a refused call. Built twice: the full library, and with
 * FAKE_NVML_LEGACY an old driver that exports only unversioned symbols.
 *
 * Script: one directive per line, "key=value" words, '#' comments, values may be quoted.
 *   clock samples|seconds         time for series below: memory calls on that GPU, or
 *                                 seconds since nvmlInit (default)
 *   init error=CODE               nvmlInit fails
 *   driver version=S cuda=N
 *   quirk r535                    _v3 process calls write the 32-byte R535 layout
 *   gpu index=I name=S uuid=S total=Q reserved=Q cc=M.m util=SER memutil=SER temp=SER
 *       power=SER limit=Q used=SER base=Q memory=na
 *   proc gpu=I pid=N|self|child name=S used=SER|na type=compute|graphics|both from=T until=T
 *                                 (name: what nvmlSystemGetProcessName answers)
 *   err fn=NAME|* code=CODE [gpu=I] [from=T] [until=T]
 * Q is a number with an optional unit (B KiB MiB GiB TiB KB MB GB W); SER is a constant Q,
 * "step:T:Q,T:Q,..." (hold the last keyframe), "lin:T:Q,T:Q,..." (interpolate, then
 * extend the last segment) or "file:PATH" (the Q written in PATH when asked, 0 while there is
 * none: a fake trainer says what it holds; PATH.seen is made once a process list said it).
 * fn=NAME also matches NAME_v2/_v3; fn=* any per-GPU call.
 * $FAKE_NVML_TRACE names a file that gets each called symbol, one a line. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 16
#define MAX_PROCS 64
#define MAX_ERRS 64
#define MAX_KEYS 32
#define ONES 0xFFFFFFFFFFFFFFFFull

enum { SUCCESS = 0, ERR_UNINITIALIZED = 1, ERR_INVALID_ARGUMENT = 2, ERR_NOT_SUPPORTED = 3,
       ERR_INSUFFICIENT_SIZE = 7, ERR_ARGUMENT_VERSION_MISMATCH = 25 };

enum series_mode { CONST, STEP, LIN, FROM_FILE };
struct series {
  enum series_mode mode;
  bool na;
  int n;
  double t[MAX_KEYS], v[MAX_KEYS];
  char path[256]; /* FROM_FILE: the file whose first word is the value */
};

struct gpu {
  char name[96], uuid[96];
  int cc_major, cc_minor;
  double total, reserved, base, limit_w;
  bool memory_na, has_used;
  struct series used, util, memutil, temp, power;
  long samples;
};

struct proc {
  int gpu, type; /* 1 compute, 2 graphics, 3 both */
  char pid[16], name[64];
  struct series used;
  double from, until;
};

struct err {
  char fn[96];
  int code, gpu;
  double from, until;
};

static struct {
  int init_error;
  char driver[80];
  int cuda;
  bool clock_samples, r535, initialised;
  int ngpus, nprocs, nerrs;
  struct gpu g[MAX_GPUS];
  struct proc p[MAX_PROCS];
  struct err e[MAX_ERRS];
  struct timespec t0;
  FILE *trace;
} S;

static void trace(const char *fn) {
  if (S.trace) fprintf(S.trace, "%s\n", fn);
}

/* ---- script parsing ---- */

static double quantity(const char *s) {
  char *end;
  double v = strtod(s, &end);
  static const struct {
    const char *unit;
    double mult;
  } units[] = {{"B", 1},        {"KiB", 1024.0},       {"MiB", 1048576.0},
               {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3},
               {"MB", 1e6},     {"GB", 1e9},           {"W", 1.0}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (strcmp(end, units[i].unit) == 0) return v * units[i].mult;
  return v;
}

static void parse_series(const char *s, struct series *out) {
  memset(out, 0, sizeof *out);
  if (strcmp(s, "na") == 0) {
    out->na = true;
    return;
  }
  if (strncmp(s, "file:", 5) == 0) {
    out->mode = FROM_FILE;
    out->n = 1;
    snprintf(out->path, sizeof out->path, "%s", s + 5);
    return;
  }
  if (strncmp(s, "step:", 5) && strncmp(s, "lin:", 4)) {
    out->mode = CONST;
    out->n = 1;
    out->v[0] = quantity(s);
    return;
  }
  out->mode = s[0] == 's' ? STEP : LIN;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", strchr(s, ':') + 1);
  for (char *save, *k = strtok_r(buf, ",", &save); k && out->n < MAX_KEYS;
       k = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(k, ':');
    if (!colon) continue;
    *colon = '\0';
    out->t[out->n] = atof(k);
    out->v[out->n++] = quantity(colon + 1);
  }
}

static double from_file(const char *path) {
  char word[64] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = fscanf(f, "%63s", word);
  fclose(f);
  return n == 1 ? quantity(word) : 0;
}

/* PATH.seen, once a process list has reported the value in PATH: a fake trainer waits for it,
 * so that its memory is seen however slow the machine. (Memory totals read the file too, but
 * a trainer gone before the process list would be seen as holding nothing.) */
static void mark_seen(const struct series *s, double value) {
  char seen[300];
  FILE *f;
  snprintf(seen, sizeof seen, "%s.seen", s->path);
  if (s->mode == FROM_FILE && value > 0 && (f = fopen(seen, "w"))) fclose(f);
}

static double eval(const struct series *s, double t) {
  if (s->n == 0) return 0;
  if (s->mode == FROM_FILE) return from_file(s->path);
  if (s->mode == CONST || t <= s->t[0]) return s->v[0];
  int i = 0;
  while (i + 1 < s->n && s->t[i + 1] <= t) i++;
  if (s->mode == STEP || s->n == 1) return s->v[i];
  if (i + 1 == s->n) i--; /* past the end: extend the last segment */
  double dt = s->t[i + 1] - s->t[i];
  return dt > 0 ? s->v[i] + (s->v[i + 1] - s->v[i]) * (t - s->t[i]) / dt : s->v[i + 1];
}

static int code_of(const char *s) {
  static const struct {
    const char *name;
    int code;
  } codes[] = {{"UNINITIALIZED", 1},      {"INVALID_ARGUMENT", 2},
               {"NOT_SUPPORTED", 3},      {"NO_PERMISSION", 4},
               {"NOT_FOUND", 6},          {"INSUFFICIENT_SIZE", 7},
               {"DRIVER_NOT_LOADED", 9},  {"FUNCTION_NOT_FOUND", 13},
               {"GPU_IS_LOST", 15},       {"LIB_RM_VERSION_MISMATCH", 18},
               {"ARGUMENT_VERSION_MISMATCH", 25}, {"UNKNOWN", 999}};
  for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
    if (strcasecmp(s, codes[i].name) == 0) return codes[i].code;
  return atoi(s);
}

/* Splits a line into key=value words (values may be "quoted"); the first word is the verb. */
struct words {
  int n;
  char key[24][32], val[24][256];
};

static void split(char *line, struct words *w) {
  w->n = 0;
  char *p = line;
  while (*p && w->n < 24) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p || *p == '#') break;
    char *k = p;
    while (*p && *p != '=' && !isspace((unsigned char)*p)) p++;
    snprintf(w->key[w->n], sizeof w->key[0], "%.*s", (int)(p - k), k);
    w->val[w->n][0] = '\0';
    if (*p == '=') {
      p++;
      char quote = *p == '"' ? *p++ : 0;
      char *v = p;
      while (*p && (quote ? *p != quote : !isspace((unsigned char)*p))) p++;
      snprintf(w->val[w->n], sizeof w->val[0], "%.*s", (int)(p - v), v);
      if (quote && *p) p++;
    }
    w->n++;
  }
}

static const char *get(const struct words *w, const char *key) {
  for (int i = 1; i < w->n; i++)
    if (strcmp(w->key[i], key) == 0) return w->val[i];
  return NULL;
}

static void parse_gpu(const struct words *w) {
  const char *v = get(w, "index");
  int i = v ? atoi(v) : S.ngpus;
  if (i < 0 || i >= MAX_GPUS) return;
  if (i >= S.ngpus) S.ngpus = i + 1;
  struct gpu *g = &S.g[i];
  snprintf(g->name, sizeof g->name, "%s", (v = get(w, "name")) ? v : "Fake GPU");
  if ((v = get(w, "uuid"))) snprintf(g->uuid, sizeof g->uuid, "%s", v);
  else snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-%012d", i);
  g->total = (v = get(w, "total")) ? quantity(v) : 16.0 * 1073741824.0;
  g->reserved = (v = get(w, "reserved")) ? quantity(v) : 0;
  g->base = (v = get(w, "base")) ? quantity(v) : 0;
  g->limit_w = (v = get(w, "limit")) ? quantity(v) : 300;
  if ((v = get(w, "cc"))) sscanf(v, "%d.%d", &g->cc_major, &g->cc_minor);
  g->memory_na = (v = get(w, "memory")) && strcmp(v, "na") == 0;
  if ((g->has_used = (v = get(w, "used")))) parse_series(v, &g->used);
  parse_series((v = get(w, "util")) ? v : "0", &g->util);
  parse_series((v = get(w, "memutil")) ? v : "0", &g->memutil);
  parse_series((v = get(w, "temp")) ? v : "40", &g->temp);
  parse_series((v = get(w, "power")) ? v : "50", &g->power);
}

static void parse_proc(const struct words *w) {
  if (S.nprocs == MAX_PROCS) return;
  struct proc *p = &S.p[S.nprocs++];
  const char *v;
  p->gpu = (v = get(w, "gpu")) ? atoi(v) : 0;
  snprintf(p->pid, sizeof p->pid, "%s", (v = get(w, "pid")) ? v : "self");
  snprintf(p->name, sizeof p->name, "%s", (v = get(w, "name")) ? v : "");
  parse_series((v = get(w, "used")) ? v : "0", &p->used);
  p->type = !(v = get(w, "type")) || !strcmp(v, "compute") ? 1 : !strcmp(v, "graphics") ? 2 : 3;
  p->from = (v = get(w, "from")) ? atof(v) : -INFINITY;
  p->until = (v = get(w, "until")) ? atof(v) : INFINITY;
}

static void parse_err(const struct words *w) {
  if (S.nerrs == MAX_ERRS) return;
  struct err *e = &S.e[S.nerrs++];
  const char *v;
  snprintf(e->fn, sizeof e->fn, "%s", (v = get(w, "fn")) ? v : "*");
  e->code = (v = get(w, "code")) ? code_of(v) : 999;
  e->gpu = (v = get(w, "gpu")) ? atoi(v) : -1;
  e->from = (v = get(w, "from")) ? atof(v) : -INFINITY;
  e->until = (v = get(w, "until")) ? atof(v) : INFINITY;
}

static void parse_line(char *line) {
  struct words w;
  split(line, &w);
  if (w.n == 0) return;
  const char *verb = w.key[0], *v;
  if (!strcmp(verb, "clock")) S.clock_samples = w.n > 1 && !strcmp(w.key[1], "samples");
  else if (!strcmp(verb, "init")) S.init_error = (v = get(&w, "error")) ? code_of(v) : 0;
  else if (!strcmp(verb, "quirk")) S.r535 = w.n > 1 && !strcmp(w.key[1], "r535");
  else if (!strcmp(verb, "gpu")) parse_gpu(&w);
  else if (!strcmp(verb, "proc")) parse_proc(&w);
  else if (!strcmp(verb, "err")) parse_err(&w);
  else if (!strcmp(verb, "driver")) {
    if ((v = get(&w, "version"))) snprintf(S.driver, sizeof S.driver, "%s", v);
    if ((v = get(&w, "cuda"))) S.cuda = atoi(v);
  }
}

static void load_script(void) {
  memset(&S, 0, sizeof S);
  snprintf(S.driver, sizeof S.driver, "555.42.06");
  S.cuda = 12050;
  clock_gettime(CLOCK_MONOTONIC, &S.t0);
  const char *tp = getenv("FAKE_NVML_TRACE");
  if (tp && *tp && (S.trace = fopen(tp, "a"))) setvbuf(S.trace, NULL, _IOLBF, 0);
  const char *path = getenv("FAKE_NVML_SCRIPT");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) return;
  char line[2048];
  while (fgets(line, sizeof line, f)) parse_line(line);
  fclose(f);
}

/* ---- time, errors, processes ---- */

static double elapsed(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - S.t0.tv_sec) + (double)(now.tv_nsec - S.t0.tv_nsec) / 1e9;
}

static double now_for(int gpu) {
  if (!S.clock_samples || gpu < 0) return elapsed();
  return S.g[gpu].samples > 0 ? (double)(S.g[gpu].samples - 1) : 0;
}

/* NAME matches NAME, NAME_v2 and NAME_v3. */
static bool fn_matches(const char *want, const char *fn) {
  size_t n = strlen(want);
  if (!strcmp(want, "*")) return !strncmp(fn, "nvmlDevice", 10);
  return !strncmp(fn, want, n) && (!fn[n] || !strcmp(fn + n, "_v2") || !strcmp(fn + n, "_v3"));
}

static int injected(const char *fn, int gpu) {
  trace(fn);
  for (int i = 0; i < S.nerrs; i++) {
    const struct err *e = &S.e[i];
    if (!fn_matches(e->fn, fn) || (e->gpu >= 0 && e->gpu != gpu)) continue;
    double t = now_for(gpu);
    if (t >= e->from && t < e->until) return e->code;
  }
  return SUCCESS;
}

static int gpu_of(void *dev) {
  struct gpu *g = dev;
  if (!S.initialised || g < S.g || g >= S.g + S.ngpus) return -1;
  return (int)(g - S.g);
}

/* The pid a script names: a number, this process, or this process's first child. */
static unsigned resolve_pid(const char *spec) {
  if (!strcmp(spec, "self")) return (unsigned)getpid();
  if (strcmp(spec, "child")) return (unsigned)atoi(spec);
  DIR *d = opendir("/proc");
  unsigned best = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    char path[300], stat[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    char *close = strrchr(stat, ')');
    int ppid;
    char st;
    unsigned pid = (unsigned)atoi(e->d_name);
    if (close && sscanf(close + 1, " %c %d", &st, &ppid) == 2 && ppid == getpid() &&
        (best == 0 || pid < best))
      best = pid;
  }
  if (d) closedir(d);
  return best;
}

static bool proc_live(const struct proc *p, int gpu, int type) {
  double t = now_for(gpu);
  return p->gpu == gpu && (p->type & type) && t >= p->from && t < p->until;
}

static double proc_used(const struct proc *p) {
  return p->used.na ? 0 : eval(&p->used, now_for(p->gpu));
}

static double gpu_used(int gpu) {
  const struct gpu *g = &S.g[gpu];
  if (g->has_used) return eval(&g->used, now_for(gpu));
  double sum = g->base;
  for (int i = 0; i < S.nprocs; i++)
    if (proc_live(&S.p[i], gpu, 3) && resolve_pid(S.p[i].pid)) sum += proc_used(&S.p[i]);
  return sum;
}

static void put32(unsigned char *p, unsigned v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, unsigned long long v) { memcpy(p, &v, 8); }

/* Writes the process list with the entry layout of the API version called. */
static int list_procs(void *dev, unsigned *count, void *infos, int type, int version,
                      const char *fn) {
  int gpu = gpu_of(dev);
  if (gpu < 0 || !count) return ERR_INVALID_ARGUMENT;
  int rc = injected(fn, gpu);
  if (rc) return rc;
  size_t stride = version == 1 ? 16 : version == 3 && S.r535 ? 32 : 24;
  unsigned n = 0;
  unsigned pids[MAX_PROCS];
  unsigned long long used[MAX_PROCS];
  for (int i = 0; i < S.nprocs; i++) {
    const struct proc *p = &S.p[i];
    unsigned pid = proc_live(p, gpu, type) ? resolve_pid(p->pid) : 0;
    if (!pid) continue;
    pids[n] = pid;
    double bytes = proc_used(p);
    mark_seen(&p->used, bytes);
    used[n++] = p->used.na ? ONES : (unsigned long long)llround(bytes);
  }
  if (*count < n) {
    *count = n;
    return ERR_INSUFFICIENT_SIZE;
  }
  unsigned char *out = infos;
  for (unsigned i = 0; i < n; i++) {
    unsigned char *e = out + i * stride;
    memset(e, 0, stride);
    put32(e, pids[i]);
    put64(e + 8, used[i]);
    if (stride >= 24) {
      put32(e + 16, 0xFFFFFFFFu);
      put32(e + 20, 0xFFFFFFFFu);
    }
  }
  *count = n;
  return SUCCESS;
}

/* ---- the exported API ---- */

/* Like NVML, initialisations are counted: the last nvmlShutdown ends the session, and a
 * second nvmlInit in the same process neither reloads the script nor restarts its clock. */
static int init_count;

int nvmlInit(void) {
  if (init_count) {
    trace("nvmlInit");
    init_count++;
    return SUCCESS;
  }
  load_script();
  trace("nvmlInit");
  if (S.init_error) return S.init_error;
  S.initialised = true;
  init_count = 1;
  return SUCCESS;
}

int nvmlShutdown(void) {
  trace("nvmlShutdown");
  if (init_count > 1) {
    init_count--;
    return SUCCESS;
  }
  init_count = 0;
  S.initialised = false;
  if (S.trace) fclose(S.trace);
  S.trace = NULL;
  return SUCCESS;
}

const char *nvmlErrorString(int rc) {
  switch (rc) {
  case 3: return "Not Supported";
  case 9: return "Driver Not Loaded";
  case 15: return "GPU is lost";
  case 18: return "RM has detected an NVML/RM version mismatch";
  default: return "Unknown Error";
  }
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
  int rc = injected("nvmlSystemGetDriverVersion", -1);
  if (!rc) snprintf(buf, len, "%s", S.driver);
  return rc;
}

int nvmlSystemGetCudaDriverVersion(int *v) {
  int rc = injected("nvmlSystemGetCudaDriverVersion", -1);
  if (!rc) *v = S.cuda;
  return rc;
}

/* Names for the pids NVML lists that /proc does not show (other PID namespaces). */
int nvmlSystemGetProcessName(unsigned pid, char *buf, unsigned len) {
  int rc = injected("nvmlSystemGetProcessName", -1);
  if (rc) return rc;
  for (int i = 0; i < S.nprocs; i++)
    if (S.p[i].name[0] && resolve_pid(S.p[i].pid) == pid) {
      snprintf(buf, len, "%s", S.p[i].name);
      return SUCCESS;
    }
  return 6; /* NOT_FOUND */
}

int nvmlDeviceGetCount(unsigned *n) {
  if (!S.initialised) return ERR_UNINITIALIZED;
  int rc = injected("nvmlDeviceGetCount", -1);
  if (!rc) *n = (unsigned)S.ngpus;
  return rc;
}

int nvmlDeviceGetHandleByIndex(unsigned i, void **dev) {
  if (!S.initialised || i >= (unsigned)S.ngpus) return ERR_INVALID_ARGUMENT;
  int rc = injected("nvmlDeviceGetHandleByIndex", (int)i);
  if (!rc) *dev = &S.g[i];
  return rc;
}

int nvmlDeviceGetName(void *dev, char *buf, unsigned len) {
  int gpu = gpu_of(dev), rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetName", gpu);
  if (!rc) snprintf(buf, len, "%s", S.g[gpu].name);
  return rc;
}

int nvmlDeviceGetUUID(void *dev, char *buf, unsigned len) {
  int gpu = gpu_of(dev), rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetUUID", gpu);
  if (!rc) snprintf(buf, len, "%s", S.g[gpu].uuid);
  return rc;
}

int nvmlDeviceGetCudaComputeCapability(void *dev, int *major, int *minor) {
  int gpu = gpu_of(dev);
  int rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetCudaComputeCapability", gpu);
  if (!rc && !S.g[gpu].cc_major) rc = ERR_NOT_SUPPORTED;
  if (!rc) {
    *major = S.g[gpu].cc_major;
    *minor = S.g[gpu].cc_minor;
  }
  return rc;
}

/* Each memory call is one sample of that GPU: the "samples" clock ticks here. */
static int memory_common(void *dev, const char *fn, unsigned long long *total,
                         unsigned long long *reserved, unsigned long long *used) {
  int gpu = gpu_of(dev);
  if (gpu < 0) return ERR_INVALID_ARGUMENT;
  S.g[gpu].samples++;
  int rc = injected(fn, gpu);
  if (rc) return rc;
  const struct gpu *g = &S.g[gpu];
  *total = g->memory_na ? ONES : (unsigned long long)g->total;
  *reserved = g->memory_na ? ONES : (unsigned long long)g->reserved;
  double u = gpu_used(gpu);
  if (u > g->total - g->reserved) u = g->total - g->reserved;
  *used = g->memory_na ? ONES : (unsigned long long)llround(u);
  return SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *dev, void *mem) {
  unsigned long long total, reserved, used;
  int rc = memory_common(dev, "nvmlDeviceGetMemoryInfo", &total, &reserved, &used);
  if (rc) return rc;
  unsigned char *m = mem; /* v1: total, free, used; used counts the driver's reserve */
  bool na = total == ONES;
  put64(m, total);
  put64(m + 8, na ? ONES : total - reserved - used);
  put64(m + 16, na ? ONES : used + reserved);
  return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *dev, void *util) {
  int gpu = gpu_of(dev);
  int rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetUtilizationRates", gpu);
  if (rc) return rc;
  put32(util, (unsigned)lround(eval(&S.g[gpu].util, now_for(gpu))));
  put32((unsigned char *)util + 4, (unsigned)lround(eval(&S.g[gpu].memutil, now_for(gpu))));
  return SUCCESS;
}

int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *temp) {
  int gpu = gpu_of(dev);
  int rc = gpu < 0 || sensor != 0 ? ERR_INVALID_ARGUMENT
                                  : injected("nvmlDeviceGetTemperature", gpu);
  if (!rc) *temp = (unsigned)lround(eval(&S.g[gpu].temp, now_for(gpu)));
  return rc;
}

int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw) {
  int gpu = gpu_of(dev);
  int rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetPowerUsage", gpu);
  if (!rc) *mw = (unsigned)lround(eval(&S.g[gpu].power, now_for(gpu)) * 1000);
  return rc;
}

int nvmlDeviceGetEnforcedPowerLimit(void *dev, unsigned *mw) {
  int gpu = gpu_of(dev);
  int rc = gpu < 0 ? ERR_INVALID_ARGUMENT : injected("nvmlDeviceGetEnforcedPowerLimit", gpu);
  if (!rc) *mw = (unsigned)lround(S.g[gpu].limit_w * 1000);
  return rc;
}

int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 1, 1, "nvmlDeviceGetComputeRunningProcesses");
}

int nvmlDeviceGetGraphicsRunningProcesses(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 2, 1, "nvmlDeviceGetGraphicsRunningProcesses");
}

#ifndef FAKE_NVML_LEGACY
int nvmlInit_v2(void) { return nvmlInit(); }

int nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

int nvmlDeviceGetCount_v2(unsigned *n) { return nvmlDeviceGetCount(n); }

int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev) {
  return nvmlDeviceGetHandleByIndex(i, dev);
}

int nvmlDeviceGetMemoryInfo_v2(void *dev, void *mem) {
  unsigned version;
  memcpy(&version, mem, 4);
  if (version != 0x02000028u) { /* sizeof(nvmlMemory_v2_t) | 2 << 24 */
    trace("nvmlDeviceGetMemoryInfo_v2");
    return ERR_ARGUMENT_VERSION_MISMATCH;
  }
  unsigned long long total, reserved, used;
  int rc = memory_common(dev, "nvmlDeviceGetMemoryInfo_v2", &total, &reserved, &used);
  if (rc) return rc;
  unsigned char *m = mem; /* version, pad, total, reserved, free, used */
  bool na = total == ONES;
  put64(m + 8, total);
  put64(m + 16, reserved);
  put64(m + 24, na ? ONES : total - reserved - used);
  put64(m + 32, used);
  return SUCCESS;
}

int nvmlDeviceGetTemperatureV(void *dev, void *t) {
  unsigned version;
  int sensor;
  memcpy(&version, t, 4);
  memcpy(&sensor, (unsigned char *)t + 4, 4);
  if (version != 0x0100000Cu) return ERR_ARGUMENT_VERSION_MISMATCH;
  unsigned temp;
  int rc = nvmlDeviceGetTemperature(dev, sensor, &temp);
  if (!rc) put32((unsigned char *)t + 8, temp);
  return rc;
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 1, 2, "nvmlDeviceGetComputeRunningProcesses_v2");
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 1, 3, "nvmlDeviceGetComputeRunningProcesses_v3");
}

int nvmlDeviceGetGraphicsRunningProcesses_v2(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 2, 2, "nvmlDeviceGetGraphicsRunningProcesses_v2");
}

int nvmlDeviceGetGraphicsRunningProcesses_v3(void *dev, unsigned *count, void *infos) {
  return list_procs(dev, count, infos, 2, 3, "nvmlDeviceGetGraphicsRunningProcesses_v3");
}
#endif
