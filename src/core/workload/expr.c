/* Expressions of a workload's knobs: compiled to postfix code once, evaluated at every
 * point the planner tries. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/diag.h"
#include "core/workload/expr.h"

#define MAX_DEPTH 24 /* nested parentheses and calls; deeper input is refused, not recursed */

struct compiler {
  const struct vf_workload *w;
  const char *text, *p;
  struct vf_wl_expr *e;
  struct vf_diag *d;
  int depth;
};

static int fail(struct compiler *c, const char *at, const char *fmt, const char *arg) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, arg);
  return diag_line(c->d, VF_EINVAL, NULL, 0, (int)(at - c->text) + 1, "%s in '%s'", msg, c->text);
}

static void skip_space(struct compiler *c) {
  while (*c->p == ' ' || *c->p == '\t') c->p++;
}

static int emit(struct compiler *c, uint8_t op, uint8_t sym, int64_t num) {
  if (c->e->n >= VF_WL_EXPR_CODE) return fail(c, c->p, "%s", "expression too long");
  c->e->code[c->e->n++] = (struct vf_wl_code){op, sym, num};
  return 0;
}

int wl_symbol(const struct vf_workload *w, const char *name, size_t len, int *sym) {
  for (size_t i = 0; i < w->n_knobs; i++)
    if (strlen(w->knobs[i].name) == len && strncmp(w->knobs[i].name, name, len) == 0) {
      if (w->knobs[i].role == VF_WL_ACCUMULATION) return VF_EUNSUPPORTED;
      return *sym = (int)i, 0;
    }
  for (size_t i = 0; i < w->n_defines; i++)
    if (strlen(w->defines[i].name) == len && strncmp(w->defines[i].name, name, len) == 0)
      return *sym = VF_WL_MAX_KNOBS + (int)i, 0;
  return VF_ENOTFOUND;
}

static int expr(struct compiler *c);

static int call(struct compiler *c, const char *name, size_t len) {
  uint8_t op = len == 3 && strncmp(name, "min", 3) == 0 ? VF_WL_MIN : VF_WL_MAX;
  c->p++; /* ( */
  int rc = expr(c);
  skip_space(c);
  if (!rc && *c->p != ',') return fail(c, c->p, "%s", "',' expected between min/max arguments");
  if (!rc) c->p++, rc = expr(c);
  skip_space(c);
  if (!rc && *c->p != ')') return fail(c, c->p, "%s", "')' expected");
  if (!rc) c->p++, rc = emit(c, op, 0, 0);
  return rc;
}

static int name(struct compiler *c) {
  const char *start = c->p;
  while (isalnum((unsigned char)*c->p) || *c->p == '_') c->p++;
  size_t len = (size_t)(c->p - start);
  skip_space(c);
  if (*c->p == '(' && len == 3 && (strncmp(start, "min", 3) == 0 || strncmp(start, "max", 3) == 0))
    return call(c, start, len);
  char word[VF_WL_NAME];
  snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), start);
  int sym, rc = wl_symbol(c->w, start, len, &sym);
  if (rc == VF_EUNSUPPORTED)
    return fail(c, start, "'%s' cannot be used: what a micro batch holds does not depend on accumulation", word);
  if (rc) return fail(c, start, "unknown knob '%s'", word);
  return emit(c, VF_WL_SYM, (uint8_t)sym, 0);
}

static int number(struct compiler *c) {
  int64_t v = 0;
  const char *start = c->p;
  for (; isdigit((unsigned char)*c->p); c->p++)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c->p - '0', &v))
      return fail(c, start, "%s", "number too large");
  if (isalpha((unsigned char)*c->p) || *c->p == '_' || *c->p == '.')
    return fail(c, start, "%s", "whole numbers and names only");
  return emit(c, VF_WL_NUM, 0, v);
}

static int factor(struct compiler *c) {
  skip_space(c);
  if (++c->depth > MAX_DEPTH) return fail(c, c->p, "%s", "nested too deeply");
  int rc;
  if (*c->p == '(') {
    c->p++;
    rc = expr(c);
    skip_space(c);
    if (!rc && *c->p != ')') rc = fail(c, c->p, "%s", "')' expected");
    else if (!rc) c->p++;
  } else if (isdigit((unsigned char)*c->p)) {
    rc = number(c);
  } else if (isalpha((unsigned char)*c->p) || *c->p == '_') {
    rc = name(c);
  } else {
    rc = fail(c, c->p, "%s", *c->p ? "a number, a name or '(' expected" : "the expression ends too early");
  }
  c->depth--;
  return rc;
}

static int term(struct compiler *c) {
  int rc = factor(c);
  for (skip_space(c); !rc && (*c->p == '*' || *c->p == '/'); skip_space(c)) {
    uint8_t op = *c->p++ == '*' ? VF_WL_MUL : VF_WL_DIV;
    if (!(rc = factor(c))) rc = emit(c, op, 0, 0);
  }
  return rc;
}

static int expr(struct compiler *c) {
  int rc = term(c);
  for (skip_space(c); !rc && (*c->p == '+' || *c->p == '-'); skip_space(c)) {
    uint8_t op = *c->p++ == '+' ? VF_WL_ADD : VF_WL_SUB;
    if (!(rc = term(c))) rc = emit(c, op, 0, 0);
  }
  return rc;
}

