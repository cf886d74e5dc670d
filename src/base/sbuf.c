#include "base/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool sb_reserve(struct sbuf *b, size_t more) {
  if (b->oom) return false;
  if (b->len + more + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + more + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

void sb_add(struct sbuf *b, const char *s, size_t n) {
  if (!sb_reserve(b, n)) return;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void sb_puts(struct sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

void sb_printf(struct sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !sb_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *sb_take(struct sbuf *b, size_t *len) {
  if (!b->oom && !b->p && sb_reserve(b, 0)) b->p[0] = '\0';
  if (b->oom) {
    sb_free(b);
    return NULL;
  }
  char *p = b->p;
  if (len) *len = b->len;
  b->p = NULL;
  b->len = b->cap = 0;
  return p;
}

void sb_free(struct sbuf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->oom = false;
}

char *bytes_dup(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = '\0';
  return p;
}
