/* Unified diffs of two texts, line by line (Myers' O(ND) algorithm: edits change few
 * lines, so D stays small). */
#include <stdlib.h>
#include <string.h>

#include "edit/internal.h"

enum { CONTEXT = 3, MAX_D = 4000 };

struct lines {
  const char *s;
  size_t n;
  size_t *off; /* off[i]: start of line i; off[n]: end of text */
};

static int split_lines(struct lines *l, const char *s, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len; i++) n += s[i] == '\n';
  if (len && s[len - 1] != '\n') n++;
  l->s = s;
  l->n = n;
  l->off = malloc((n + 1) * sizeof *l->off);
  if (!l->off) return VF_ENOMEM;
  size_t k = 0;
  l->off[0] = 0;
  for (size_t i = 0; i < len; i++)
    if (s[i] == '\n') l->off[++k] = i + 1;
  l->off[n] = len;
  return 0;
}

static bool same_line(const struct lines *a, size_t i, const struct lines *b, size_t j) {
  size_t la = a->off[i + 1] - a->off[i], lb = b->off[j + 1] - b->off[j];
  return la == lb && memcmp(a->s + a->off[i], b->s + b->off[j], la) == 0;
}

/* V for each d, stored as a triangle: row d holds k = -d, -d+2, ..., d. */
struct trace {
  long *v;
  size_t cap;
};

static int grow(struct trace *t, long d) {
  size_t need = (size_t)(d + 1) * (size_t)(d + 2) / 2;
  if (need <= t->cap) return 0;
  size_t cap = t->cap ? t->cap : 256;
  while (cap < need) cap *= 2;
  long *v = realloc(t->v, cap * sizeof *v);
  if (!v) return VF_ENOMEM;
  t->v = v;
  t->cap = cap;
  return 0;
}

static long *row(const struct trace *t, long d) { return t->v + (size_t)(d * (d + 1) / 2); }
static long vget(const struct trace *t, long d, long k) { return row(t, d)[(k + d) / 2]; }

static bool go_down(const struct trace *t, long d, long k) {
  return k == -d || (k != d && vget(t, d - 1, k - 1) < vget(t, d - 1, k + 1));
}

/* Returns D, -1 when the texts differ in more than MAX_D lines, VF_ENOMEM. */
static long forward(const struct lines *a, const struct lines *b, struct trace *t) {
  long n = (long)a->n, m = (long)b->n;
  for (long d = 0; d <= n + m && d <= MAX_D; d++) {
    if (grow(t, d)) return VF_ENOMEM;
    for (long k = -d; k <= d; k += 2) {
      long x = d == 0 ? 0 : go_down(t, d, k) ? vget(t, d - 1, k + 1) : vget(t, d - 1, k - 1) + 1;
      long y = x - k;
      while (x < n && y < m && same_line(a, (size_t)x, b, (size_t)y)) x++, y++;
      row(t, d)[(k + d) / 2] = x;
      if (x >= n && y >= m) return d;
    }
  }
  return -1;
}

/* ops: 'E' keep, 'D' delete a line of a, 'I' insert a line of b; built backwards. */
static size_t backtrack(const struct lines *a, const struct lines *b, const struct trace *t, long dmax,
                        char *ops) {
  size_t n = 0;
  long x = (long)a->n, y = (long)b->n;
  for (long d = dmax; d > 0; d--) {
    long k = x - y;
    long pk = go_down(t, d, k) ? k + 1 : k - 1;
    long px = vget(t, d - 1, pk), py = px - pk;
    long mx = pk == k + 1 ? px : px + 1;
    for (; x > mx; x--, y--) ops[n++] = 'E';
    ops[n++] = pk == k + 1 ? 'I' : 'D';
    x = px;
    y = py;
  }
  for (; x > 0; x--) ops[n++] = 'E';
  for (size_t i = 0; i < n / 2; i++) {
    char c = ops[i];
    ops[i] = ops[n - 1 - i];
    ops[n - 1 - i] = c;
  }
  return n;
}

