/* PYTORCH_ALLOC_CONF parsing and the size rules of the CUDA caching allocator. The parser
 * follows c10's ConfigTokenizer: ',', ':', '[' and ']' are tokens, whitespace is dropped
 * (even inside a word), everything else forms words. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "core/alloc/internal.h"
#include "vramfit/alloc.h"

void vf_alloc_conf_default(struct vf_alloc_conf *c) {
  memset(c, 0, sizeof *c);
  c->max_split_size = UINT64_MAX;
  c->max_non_split_rounding = VF_ALLOC_LARGE_BUFFER;
  c->large_segment_size = VF_ALLOC_LARGE_BUFFER;
  c->per_process_memory_fraction = 1.0;
}

static unsigned log2_floor(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

/* Interval index log2(size) - 20, clamped to the 16 intervals from 1 MiB to 64 GiB. */
static uint32_t divisions_for(const struct vf_alloc_conf *c, uint64_t size) {
  unsigned lg = log2_floor(size);
  unsigned idx = lg > 20 ? lg - 20 : 0;
  if (idx >= VF_ALLOC_DIVISION_INTERVALS) idx = VF_ALLOC_DIVISION_INTERVALS - 1;
  return c->roundup_power2_divisions[idx];
}

/* Splits [2^k, 2^(k+1)) into `divisions` equal steps and rounds size up to the next one. */
static uint64_t next_division(uint64_t size, uint32_t divisions) {
  if (is_pow2(size)) return size;
  uint64_t floor = UINT64_C(1) << log2_floor(size);
  uint64_t step = floor >> log2_floor(divisions);
  if (step == 0) return floor << 1;
  uint64_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

uint64_t vf_alloc_round_size(const struct vf_alloc_conf *c, uint64_t request) {
  if (request > VF_ALLOC_MAX_REQUEST) return UINT64_MAX;
  if (request < VF_ALLOC_MIN_BLOCK) return VF_ALLOC_MIN_BLOCK;
  /* cudaMallocAsync ignores roundup_power2_divisions. */
  uint32_t div = c->backend_async ? 0 : divisions_for(c, request);
  if (div > 1 && request > VF_ALLOC_MIN_BLOCK * div) return next_division(request, div);
  return alloc_round_up(request, VF_ALLOC_MIN_BLOCK);
}

uint64_t vf_alloc_segment_size(const struct vf_alloc_conf *c, uint64_t rounded) {
  if (rounded > VF_ALLOC_MAX_REQUEST) return UINT64_MAX;
  if (rounded <= VF_ALLOC_SMALL_SIZE) return VF_ALLOC_SMALL_BUFFER;
  if (rounded < VF_ALLOC_MIN_LARGE_ALLOC) return c->large_segment_size;
  return alloc_round_up(rounded, VF_ALLOC_ROUND_LARGE);
}

/* ---- lexer ---- */

enum { TOK_END = 0, TOK_WORD = 'w' };

struct lex {
  const char *s;
  size_t pos;       /* next byte to read */
  int kind;         /* TOK_END, TOK_WORD or the punctuation byte */
  uint64_t off;     /* byte where the token starts */
  char word[128];
  bool too_long;
};

static bool is_punct(char ch) { return ch == ',' || ch == ':' || ch == '[' || ch == ']'; }
static bool is_blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

static void lex_next(struct lex *l) {
  while (is_blank(l->s[l->pos])) l->pos++;
  l->off = l->pos;
  l->word[0] = '\0';
  l->too_long = false;
  char ch = l->s[l->pos];
  if (ch == '\0' || is_punct(ch)) {
    l->kind = ch == '\0' ? TOK_END : ch;
    if (ch) l->pos++;
    return;
  }
  size_t n = 0;
  for (; (ch = l->s[l->pos]) != '\0' && !is_punct(ch); l->pos++) {
    if (is_blank(ch)) continue;
    if (n + 1 < sizeof l->word) l->word[n++] = ch;
    else l->too_long = true;
  }
  l->word[n] = '\0';
  l->kind = TOK_WORD;
}

/* ---- parser ---- */

struct parse {
  struct lex lx;
  struct vf_alloc_conf *c;
  struct vf_diag *d;
  uint64_t split_mb, rounding_mb, large_mb;
  uint64_t split_off, rounding_off, large_off; /* where the value is; UINT64_MAX: not given */
};

#define FAIL(p, off, ...) diag_at((p)->d, VF_EINVAL, NULL, (off), __VA_ARGS__)

static const char *tok_text(const struct lex *l) {
  switch (l->kind) {
  case TOK_END: return "end of text";
  case ',': return ",";
  case ':': return ":";
  case '[': return "[";
  case ']': return "]";
  default: return l->word;
  }
}

static int expect(struct parse *p, int kind) {
  if (p->lx.kind == kind) {
    lex_next(&p->lx);
    return 0;
  }
  return FAIL(p, p->lx.off,
              "Error parsing CachingAllocator::AllocatorConfig settings, expected %c, got '%s'",
              kind, tok_text(&p->lx));
}

/* An unsigned decimal integer word (std::stoull without its sign and prefix leniency). */
static int take_uint(struct parse *p, const char *key, uint64_t *out) {
  const struct lex *l = &p->lx;
  uint64_t v = 0;
  bool ok = l->kind == TOK_WORD && !l->too_long && l->word[0];
  for (const char *q = l->word; ok && *q; q++) {
    unsigned dgt = (unsigned)(*q - '0');
    ok = dgt <= 9 && v <= (UINT64_MAX - dgt) / 10;
    v = v * 10 + dgt;
  }
  if (!ok) return FAIL(p, l->off, "Expected an integer for %s, got '%s'", key, tok_text(l));
  *out = v;
  lex_next(&p->lx);
  return 0;
}

static int take_double(struct parse *p, const char *key, double *out) {
  const struct lex *l = &p->lx;
  char *end = NULL;
  double v = l->kind == TOK_WORD ? strtod(l->word, &end) : 0;
  if (l->kind != TOK_WORD || l->too_long || end == l->word || *end || !isfinite(v))
    return FAIL(p, l->off, "Expected a number for %s, got '%s'", key, tok_text(l));
  *out = v;
  lex_next(&p->lx);
  return 0;
}

static int take_bool(struct parse *p, const char *key, bool *out) {
  const struct lex *l = &p->lx;
  bool t = l->kind == TOK_WORD && !strcmp(l->word, "True");
  if (!t && !(l->kind == TOK_WORD && !strcmp(l->word, "False")))
    return FAIL(p, l->off, "Expected a single True/False argument for %s, got '%s'", key,
                tok_text(l));
  if (out) *out = t;
  lex_next(&p->lx);
  return 0;
}

/* Keys whose value has no effect on device memory: skip a word or a bracketed list. */
static int skip_value(struct parse *p) {
  if (p->lx.kind == TOK_WORD) {
    lex_next(&p->lx);
    return 0;
  }
  uint64_t open = p->lx.off;
  int rc = expect(p, '[');
  if (rc) return rc;
  while (p->lx.kind != ']') {
    if (p->lx.kind == TOK_END) return FAIL(p, open, "Expected closing bracket ']'");
    lex_next(&p->lx);
  }
  lex_next(&p->lx);
  return 0;
}

/* ---- roundup_power2_divisions ---- */

static int take_division(struct parse *p, uint64_t *out) {
  uint64_t off = p->lx.off;
  int rc = take_uint(p, "roundup_power2_divisions", out);
  if (!rc && *out && !is_pow2(*out))
    rc = FAIL(p, off, "For roundups, the divisions has to be power of 2 or 0 to disable roundup");
  return rc;
}

/* One "MB:divisions" or ">:divisions" entry. The first sized entry also covers the intervals
 * below it; '>' covers every interval above the last sized one. */
static int division_entry(struct parse *p, bool *first, unsigned *last) {
  uint32_t *div = p->c->roundup_power2_divisions;
  bool rest = p->lx.kind == TOK_WORD && !strcmp(p->lx.word, ">");
  uint64_t at = p->lx.off, mb = 0, value;
  int rc = rest ? (lex_next(&p->lx), 0) : take_uint(p, "roundup_power2_divisions", &mb);
  if (!rc && !rest && !is_pow2(mb))
    rc = FAIL(p, at, "For roundups, the intervals have to be power of 2");
  if (!rc) rc = expect(p, ':');
  if (!rc) rc = take_division(p, &value);
  if (rc) return rc;
  if (rest) {
    for (unsigned i = *last + 1; i < VF_ALLOC_DIVISION_INTERVALS; i++) div[i] = (uint32_t)value;
    return 0;
  }
  unsigned idx = log2_floor(mb);
  if (idx >= VF_ALLOC_DIVISION_INTERVALS) idx = VF_ALLOC_DIVISION_INTERVALS - 1;
  for (unsigned i = 0; *first && i < idx; i++) div[i] = (uint32_t)value;
  *first = false;
  div[idx] = (uint32_t)value;
  *last = idx;
  return 0;
}

static int parse_division_list(struct parse *p) {
  uint64_t open = p->lx.off;
  lex_next(&p->lx);
  bool first = true;
  unsigned last = 0;
  while (p->lx.kind != ']') {
    if (p->lx.kind == TOK_END) return FAIL(p, open, "Expected closing bracket ']'");
    int rc = division_entry(p, &first, &last);
    if (!rc && p->lx.kind == TOK_END) rc = FAIL(p, open, "Expected closing bracket ']'");
    if (!rc && p->lx.kind != ']') rc = expect(p, ',');
    if (rc) return rc;
  }
  lex_next(&p->lx);
  return 0;
}

static int parse_divisions(struct parse *p) {
  if (p->lx.kind == '[') return parse_division_list(p);
  uint64_t off = p->lx.off, v;
  int rc = take_uint(p, "roundup_power2_divisions", &v);
  if (rc) return rc;
  if (!is_pow2(v) || v > UINT32_MAX)
    return FAIL(p, off, "For roundups, the divisions has to be power of 2");
  for (unsigned i = 0; i < VF_ALLOC_DIVISION_INTERVALS; i++)
    p->c->roundup_power2_divisions[i] = (uint32_t)v;
  return 0;
}

/* ---- the keys ---- */

enum key_kind {
  K_MAX_SPLIT, K_NON_SPLIT_ROUNDING, K_LARGE_SEGMENT, K_GC_THRESHOLD, K_DIVISIONS,
  K_EXPANDABLE, K_BACKEND, K_FRACTION, K_REGISTER_THREADS, K_RESERVE_SEGMENT, K_BOOL, K_UINT,
  K_SKIP,
};

static const struct {
  const char *name;
  enum key_kind kind;
} keys[] = {
    {"max_split_size_mb", K_MAX_SPLIT},
    {"max_non_split_rounding_mb", K_NON_SPLIT_ROUNDING},
    {"large_segment_size_mb", K_LARGE_SEGMENT},
    {"garbage_collection_threshold", K_GC_THRESHOLD},
    {"roundup_power2_divisions", K_DIVISIONS},
    {"expandable_segments", K_EXPANDABLE},
    {"backend", K_BACKEND},
    {"per_process_memory_fraction", K_FRACTION},
    {"pinned_num_register_threads", K_REGISTER_THREADS},
    {"pinned_reserve_segment_size_mb", K_RESERVE_SEGMENT},
    {"pinned_use_background_threads", K_BOOL},
    {"release_lock_on_cudamalloc", K_BOOL},
    {"release_lock_on_hipmalloc", K_BOOL},
    {"pinned_use_cuda_host_register", K_BOOL},
    {"pinned_use_hip_host_register", K_BOOL},
    {"graph_capture_record_stream_reuse", K_BOOL},
    {"throw_on_cudamalloc_oom", K_BOOL},
    {"pinned_free_catch_all", K_BOOL},
    {"pinned_max_round_threshold_mb", K_UINT},
    {"pinned_max_cached_size_mb", K_UINT},
    /* Address-space reservations of newer releases ("0.5", "40G", [name:value,...]). */
    {"expandable_segments_reserve", K_SKIP},
    {"expandable_segments_reserve_by_class", K_SKIP},
};

static int parse_backend(struct parse *p) {
  const struct lex *l = &p->lx;
  bool native = l->kind == TOK_WORD && !strcmp(l->word, "native");
  bool async = l->kind == TOK_WORD && !strcmp(l->word, "cudaMallocAsync");
  if (!native && !async)
    return FAIL(p, l->off, "Unknown allocator backend, options are native and cudaMallocAsync");
  p->c->backend_async = async;
  lex_next(&p->lx);
  return 0;
}

static int parse_register_threads(struct parse *p, const char *key) {
  uint64_t off = p->lx.off, v;
  int rc = take_uint(p, key, &v);
  if (!rc && !is_pow2(v))
    rc = FAIL(p, off, "Number of register threads has to be power of 2, got %llu",
              (unsigned long long)v);
  if (!rc && v > 128)
    rc = FAIL(p, off, "Number of register threads should be less than or equal to 128, got %llu",
              (unsigned long long)v);
  return rc;
}

static int parse_large_segment(struct parse *p, const char *key) {
  uint64_t off = p->large_off = p->lx.off;
  int rc = take_uint(p, key, &p->large_mb);
  if (!rc && p->large_mb <= VF_ALLOC_MIN_LARGE_ALLOC / VF_MIB)
    rc = FAIL(p, off, "CachingAllocator option large_segment_size_mb must be > %llu MB",
              (unsigned long long)(VF_ALLOC_MIN_LARGE_ALLOC / VF_MIB));
  return rc;
}

static int parse_unit_interval(struct parse *p, const char *key, bool closed, double *out) {
  uint64_t off = p->lx.off;
  int rc = take_double(p, key, out);
  if (rc) return rc;
  if (closed && !(*out >= 0.0 && *out <= 1.0))
    return FAIL(p, off, "per_process_memory_fraction is invalid, set it in [0.0, 1.0]");
  if (!closed && !(*out > 0.0 && *out < 1.0))
    return FAIL(p, off, "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
  return 0;
}

static int parse_value(struct parse *p, enum key_kind kind, const char *key) {
  uint64_t off = p->lx.off, v;
  struct vf_alloc_conf *c = p->c;
  int rc;
  switch (kind) {
  case K_MAX_SPLIT: p->split_off = off; return take_uint(p, key, &p->split_mb);
  case K_NON_SPLIT_ROUNDING: p->rounding_off = off; return take_uint(p, key, &p->rounding_mb);
  case K_LARGE_SEGMENT: return parse_large_segment(p, key);
  case K_GC_THRESHOLD:
    return parse_unit_interval(p, key, false, &c->garbage_collection_threshold);
  case K_FRACTION: return parse_unit_interval(p, key, true, &c->per_process_memory_fraction);
  case K_DIVISIONS: return parse_divisions(p);
  case K_EXPANDABLE: return take_bool(p, key, &c->expandable_segments);
  case K_BACKEND: return parse_backend(p);
  case K_REGISTER_THREADS: return parse_register_threads(p, key);
  case K_RESERVE_SEGMENT:
    rc = take_uint(p, key, &v);
    if (!rc && v == 0) rc = FAIL(p, off, "Pinned reserve segment size has to be greater than 0");
    return rc;
  case K_BOOL: return take_bool(p, key, NULL);
  case K_UINT: return take_uint(p, key, &v);
  case K_SKIP: break;
  }
  return skip_value(p);
}

static int parse_pair(struct parse *p) {
  const struct lex *l = &p->lx;
  size_t k = 0;
  while (k < sizeof keys / sizeof keys[0] &&
         (l->kind != TOK_WORD || l->too_long || strcmp(l->word, keys[k].name)))
    k++;
  if (k == sizeof keys / sizeof keys[0])
    return FAIL(p, l->off, "Unrecognized key '%s' in CUDA allocator config", tok_text(l));
  lex_next(&p->lx);
  int rc = expect(p, ':');
  return rc ? rc : parse_value(p, keys[k].kind, keys[k].name);
}

/* A size in MB given at byte off (UINT64_MAX: not given), at least floor_mb; PyTorch
 * clamps what would overflow, and so do we, at 1 PiB. */
static int mb_option(struct parse *p, const char *key, uint64_t mb, uint64_t off,
                     uint64_t floor_mb, uint64_t *bytes) {
  if (off == UINT64_MAX) return 0;
  if (mb < floor_mb)
    return FAIL(p, off, "CachingAllocator option %s too small, must be >= %llu", key,
                (unsigned long long)floor_mb);
  uint64_t cap_mb = VF_ALLOC_MAX_REQUEST / VF_MIB;
  *bytes = (mb < cap_mb ? mb : cap_mb) * VF_MIB;
  return 0;
}

/* The MB options checked once the whole text is read, because large_segment_size_mb sets
 * their floor and the rounding default wherever it appears (c10 reads it first). */
static int apply_mb_options(struct parse *p) {
  struct vf_alloc_conf *c = p->c;
  uint64_t cap_mb = VF_ALLOC_MAX_REQUEST / VF_MIB;
  if (p->large_off != UINT64_MAX)
    c->large_segment_size = (p->large_mb < cap_mb ? p->large_mb : cap_mb) * VF_MIB;
  c->max_non_split_rounding = c->large_segment_size;
  uint64_t floor_mb = c->large_segment_size / VF_MIB;
  int rc = mb_option(p, "max_split_size_mb", p->split_mb, p->split_off, floor_mb,
                     &c->max_split_size);
  return rc ? rc : mb_option(p, "max_non_split_rounding_mb", p->rounding_mb, p->rounding_off,
                             floor_mb, &c->max_non_split_rounding);
}

int vf_alloc_conf_parse(const char *text, struct vf_alloc_conf *c, struct vf_diag *d) {
  if (!text || !c) return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "no configuration text");
  vf_alloc_conf_default(c);
  struct parse p = {.lx = {.s = text}, .c = c, .d = d, .split_off = UINT64_MAX,
                    .rounding_off = UINT64_MAX, .large_off = UINT64_MAX};
  lex_next(&p.lx);
  while (p.lx.kind != TOK_END) {
    int rc = parse_pair(&p);
    if (!rc && p.lx.kind != TOK_END) rc = expect(&p, ',');
    if (rc) return rc;
  }
  return apply_mb_options(&p);
}

int vf_alloc_conf_from_env(const char *alloc_conf, const char *cuda_alloc_conf,
                           const char *no_caching, struct vf_alloc_conf *c, struct vf_diag *d) {
  const char *name = alloc_conf ? "PYTORCH_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
  const char *text = alloc_conf ? alloc_conf : cuda_alloc_conf;
  int rc = vf_alloc_conf_parse(text ? text : "", c, d);
  if (rc) {
    if (d) snprintf(d->file, sizeof d->file, "%s", name);
    return rc;
  }
  /* c10's forceUncachedAllocator() only asks whether the variable exists: "0" disables too. */
  c->caching_disabled = no_caching != NULL;
  return 0;
}
