/* A growable byte buffer for building text (YAML edits, SVG, messages): appends never fail
 * one by one; an allocation failure is remembered and reported once, by sb_take(). */
#ifndef VF_BASE_SBUF_H
#define VF_BASE_SBUF_H

#include <stdbool.h>
#include <stddef.h>

struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
};
void sb_add(struct sbuf *b, const char *s, size_t n);
void sb_puts(struct sbuf *b, const char *s);
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the NUL-terminated bytes to the caller (NULL after an allocation failure). */
char *sb_take(struct sbuf *b, size_t *len);
void sb_free(struct sbuf *b);
/* A malloc'd copy of n bytes plus a NUL. */
char *bytes_dup(const char *s, size_t n);

#endif