/* When the texts differ too much for the trace: keep the common ends, replace the middle. */
static size_t replace_middle(const struct lines *a, const struct lines *b, char *ops) {
  size_t p = 0, s = 0, n = 0;
  while (p < a->n && p < b->n && same_line(a, p, b, p)) p++;
  while (s < a->n - p && s < b->n - p && same_line(a, a->n - 1 - s, b, b->n - 1 - s)) s++;
  memset(ops, 'E', p);
  n = p;
  memset(ops + n, 'D', a->n - p - s);
  n += a->n - p - s;
  memset(ops + n, 'I', b->n - p - s);
  n += b->n - p - s;
  memset(ops + n, 'E', s);
  return n + s;
}

static void put_line(struct sbuf *out, char tag, const struct lines *l, size_t i) {
  size_t len = l->off[i + 1] - l->off[i];
  sb_add(out, &tag, 1);
  sb_add(out, l->s + l->off[i], len);
  if (!len || l->s[l->off[i] + len - 1] != '\n') sb_puts(out, "\n\\ No newline at end of file\n");
}

static void put_range(struct sbuf *out, size_t start, size_t count) {
  if (count == 1) sb_printf(out, "%zu", start + 1);
  else sb_printf(out, "%zu,%zu", count ? start + 1 : start, count);
}

static void put_hunk(struct sbuf *out, const char *ops, size_t from, size_t to, size_t ai, size_t bi,
                     const struct lines *a, const struct lines *b) {
  size_t na = 0, nb = 0;
  for (size_t i = from; i < to; i++) {
    na += ops[i] != 'I';
    nb += ops[i] != 'D';
  }
  sb_puts(out, "@@ -");
  put_range(out, ai, na);
  sb_puts(out, " +");
  put_range(out, bi, nb);
  sb_puts(out, " @@\n");
  for (size_t i = from; i < to; i++) {
    if (ops[i] == 'E') put_line(out, ' ', a, ai), ai++, bi++;
    else if (ops[i] == 'D') put_line(out, '-', a, ai++);
    else put_line(out, '+', b, bi++);
  }
}

static void put_hunks(struct sbuf *out, const char *ops, size_t n, const struct lines *a,
                      const struct lines *b) {
  size_t ai = 0, bi = 0, i = 0;
  while (i < n) {
    if (ops[i] == 'E') {
      ai++, bi++, i++;
      continue;
    }
    size_t from = i >= CONTEXT ? i - CONTEXT : 0, end = i;
    /* Extend over changes separated by at most 2 * CONTEXT unchanged lines. */
    for (size_t j = i; j < n; j++) {
      if (ops[j] != 'E') end = j + 1;
      else if (j - end >= 2 * CONTEXT) break;
    }
    size_t to = end + CONTEXT < n ? end + CONTEXT : n;
    size_t back = i - from;
    put_hunk(out, ops, from, to, ai - back, bi - back, a, b);
    for (size_t j = i; j < to; j++) {
      ai += ops[j] != 'I';
      bi += ops[j] != 'D';
    }
    i = to;
  }
}

int diff_unified(const char *label, const char *a, size_t alen, const char *b, size_t blen,
                 char **out) {
  *out = NULL;
  struct lines la = {0}, lb = {0};
  struct trace t = {0};
  char *ops = NULL;
  struct sbuf o = {0};
  int rc = split_lines(&la, a, alen);
  if (!rc) rc = split_lines(&lb, b, blen);
  if (!rc && !(ops = malloc(la.n + lb.n + 1))) rc = VF_ENOMEM;
  if (!rc && (alen != blen || memcmp(a, b, alen) != 0)) {
    long d = forward(&la, &lb, &t);
    if (d == VF_ENOMEM) rc = VF_ENOMEM;
    size_t n = d >= 0 ? backtrack(&la, &lb, &t, d, ops) : replace_middle(&la, &lb, ops);
    sb_printf(&o, "--- %s\n+++ %s\n", label, label);
    put_hunks(&o, ops, n, &la, &lb);
  }
  if (!rc) {
    *out = sb_take(&o, NULL);
    if (!*out) rc = VF_ENOMEM;
  }
  sb_free(&o);
  free(ops);
  free(t.v);
  free(la.off);
  free(lb.off);
  return rc;
}
