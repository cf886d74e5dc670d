/* The GPU catalogue (data/gpus.tsv) and the --gpu argument: a catalogue name or a size. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/closest.h"
#include "base/diag.h"
#include "io/data.h"
#include "vramfit/gpu.h"

#define GPUS_FILE "gpus.tsv"
#define MIB (1024.0 * 1024.0)

enum { COL_NAME, COL_ALIASES, COL_FULL, COL_VENDOR, COL_ARCH, COL_CC, COL_MIB, COL_BW,
       COL_BF16, COL_FP16, COL_FP32, COL_LINK, COL_NOTES, NCOLS };

static void copy_field(char *dst, size_t size, const char *src, size_t len) {
  if (len >= size) len = size - 1;
  memcpy(dst, src, len);
  dst[len] = '\0';
}

static double field_num(const char *s, size_t len) {
  char buf[32];
  copy_field(buf, sizeof buf, s, len);
  return strtod(buf, NULL);
}

/* One data row into out; the row must have every column. */
static int parse_row(const char *line, size_t len, struct vf_gpu_spec *out) {
  const char *col[NCOLS];
  size_t clen[NCOLS];
  size_t n = 0;
  const char *p = line, *end = line + len;
  while (n < NCOLS) {
    const char *tab = memchr(p, '\t', (size_t)(end - p));
    const char *stop = tab ? tab : end;
    col[n] = p;
    clen[n++] = (size_t)(stop - p);
    if (!tab) break;
    p = tab + 1;
  }
  if (n < COL_NOTES) return VF_EFORMAT;
  memset(out, 0, sizeof *out);
  copy_field(out->name, sizeof out->name, col[COL_NAME], clen[COL_NAME]);
  copy_field(out->aliases, sizeof out->aliases, col[COL_ALIASES], clen[COL_ALIASES]);
  copy_field(out->full_name, sizeof out->full_name, col[COL_FULL], clen[COL_FULL]);
  copy_field(out->vendor, sizeof out->vendor, col[COL_VENDOR], clen[COL_VENDOR]);
  copy_field(out->arch, sizeof out->arch, col[COL_ARCH], clen[COL_ARCH]);
  char cc[16];
  copy_field(cc, sizeof cc, col[COL_CC], clen[COL_CC]);
  if (sscanf(cc, "%d.%d", &out->cc_major, &out->cc_minor) != 2) return VF_EFORMAT;
  out->capacity_bytes = (uint64_t)(field_num(col[COL_MIB], clen[COL_MIB]) * MIB);
  out->bandwidth_gbps = field_num(col[COL_BW], clen[COL_BW]);
  out->bf16_tflops = field_num(col[COL_BF16], clen[COL_BF16]);
  out->fp16_tflops = field_num(col[COL_FP16], clen[COL_FP16]);
  out->fp32_tflops = field_num(col[COL_FP32], clen[COL_FP32]);
  out->link_gbps = field_num(col[COL_LINK], clen[COL_LINK]);
  return out->name[0] && out->capacity_bytes ? 0 : VF_EFORMAT;
}

/* Calls fn for every catalogue row until it returns non-zero; returns that value. */
static int each_gpu(int (*fn)(const struct vf_gpu_spec *g, void *arg), void *arg) {
  const char *bytes;
  size_t len;
  int rc = data_get(GPUS_FILE, &bytes, &len);
  if (rc) return rc;
  bool header_seen = false;
  for (const char *p = bytes, *end = bytes + len; p < end && rc == 0;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    if (n > 0 && p[n - 1] == '\r') n--;
    struct vf_gpu_spec g;
    if (n == 0 || p[0] == '#')
      ;
    else if (!header_seen)
      header_seen = true;
    else if (parse_row(p, n, &g) == 0)
      rc = fn(&g, arg);
    p = nl ? nl + 1 : end;
  }
  data_release(bytes);
  return rc;
}

/* Calls fn(folded name or alias, arg) for the name and each alias; stops at non-zero. */
static int each_name(const struct vf_gpu_spec *g, int (*fn)(const char *folded, void *arg),
                     void *arg) {
  char f[64];
  name_fold(g->name, strlen(g->name), f, sizeof f);
  int rc = fn(f, arg);
  for (const char *a = g->aliases; rc == 0 && *a;) {
    size_t n = strcspn(a, ",");
    name_fold(a, n, f, sizeof f);
    if (f[0]) rc = fn(f, arg);
    a += n + (a[n] == ',');
  }
  return rc;
}

static int name_equals(const char *folded, void *want) { return strcmp(folded, want) == 0; }

struct lookup {
  char want[64];
  struct vf_gpu_spec *out;
};

