/* A histogram of a dataset's sample lengths (--lengths varied:FILE): a line per length,
 * "LENGTH COUNT"; every malformed line is an error with its position. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/grow.h"
#include "vramfit/estimate.h"

struct entry {
  uint64_t length, count;
};

struct entries {
  struct entry *v;
  size_t n, cap;
};

/* Whole numbers, each below 2^50 (no sample or dataset is that large). */
static const char *number(const char *p, const char *end, uint64_t *out) {
  uint64_t v = 0;
  const char *start = p;
  for (; p < end && *p >= '0' && *p <= '9' && v < (UINT64_C(1) << 50); p++) v = v * 10 + (uint64_t)(*p - '0');
  *out = v;
  return p > start && (p == end || *p < '0' || *p > '9') ? p : NULL;
}

static const char *blanks(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
  return p;
}

/* One line's "LENGTH COUNT", or nothing for a blank or comment line. */
static int parse_line(const char *line, const char *end, int lineno, struct entries *e, struct vf_diag *d) {
  const char *p = blanks(line, end);
  if (p == end || *p == '#') return 0;
  struct entry x;
  const char *after = number(p, end, &x.length);
  if (!after || !x.length) return diag_line(d, VF_EFORMAT, "", lineno, (int)(p - line) + 1, "a length (a whole number from 1) expected");
  p = blanks(after, end);
  if (p == after || !(after = number(p, end, &x.count)))
    return diag_line(d, VF_EFORMAT, "", lineno, (int)(p - line) + 1, "a count of samples expected after the length");
  p = blanks(after, end);
  if (p < end && *p != '#') return diag_line(d, VF_EFORMAT, "", lineno, (int)(p - line) + 1, "end of line expected");
  struct entry *grown = array_grow(e->v, &e->cap, e->n + 1, sizeof *grown);
  if (!grown) return VF_ENOMEM;
  e->v = grown;
  e->v[e->n++] = x;
  return 0;
}

static int by_length(const void *a, const void *b) {
  const struct entry *x = a, *y = b;
  return x->length < y->length ? -1 : x->length > y->length;
}

/* Sorted entries into at most VF_LENGTH_BINS bins of about equal counts, each at its longest
 * length; equal lengths always share a bin. */
static void bin(const struct entries *e, uint64_t total, struct vf_length_dist *out) {
  out->n = 0;
  uint64_t seen = 0;
  for (size_t i = 0; i < e->n; i++) {
    if (!e->v[i].count) continue; /* a length no sample has is not the longest */
    seen += e->v[i].count;
    if (out->n && out->length[out->n - 1] == e->v[i].length) {
      out->count[out->n - 1] += e->v[i].count;
      continue;
    }
    /* A new bin when the last one has its share of the samples (or none is open). */
    bool full = !out->n || (seen - e->v[i].count) * VF_LENGTH_BINS >= total * out->n;
    if (full && out->n < VF_LENGTH_BINS) {
      out->length[out->n] = e->v[i].length;
      out->count[out->n++] = e->v[i].count;
    } else {
      out->length[out->n - 1] = e->v[i].length;
      out->count[out->n - 1] += e->v[i].count;
    }
  }
}

int vf_length_dist_parse(const char *text, size_t len, struct vf_length_dist *out, struct vf_diag *d) {
  struct entries e = {0};
  const char *end = text + len;
  int rc = 0, lineno = 1;
  for (const char *p = text; p < end && !rc; lineno++) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    rc = parse_line(p, eol, lineno, &e, d);
    p = eol + 1;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < e.n; i++) total += e.v[i].count;
  if (!rc && !total) rc = diag_line(d, VF_EFORMAT, "", lineno > 1 ? lineno - 1 : 1, 1, "no sample counted: a line 'LENGTH COUNT' with a count above 0 expected");
  if (!rc) {
    qsort(e.v, e.n, sizeof *e.v, by_length);
    bin(&e, total, out);
  }
  free(e.v);
  return rc;
}
