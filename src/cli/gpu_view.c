#include "cli/gpu_view.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int gpu_view_open(const char *cmd, struct vf_nvml **n) {
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_nvml_open(n, &d);
  return rc ? cli_diag_error(cmd, rc, &d) : EXIT_OK;
}

static json_t *bytes_json(bool known, uint64_t v) {
  return known && v != VF_BYTES_UNKNOWN ? json_integer((json_int_t)v) : json_null();
}

static json_t *uint_json(bool known, unsigned v) {
  return known ? json_integer(v) : json_null();
}

static json_t *watts_json(bool known, unsigned mw) {
  return known ? json_real(mw / 1000.0) : json_null();
}

/* Process names come from /proc and may hold any bytes; JSON wants UTF-8. */
static json_t *text_json(const char *text) {
  json_t *j = json_string(text);
  if (j) return j;
  char clean[128];
  size_t n = 0;
  for (; text[n] && n + 1 < sizeof clean; n++)
    clean[n] = (unsigned char)text[n] < 0x80 ? text[n] : '?';
  clean[n] = '\0';
  return json_string(clean);
}

static json_t *procs_json(const struct vf_gpu_sample *s) {
  json_t *list = json_array();
  for (size_t i = 0; i < s->nprocs; i++) {
    const struct vf_gpu_proc *p = &s->procs[i];
    json_t *o = json_object();
    json_object_set_new(o, "pid", json_integer(p->pid));
    json_object_set_new(o, "used_bytes", bytes_json(true, p->used_bytes));
    json_object_set_new(o, "name", text_json(p->name));
    json_array_append_new(list, o);
  }
  return list;
}

json_t *gpu_view_json(const struct vf_gpu_sample *s, int err) {
  unsigned f = err ? 0 : s->fields;
  bool mem = f & VF_FIELD_MEMORY;
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "index", json_integer(s->index));
  json_object_set_new(o, "name", text_json(s->name));
  json_object_set_new(o, "uuid", text_json(s->uuid));
  json_object_set_new(o, "total_bytes", bytes_json(mem, s->total_bytes));
  json_object_set_new(o, "used_bytes", bytes_json(mem, s->used_bytes));
  json_object_set_new(o, "free_bytes", bytes_json(mem, s->free_bytes));
  json_object_set_new(o, "utilization_gpu", uint_json(f & VF_FIELD_UTIL, s->util_gpu));
  json_object_set_new(o, "processes", f & VF_FIELD_PROCS ? procs_json(s) : json_array());
  json_object_set_new(o, "reserved_bytes", bytes_json(f & VF_FIELD_RESERVED, s->reserved_bytes));
  json_object_set_new(o, "utilization_memory", uint_json(f & VF_FIELD_UTIL, s->util_memory));
  json_object_set_new(o, "temperature_c", uint_json(f & VF_FIELD_TEMP, s->temperature_c));
  json_object_set_new(o, "power_w", watts_json(f & VF_FIELD_POWER, s->power_mw));
  json_object_set_new(o, "power_limit_w",
                      watts_json(f & VF_FIELD_POWER_LIMIT, s->power_limit_mw));
  char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", s->cc_major, s->cc_minor);
  json_object_set_new(o, "compute_capability", s->cc_major ? json_string(cc) : json_null());
  if (err) json_object_set_new(o, "error", json_string("the GPU does not answer"));
  return o;
}

void gpu_view_bytes(uint64_t bytes, char *buf, size_t size) {
  if (bytes == VF_BYTES_UNKNOWN) snprintf(buf, size, "?");
  else cli_format_bytes(bytes, buf, size);
}

/* Appends to the string in buf. */
static void add(char *buf, size_t size, const char *fmt, ...) {
  size_t n = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  if (n < size) vsnprintf(buf + n, size - n, fmt, ap);
  va_end(ap);
}

void gpu_view_line(const struct vf_gpu_sample *s, int err, char *buf, size_t size) {
  snprintf(buf, size, "GPU %u %s", s->index, s->name[0] ? s->name : "(unnamed)");
  if (err) {
    add(buf, size, "  does not answer");
    return;
  }
  char used[32], total[32];
  gpu_view_bytes(s->used_bytes, used, sizeof used);
  gpu_view_bytes(s->total_bytes, total, sizeof total);
  if (s->fields & VF_FIELD_MEMORY) add(buf, size, "  %s / %s", used, total);
  else add(buf, size, "  memory n/a");
  if (s->fields & VF_FIELD_UTIL) add(buf, size, "  util %u%%", s->util_gpu);
  if (s->fields & VF_FIELD_POWER) add(buf, size, "  %.0f W", s->power_mw / 1000.0);
  if ((s->fields & VF_FIELD_POWER) && (s->fields & VF_FIELD_POWER_LIMIT))
    add(buf, size, "/%.0f W", s->power_limit_mw / 1000.0);
  if (s->fields & VF_FIELD_TEMP) add(buf, size, "  %uC", s->temperature_c);
}