static int lookup_visit(const struct vf_gpu_spec *g, void *arg) {
  struct lookup *l = arg;
  if (!each_name(g, name_equals, l->want)) return 0;
  *l->out = *g;
  return 1;
}

int vf_gpu_lookup(const char *name, struct vf_gpu_spec *out) {
  struct lookup l = {.out = out};
  name_fold(name, strlen(name), l.want, sizeof l.want);
  if (!l.want[0]) return VF_ENOTFOUND;
  int rc = each_gpu(lookup_visit, &l);
  return rc == 1 ? 0 : rc ? rc : VF_ENOTFOUND;
}

struct nth {
  size_t want, seen;
  struct vf_gpu_spec *out;
};

static int nth_visit(const struct vf_gpu_spec *g, void *arg) {
  struct nth *n = arg;
  if (n->seen++ != n->want) return 0;
  if (n->out) *n->out = *g;
  return 1;
}

size_t vf_gpu_catalog_count(void) {
  struct nth n = {.want = SIZE_MAX};
  each_gpu(nth_visit, &n);
  return n.seen;
}

int vf_gpu_catalog_get(size_t i, struct vf_gpu_spec *out) {
  struct nth n = {.want = i, .out = out};
  int rc = each_gpu(nth_visit, &n);
  return rc == 1 ? 0 : rc ? rc : VF_ENOTFOUND;
}

struct suggest {
  struct closest *s;
  const char *name;
};

static int offer(const char *folded, void *arg) {
  struct suggest *g = arg;
  closest_offer(g->s, g->name, folded);
  return 0;
}

static int suggest_visit(const struct vf_gpu_spec *g, void *s) {
  each_name(g, offer, &(struct suggest){.s = s, .name = g->name});
  return 0;
}

/* Writes the names closest to text into list, comma-separated; returns how many. */
static size_t close_names(const char *text, char *list, size_t size) {
  struct closest s;
  closest_start(&s, text, strlen(text));
  each_gpu(suggest_visit, &s);
  return closest_list(&s, list, size);
}

static const struct {
  const char *unit;
  double bytes;
} units[] = {
    {"b", 1.0},     {"k", 1024.0}, {"kib", 1024.0}, {"kb", 1e3},   {"m", MIB},
    {"mib", MIB},   {"mb", 1e6},   {"g", MIB * 1024}, {"gib", MIB * 1024}, {"gb", 1e9},
    {"t", MIB * MIB}, {"tib", MIB * MIB}, {"tb", 1e12},
};

/* "24GiB", "80GB", "24G", "24576 MiB", "23.5GiB": a bare G means GiB, as nvidia-smi does. */
static int parse_size(const char *text, uint64_t *out) {
  char *end;
  double v = strtod(text, &end);
  while (*end == ' ') end++;
  if (end == text || !*end || !(v > 0)) return VF_EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
    if (strcasecmp(end, units[i].unit) != 0) continue;
    double bytes = round(v * units[i].bytes);
    if (bytes < 1.0 || bytes >= 18446744073709551616.0) return VF_ERANGE;
    *out = (uint64_t)bytes;
    return 0;
  }
  return VF_EINVAL;
}

int vf_gpu_parse(const char *text, struct vf_gpu_spec *out, struct vf_diag *d) {
  if (!text || !*text) return diag_at(d, VF_EINVAL, "--gpu", UINT64_MAX, "empty GPU name");
  int rc = vf_gpu_lookup(text, out);
  if (rc != VF_ENOTFOUND) return rc;
  uint64_t bytes;
  bool numeric = isdigit((unsigned char)text[0]) || text[0] == '.';
  if (numeric && (rc = parse_size(text, &bytes)) == 0) {
    memset(out, 0, sizeof *out);
    snprintf(out->full_name, sizeof out->full_name, "%s", text);
    out->capacity_bytes = bytes;
    return 0;
  }
  char list[CLOSEST_SHOWN * (CLOSEST_NAME + 2)];
  size_t n = close_names(text, list, sizeof list);
  if (numeric)
    return diag_at(d, rc, "--gpu", UINT64_MAX,
                   "'%s' is not a memory size (write e.g. 24GiB, 80GB or 24576MiB)%s%s%s",
                   text, n ? "; did you mean " : "", list, n ? "?" : "");
  if (n)
    return diag_at(d, VF_ENOTFOUND, "--gpu", UINT64_MAX,
                   "unknown GPU '%s'; did you mean %s? ('vramfit gpus --catalog' lists all)",
                   text, list);
  return diag_at(d, VF_ENOTFOUND, "--gpu", UINT64_MAX,
                 "unknown GPU '%s'; give a catalogue name ('vramfit gpus --catalog') or a "
                 "size such as 24GiB or 80GB",
                 text);
}
