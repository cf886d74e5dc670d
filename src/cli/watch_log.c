/* watch --log: one row per shown GPU per sample, flushed at once so that a crash or an OOM
 * kill of the training run leaves every sample on disk. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "base/fileio.h"
#include "cli/cli.h"
#include "cli/gpu_view.h"
#include "cli/watch.h"

struct watch_log {
  FILE *f;
  bool csv;
};

static const char csv_header[] =
    "time,elapsed_s,gpu,name,uuid,total_bytes,used_bytes,free_bytes,utilization_gpu,"
    "utilization_memory,temperature_c,power_w,power_limit_w,processes,warnings\n";

int watch_log_open(const char *path, struct watch_log **out) {
  bool csv = str_ends_with(path, ".csv");
  if (!csv && !str_ends_with(path, ".jsonl")) return VF_EINVAL;
  struct watch_log *l = calloc(1, sizeof *l);
  /* Appending keeps an earlier run's rows; a new CSV file gets its header. */
  FILE *f = l ? fopen(path, "a") : NULL;
  if (!f) {
    free(l);
    return VF_EIO;
  }
  l->f = f;
  l->csv = csv;
  if (csv && ftell(f) == 0) fputs(csv_header, f);
  fflush(f);
  *out = l;
  return 0;
}

static void iso_time(char *buf, size_t size) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, size - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

/* A CSV field, quoted when it holds a separator, a quote or a line break. */
static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* A JSON scalar as CSV text: numbers as they are, null as empty. */
static void csv_value(FILE *f, json_t *v) {
  if (json_is_integer(v)) fprintf(f, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) fprintf(f, "%.1f", json_real_value(v));
  else if (json_is_string(v)) csv_field(f, json_string_value(v));
  fputc(',', f);
}

static void csv_row(FILE *f, const char *time, const struct watch *w, unsigned gpu, json_t *o) {
  fprintf(f, "%s,%.3f,", time, w->now);
  static const char *const cols[] = {"index", "name", "uuid", "total_bytes", "used_bytes",
                                     "free_bytes", "utilization_gpu", "utilization_memory",
                                     "temperature_c", "power_w", "power_limit_w"};
  for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) csv_value(f, json_object_get(o, cols[i]));
  char procs[2048] = "";
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(o, "processes"), i, p) {
    size_t n = strlen(procs);
    json_t *used = json_object_get(p, "used_bytes");
    snprintf(procs + n, sizeof procs - n, "%s%lld:%s:%lld", i ? ";" : "",
             (long long)json_integer_value(json_object_get(p, "pid")),
             json_string_value(json_object_get(p, "name")),
             json_is_integer(used) ? (long long)json_integer_value(used) : -1LL);
  }
  csv_field(f, procs);
  fputc(',', f);
  char warnings[WATCH_MAX_WARN * (WATCH_WARN_LEN + 3)] = "";
  for (size_t k = 0; k < w->nwarn; k++)
    if (w->warn_gpu[k] == gpu)
      snprintf(warnings + strlen(warnings), sizeof warnings - strlen(warnings), "%s%s",
               warnings[0] ? " | " : "", w->warn[k]);
  csv_field(f, warnings);
  fputc('\n', f);
}

static const struct wproc *tracked(const struct watch *w, unsigned gpu, json_int_t pid) {
  for (size_t i = 0; i < w->nprocs; i++)
    if (w->procs[i].gpu == gpu && w->procs[i].pid == pid && w->procs[i].watched)
      return &w->procs[i];
  return NULL;
}

/* The growth judgement of each watched process, for scripts: "warmup", "steady" or
 * "growing" with its slope and the seconds until the GPU is full. */
static void add_trends(const struct watch *w, unsigned gpu, json_t *procs) {
  static const char *const states[] = {"warmup", "steady", "growing"};
  size_t i;
  json_t *p;
  json_array_foreach(procs, i, p) {
    const struct wproc *t = tracked(w, gpu, json_integer_value(json_object_get(p, "pid")));
    if (!t) continue;
    bool growing = t->trend.state == VF_TREND_GROWING;
    json_object_set_new(p, "trend", json_string(states[t->trend.state]));
    json_object_set_new(p, "growth_bytes_per_s", growing ? json_real(t->trend.slope_bps) : json_null());
    json_object_set_new(p, "seconds_to_full",
                        growing ? json_real(t->trend.seconds_to_full) : json_null());
  }
}

static void jsonl_row(FILE *f, const char *time, const struct watch *w, unsigned gpu, json_t *o) {
  add_trends(w, gpu, json_object_get(o, "processes"));
  json_object_set_new(o, "time", json_string(time));
  json_object_set_new(o, "elapsed_s", json_real(round(w->now * 1000) / 1000));
  json_t *warnings = json_array();
  for (size_t k = 0; k < w->nwarn; k++)
    if (w->warn_gpu[k] == gpu) json_array_append_new(warnings, json_string(w->warn[k]));
  json_object_set_new(o, "warnings", warnings);
  json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
  fputc('\n', f);
}

void watch_log_rows(struct watch_log *l, const struct watch *w) {
  char time[40];
  iso_time(time, sizeof time);
  for (unsigned i = 0; i < w->ngpus; i++) {
    if (!watch_gpu_shown(w, i)) continue;
    json_t *o = gpu_view_json(&w->gpus[i].s, w->gpus[i].err);
    if (!o) continue;
    if (l->csv) csv_row(l->f, time, w, i, o);
    else jsonl_row(l->f, time, w, i, o);
    json_decref(o);
  }
  fflush(l->f);
}

void watch_log_close(struct watch_log *l) {
  if (!l) return;
  fclose(l->f);
  free(l);
}
