#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_exit_code(int err) {
  switch (err) {
  case 0:
    return EXIT_OK;
  case VF_EINVAL:
  case VF_EFORMAT:
  case VF_ENOTFOUND:
  case VF_EUNSUPPORTED:
  case VF_ERANGE:
  case VF_ECHANGED:
  case VF_EIO:
    return EXIT_BAD_INPUT;
  case VF_ENODRIVER:
  case VF_ENOCMD:
    return EXIT_ENV;
  default:
    return EXIT_INTERNAL;
  }
}

/* Where a command's --json output and its one-line error go when the Python binding runs
 * it in-process (api.c); NULL: stdout and stderr. */
static struct cli_capture *capture;

void cli_capture_to(struct cli_capture *c) { capture = c; }

static void say(const char *cmd, const char *fmt, va_list ap) {
  if (capture) {
    int n = snprintf(capture->error, sizeof capture->error, "vramfit %s: ", cmd);
    if (n >= 0 && (size_t)n < sizeof capture->error) vsnprintf(capture->error + n, sizeof capture->error - (size_t)n, fmt, ap);
    return;
  }
  fprintf(stderr, "vramfit %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

static void say_line(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say_line(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(cmd, fmt, ap);
  va_end(ap);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(cmd, fmt, ap);
  va_end(ap);
  return EXIT_BAD_INPUT;
}

int cli_error(const char *cmd, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(cmd, fmt, ap);
  va_end(ap);
  return code;
}

int cli_option_error(const char *cmd, int c, char **argv) {
  if (c == ':') return cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
  return cli_usage_error(cmd, "unknown option '%s'; see 'vramfit %s --help'", argv[optind - 1], cmd);
}

int cli_diag_error(const char *cmd, int err, const struct vf_diag *d) {
  char msg[1200];
  vf_diag_format(d, msg, sizeof msg);
  say_line(cmd, "%s", msg);
  return cli_exit_code(err);
}

int cli_print_json(json_t *v) {
  if (!v) {
    fprintf(stderr, "vramfit: out of memory\n");
    return EXIT_INTERNAL;
  }
  if (capture) {
    json_decref(capture->json);
    capture->json = v;
    return EXIT_OK;
  }
  int rc = json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(v);
  if (rc != 0) return EXIT_INTERNAL;
  fputc('\n', stdout);
  return EXIT_OK;
}

bool cli_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) break;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  }
  return false;
}

int cli_parse_u64(const char *cmd, const char *flag, const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  if (!text || !*text || *text == '-' || *text == '+') goto bad;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end) goto bad;
  *out = v;
  return 0;
bad:
  cli_usage_error(cmd, "%s expects a whole number, got '%s'", flag, text ? text : "");
  return VF_EINVAL;
}

void cli_group_digits(uint64_t v, char *buf, size_t size) {
  char raw[32];
  int n = snprintf(raw, sizeof raw, "%llu", (unsigned long long)v);
  size_t o = 0;
  for (int i = 0; i < n && o + 2 < size; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = raw[i];
  }
  buf[o] = '\0';
}

void cli_format_bytes(uint64_t bytes, char *buf, size_t size) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units / sizeof *units) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, size, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, size, "%.2f %s", v, units[u]);
}

double cli_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_drain(int *fd, void (*sink)(void *arg, const char *buf, size_t n), void *arg) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n > 0) {
      sink(arg, buf, (size_t)n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || errno != EAGAIN) {
      close(*fd);
      *fd = -1;
    }
    return;
  }
}

bool cli_use_color(FILE *f) {
  const char *no = getenv("NO_COLOR");
  if (no && *no) return false;
  return isatty(fileno(f));
}

json_t *cli_breakdown_json(const struct vf_estimate *e) {
  json_t *o = json_object();
  for (int k = VF_CAT_WEIGHTS; k < VF_CAT_RUNTIME; k++)
    json_object_set_new(o, vf_category_name((enum vf_category)k), json_integer((json_int_t)e->by_category[k]));
  json_object_set_new(o, "allocator_slack", json_integer((json_int_t)e->allocator_slack));
  json_object_set_new(o, "runtime", json_integer((json_int_t)(e->context + e->by_category[VF_CAT_RUNTIME])));
  return o;
}
