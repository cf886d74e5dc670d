/* The tracer's event file (python/vramfit/trace/__main__.py writes it). A line each, after
 * the header; every malformed line is an error with its position, never a crash. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/grow.h"
#include "vramfit/trace.h"

#define HEADER "vramfit-trace-events 1"
/* No real run has storages near this many; a bound keeps a hostile id from sizing the
 * category table. */
#define MAX_IDS (1u << 26)

void vf_trace_init(struct vf_trace *t) { memset(t, 0, sizeof *t); }

void vf_trace_cleanup(struct vf_trace *t) {
  free(t->events);
  free(t->category);
  vf_trace_init(t);
}

struct cursor {
  const char *line_start;
  int line;
  struct vf_diag *d;
};

static int bad(const struct cursor *c, const char *at, const char *why) {
  return diag_line(c->d, VF_EFORMAT, "", c->line, (int)(at - c->line_start) + 1, "%s", why);
}

static int push(struct vf_trace *t, struct vf_trace_event e) {
  struct vf_trace_event *grown = array_grow(t->events, &t->cap, t->n + 1, sizeof *grown);
  if (!grown) return VF_ENOMEM;
  t->events = grown;
  t->events[t->n++] = e;
  return 0;
}

/* A decimal number of at least one digit that ends the field; *pp moves past it. */
static int number(const char **pp, const char *end, uint64_t *out) {
  const char *p = *pp;
  uint64_t v = 0;
  if (p == end || *p < '0' || *p > '9') return VF_EFORMAT;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - 9) / 10) return VF_EFORMAT;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *pp = p;
  *out = v;
  return 0;
}

static int phase_index(struct vf_trace *t, const char *name, size_t n, uint8_t *out) {
  for (size_t i = 0; i < t->nphases; i++)
    if (strlen(t->phases[i]) == n && memcmp(t->phases[i], name, n) == 0) return *out = (uint8_t)i, 0;
  if (t->nphases == VF_TRACE_MAX_PHASES) return VF_ERANGE;
  memcpy(t->phases[t->nphases], name, n);
  t->phases[t->nphases][n] = 0;
  *out = (uint8_t)t->nphases++;
  return 0;
}

static int category_of(const char *name, size_t n, uint8_t *out) {
  static const enum vf_category labelled[] = {VF_CAT_WEIGHTS, VF_CAT_GRADIENTS, VF_CAT_OPTIMIZER};
  for (size_t i = 0; i < sizeof labelled / sizeof *labelled; i++) {
    const char *want = vf_category_name(labelled[i]);
    if (strlen(want) == n && memcmp(want, name, n) == 0) return *out = (uint8_t)labelled[i], 0;
  }
  return VF_EFORMAT;
}

/* Ids are dense (1, 2, ...): the category table grows with the largest id seen. */
static int reserve_id(struct vf_trace *t, uint64_t id) {
  if (id >= MAX_IDS) return VF_ERANGE;
  if (id > t->max_id) t->max_id = id;
  if (id < t->category_cap) return 0;
  size_t cap = t->category_cap ? t->category_cap : 1024;
  while (cap <= id) cap *= 2;
  uint8_t *grown = realloc(t->category, cap);
  if (!grown) return VF_ENOMEM;
  memset(grown + t->category_cap, VF_CAT_ACTIVATIONS, cap - t->category_cap);
  t->category = grown;
  t->category_cap = cap;
  return 0;
}

static int parse_phase(const struct cursor *c, const char *p, const char *eol, struct vf_trace *t) {
  struct vf_trace_event e = {.kind = VF_TRACE_PHASE};
  if (p == eol || eol - p >= VF_TRACE_PHASE_NAME) return bad(c, p, "phase name missing or too long");
  if (phase_index(t, p, (size_t)(eol - p), &e.phase))
    return diag_line(c->d, VF_ERANGE, "", c->line, 1, "more than %d phases", VF_TRACE_MAX_PHASES);
  return push(t, e);
}

/* No run has more streams than this; the allocator model takes 1024. */
#define MAX_STREAM 1023

/* " STREAM" ending the line, if there is one; *out keeps its value otherwise. */
static int optional_stream(const struct cursor *c, const char *p, const char *eol, uint32_t *out) {
  if (p == eol) return 0;
  uint64_t v;
  const char *field = p + 1;
  if (*p != ' ' || number(&field, eol, &v) || field != eol || v > MAX_STREAM)
    return bad(c, p, "a stream number (0-1023) or the end of the line expected");
  *out = (uint32_t)v;
  return 0;
}