int vf_wl_expr_compile(const struct vf_workload *w, const char *text, struct vf_wl_expr *e, struct vf_diag *d) {
  memset(e, 0, sizeof *e);
  snprintf(e->text, sizeof e->text, "%s", text);
  struct compiler c = {w, e->text, e->text, e, d, 0};
  if (strlen(text) >= sizeof e->text) return fail(&c, c.p, "%s", "expression too long");
  int rc = expr(&c);
  if (!rc && *c.p) rc = fail(&c, c.p, "%s", "an operator expected");
  if (rc) e->n = 0;
  return rc;
}

/* ---- evaluation ---- */

static int eval_depth(const struct vf_workload *w, const struct vf_wl_expr *e, const struct vf_wl_point *pt,
                      int depth, int64_t *out);

static int symbol_value(const struct vf_workload *w, uint8_t sym, const struct vf_wl_point *pt, int depth,
                        int64_t *out) {
  if (sym < VF_WL_MAX_KNOBS) return *out = pt->values[sym], 0;
  if ((size_t)(sym - VF_WL_MAX_KNOBS) >= w->n_defines || depth > VF_WL_MAX_DEFINES) return VF_ERANGE;
  return eval_depth(w, &w->defines[sym - VF_WL_MAX_KNOBS].expr, pt, depth + 1, out);
}

static int apply_op(uint8_t op, int64_t a, int64_t b, int64_t *out) {
  switch (op) {
  case VF_WL_ADD: return __builtin_add_overflow(a, b, out) ? VF_ERANGE : 0;
  case VF_WL_SUB: return __builtin_sub_overflow(a, b, out) ? VF_ERANGE : 0;
  case VF_WL_MUL: return __builtin_mul_overflow(a, b, out) ? VF_ERANGE : 0;
  case VF_WL_DIV:
    if (b == 0 || (a == INT64_MIN && b == -1)) return VF_ERANGE;
    *out = a / b - ((a % b != 0) && ((a < 0) != (b < 0))); /* rounding down */
    return 0;
  case VF_WL_MIN: return *out = a < b ? a : b, 0;
  default: return *out = a > b ? a : b, 0;
  }
}

static int eval_depth(const struct vf_workload *w, const struct vf_wl_expr *e, const struct vf_wl_point *pt,
                      int depth, int64_t *out) {
  int64_t stack[VF_WL_EXPR_CODE];
  size_t top = 0;
  for (size_t i = 0; i < e->n; i++) {
    const struct vf_wl_code *k = &e->code[i];
    int rc = 0;
    if (k->op == VF_WL_NUM) stack[top++] = k->num;
    else if (k->op == VF_WL_SYM) rc = symbol_value(w, k->sym, pt, depth, &stack[top++]);
    else if (top < 2) rc = VF_EINTERNAL;
    else top--, rc = apply_op(k->op, stack[top - 1], stack[top], &stack[top - 1]);
    if (rc) return rc;
  }
  if (top != 1) return VF_EINTERNAL;
  *out = stack[0];
  return 0;
}

int vf_wl_expr_eval(const struct vf_workload *w, const struct vf_wl_expr *e, const struct vf_wl_point *pt,
                    int64_t *out) {
  int rc = eval_depth(w, e, pt, 0, out);
  return rc ? rc : *out < 0 ? VF_ERANGE : 0;
}

/* ---- cycles among defines ---- */

static bool refers(const struct vf_wl_expr *e, int sym) {
  for (size_t i = 0; i < e->n; i++)
    if (e->code[i].op == VF_WL_SYM && e->code[i].sym == sym) return true;
  return false;
}

/* Depth-first from define i, path[] holding the chain; returns the length of a cycle's
 * chain (path[0..n) ending where it started) or 0. */
static size_t find_cycle(const struct vf_workload *w, size_t i, size_t *path, size_t depth, uint8_t *state) {
  path[depth] = i;
  if (state[i] == 1) return depth + 1;
  if (state[i] == 2) return 0;
  state[i] = 1;
  for (size_t j = 0; j < w->n_defines; j++) {
    if (!refers(&w->defines[i].expr, VF_WL_MAX_KNOBS + (int)j)) continue;
    size_t n = find_cycle(w, j, path, depth + 1, state);
    if (n) return n;
  }
  state[i] = 2;
  return 0;
}

int wl_defines_check(const struct vf_workload *w, const char *file, struct vf_diag *d) {
  uint8_t state[VF_WL_MAX_DEFINES] = {0};
  size_t path[VF_WL_MAX_DEFINES + 1];
  for (size_t i = 0; i < w->n_defines; i++) {
    size_t n = find_cycle(w, i, path, 0, state);
    if (!n) continue;
    /* The chain may lead into the cycle first: print the cycle itself. */
    size_t from = 0;
    while (path[from] != path[n - 1]) from++;
    char chain[256] = "";
    for (size_t k = from; k < n; k++)
      snprintf(chain + strlen(chain), sizeof chain - strlen(chain), "%s%s", k > from ? " -> " : "",
               w->defines[path[k]].name);
    const struct vf_wl_expr *e = &w->defines[path[from]].expr;
    return diag_line(d, VF_EINVAL, file, e->line, e->col, "defines refer to each other in a cycle: %s", chain);
  }
  return 0;
}
