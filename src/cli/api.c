/* The entry points of the Python binding (python/vramfit/binding.py, through ctypes): one
 * vramfit command run in-process, its --json output handed back as text instead of printed;
 * the size of the probe's search state; a measured run written to the history store. Built
 * into libvramfit.so with the commands, not into the vramfit executable. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "vramfit/command.h"
#include "vramfit/history.h"
#include "vramfit/probe.h"

int vf_cli_json(int argc, char **argv, char **json, char **error) {
  *json = *error = NULL;
  char **args = calloc((size_t)argc + 2, sizeof *args);
  if (!args) return EXIT_INTERNAL;
  args[0] = "vramfit";
  memcpy(args + 1, argv, (size_t)argc * sizeof *argv);
  struct cli_capture c = {0};
  cli_capture_to(&c);
  int code = cli_run(argc + 1, args);
  cli_capture_to(NULL);
  free(args);
  if (c.json) *json = json_dumps(c.json, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (c.error[0]) *error = strdup(c.error);
  json_decref(c.json);
  return code;
}

size_t vf_probe_size(void) { return sizeof(struct vf_probe); }

/* ---- vf_history_record ---- */

static int record_error(char **error, int code, const char *fmt, ...) {
  char buf[1300];
  int n = snprintf(buf, sizeof buf, "vramfit history: ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  *error = strdup(buf);
  return code;
}

/* The string member key of o into buf (size bytes); "" when absent; false when it is no
 * string or too long. */
static bool text_member(json_t *o, const char *key, char *buf, size_t size) {
  json_t *v = json_object_get(o, key);
  buf[0] = '\0';
  if (!v) return true;
  return json_is_string(v) && json_string_length(v) < size &&
         snprintf(buf, size, "%s", json_string_value(v)) >= 0;
}

/* The whole number member key of o (absent: keeps *out); false when it is another value. */
static bool count_member(json_t *o, const char *key, uint64_t *out) {
  json_t *v = json_object_get(o, key);
  if (!v) return true;
  if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
  *out = (uint64_t)json_integer_value(v);
  return true;
}

static bool number_member(json_t *o, const char *key, double *out) {
  json_t *v = json_object_get(o, key);
  if (!v) return true;
  if (!json_is_number(v)) return false;
  *out = json_number_value(v);
  return true;
}

/* The run the object describes; its command and setup are o's or dumped (free both). */
static int run_from_json(json_t *o, struct vf_run *r, char **error) {
  char command[4096];
  json_t *setup = json_object_get(o, "setup"), *code = json_object_get(o, "exit_code");
  *r = (struct vf_run){.when = (double)time(NULL), .exit_code = 0};
  bool ok = text_member(o, "source", r->source, sizeof r->source) &&
            text_member(o, "command", command, sizeof command) &&
            text_member(o, "outcome", r->outcome, sizeof r->outcome) &&
            text_member(o, "gpu", r->gpu, sizeof r->gpu) &&
            text_member(o, "gpu_uuid", r->gpu_uuid, sizeof r->gpu_uuid) &&
            text_member(o, "driver", r->driver, sizeof r->driver);
  if (!ok) return record_error(error, EXIT_BAD_INPUT, "source, command, outcome, gpu, gpu_uuid and "
                               "driver must be strings that fit the store");
  if (!r->source[0] || !command[0] || !r->outcome[0])
    return record_error(error, EXIT_BAD_INPUT, "a run needs its source, command and outcome");
  if (!count_member(o, "batch", &r->batch) || !count_member(o, "peak_device_bytes", &r->peak_device_bytes) ||
      !number_member(o, "seconds", &r->seconds) || !number_member(o, "when", &r->when))
    return record_error(error, EXIT_BAD_INPUT, "batch and peak_device_bytes must be whole numbers, "
                        "seconds and when numbers");
  if (code && !json_is_null(code)) {
    if (!json_is_integer(code)) return record_error(error, EXIT_BAD_INPUT, "exit_code must be a whole number");
    r->exit_code = (int)json_integer_value(code);
  } else if (code) {
    r->exit_code = -1; /* none: timed out, or still running when stopped */
  }
  if (setup && !json_is_null(setup) && !json_is_object(setup))
    return record_error(error, EXIT_BAD_INPUT, "setup must be an object or null");
  r->command = strdup(command);
  r->setup = setup && json_is_object(setup) ? json_dumps(setup, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  return r->command && (r->setup || !json_is_object(setup)) ? 0 : EXIT_INTERNAL;
}

int vf_history_record(const char *run_json, char **error) {
  *error = NULL;
  json_error_t je;
  json_t *o = json_loads(run_json, 0, &je);
  if (!json_is_object(o)) {
    json_decref(o);
    return record_error(error, EXIT_BAD_INPUT, "a run must be a JSON object");
  }
  struct vf_run r;
  int code = run_from_json(o, &r, error);
  json_decref(o);
  char dir[1024];
  struct vf_history *h = NULL;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (!code && vf_history_dir(dir, sizeof dir))
    code = record_error(error, EXIT_ENV, "neither XDG_STATE_HOME nor HOME says where the store is");
  if (!code && (vf_history_open(dir, true, &h, &d) || vf_history_add(h, &r, &d))) {
    char why[1200];
    vf_diag_format(&d, why, sizeof why);
    code = record_error(error, EXIT_ENV, "%s", why);
  }
  vf_history_close(h);
  free(r.command);
  free(r.setup);
  return code;
}