/* "m EVENT STREAM" or "w EVENT", from the event on. */
static int parse_cuda_event(const struct cursor *c, char kind, const char *p, const char *eol,
                            struct vf_trace *t) {
  struct vf_trace_event e = {.kind = kind == 'm' ? VF_TRACE_EVENT : VF_TRACE_WAIT};
  const char *field = p;
  if (number(&p, eol, &e.id) || e.id == 0 || e.id >= MAX_IDS) return bad(c, field, "event number expected");
  if (e.id > t->max_event) t->max_event = e.id;
  if (kind == 'w') return p == eol ? push(t, e) : bad(c, p, "end of line expected");
  if (p == eol) return bad(c, p, "a stream number expected");
  int rc = optional_stream(c, p, eol, &e.stream);
  return rc ? rc : push(t, e);
}

/* "s" or "s STREAM", from after the 's'. */
static int parse_sync(const struct cursor *c, const char *p, const char *eol, struct vf_trace *t) {
  struct vf_trace_event e = {.kind = VF_TRACE_SYNC, .stream = VF_ALLOC_ALL_STREAMS};
  int rc = optional_stream(c, p, eol, &e.stream);
  return rc ? rc : push(t, e);
}

static enum vf_trace_kind storage_kind(char kind) {
  return kind == 'a' ? VF_TRACE_ALLOC : kind == 'r' ? VF_TRACE_RECORD : VF_TRACE_FREE;
}

/* "a ID BYTES [STREAM]", "f ID", "r ID STREAM" or "c ID CATEGORY", from the id on. */
static int parse_storage(const struct cursor *c, char kind, const char *p, const char *eol,
                         struct vf_trace *t) {
  struct vf_trace_event e = {.kind = (uint8_t)storage_kind(kind)};
  const char *field = p;
  if (number(&p, eol, &e.id) || e.id == 0) return bad(c, field, "storage id expected");
  int rc = reserve_id(t, e.id);
  if (rc) return rc == VF_ERANGE ? bad(c, field, "storage id too large") : rc;
  if (kind == 'f') return p == eol ? push(t, e) : bad(c, p, "end of line expected");
  if (p == eol || *p++ != ' ') return bad(c, p, "a space and a second field expected");
  field = p;
  if (kind == 'c')
    return category_of(p, (size_t)(eol - p), &t->category[e.id]) ? bad(c, field, "unknown category") : 0;
  if (kind == 'r') {
    rc = optional_stream(c, p - 1, eol, &e.stream);
    return rc ? rc : push(t, e);
  }
  if (number(&p, eol, &e.bytes) || (p != eol && *p != ' ')) return bad(c, field, "byte count expected");
  rc = optional_stream(c, p, eol, &e.stream);
  return rc ? rc : push(t, e);
}

static int parse_line(const struct cursor *c, const char *p, const char *eol, struct vf_trace *t) {
  char kind = *p;
  if (kind == 'e')
    return p + 1 == eol ? push(t, (struct vf_trace_event){.kind = VF_TRACE_EMPTY_CACHE})
                        : bad(c, p + 1, "end of line expected");
  if (kind == 's') return parse_sync(c, p + 1, eol, t);
  if (!strchr("afpcrmw", kind) || eol - p < 2 || p[1] != ' ')
    return bad(c, p, "an event ('a', 'f', 'p', 'e', 'c', 'r', 's', 'm' or 'w') and a space expected");
  if (kind == 'm' || kind == 'w') return parse_cuda_event(c, kind, p + 2, eol, t);
  return kind == 'p' ? parse_phase(c, p + 2, eol, t) : parse_storage(c, kind, p + 2, eol, t);
}

int vf_trace_parse(const char *text, size_t len, struct vf_trace *t, struct vf_diag *d) {
  struct cursor c = {.line_start = text, .line = 1, .d = d};
  const char *end = text + len, *eol = memchr(text, '\n', len);
  if (!eol || (size_t)(eol - text) != strlen(HEADER) || memcmp(text, HEADER, strlen(HEADER)))
    return diag_line(d, VF_EFORMAT, "", 1, 1, "not a vramfit trace event file");
  for (const char *p = eol + 1; p < end; p = eol + 1) {
    c.line++;
    c.line_start = p;
    eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    if (eol == p) return bad(&c, p, "empty line");
    int rc = parse_line(&c, p, eol, t);
    if (rc) return rc;
  }
  return 0;
}
