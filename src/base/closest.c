#include "base/closest.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void name_fold(const char *s, size_t len, char *out, size_t size) {
  size_t o = 0;
  for (size_t i = 0; i < len && s[i] && o + 1 < size; i++)
    if (!strchr("-_. ", s[i])) out[o++] = (char)tolower((unsigned char)s[i]);
  out[o] = '\0';
}

/* Levenshtein distance; b is a folded name, shorter than CLOSEST_NAME. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  size_t row[CLOSEST_NAME];
  if (lb >= CLOSEST_NAME) return SIZE_MAX;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

void closest_start(struct closest *s, const char *text, size_t len) {
  s->n = 0;
  name_fold(text, len, s->want, sizeof s->want);
}

static size_t distance(const struct closest *s, const char *folded) {
  if (!s->want[0]) return SIZE_MAX;
  return strstr(folded, s->want) ? 0 : edit_distance(s->want, folded);
}

void closest_offer(struct closest *s, const char *name, const char *folded) {
  size_t d = distance(s, folded);
  if (d > strlen(s->want) / 3 + 1) return;
  struct closest_name *last = s->n ? &s->c[s->n - 1] : NULL;
  if (last && strncmp(last->name, name, sizeof last->name - 1) == 0) {
    if (d < last->distance) last->distance = d;
    return;
  }
  if (s->n == CLOSEST_MAX) return;
  struct closest_name *c = &s->c[s->n];
  c->distance = d;
  c->order = s->n++;
  snprintf(c->name, sizeof c->name, "%s", name);
}

static int by_distance(const void *a, const void *b) {
  const struct closest_name *x = a, *y = b;
  if (x->distance != y->distance) return x->distance < y->distance ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

size_t closest_list(struct closest *s, char *list, size_t size) {
  qsort(s->c, s->n, sizeof *s->c, by_distance);
  size_t n = 0, used = 0;
  list[0] = '\0';
  for (; n < s->n && n < CLOSEST_SHOWN && s->c[n].distance == s->c[0].distance; n++) {
    int w = snprintf(list + used, size - used, "%s%s", n ? ", " : "", s->c[n].name);
    if (w < 0 || (size_t)w >= size - used) break;
    used += (size_t)w;
  }
  return n;
}
