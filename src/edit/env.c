/* PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF in shell env files and launch scripts.
 * Both names get the same value: newer PyTorch reads PYTORCH_ALLOC_CONF first and older
 * releases only know the CUDA name, so setting both is the version-robust choice. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "edit/internal.h"

static const char *const names[] = {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
enum { N_NAMES = 2, MAX_OPTS = 32 };

struct opt {
  const char *k, *v;
  size_t kl, vl;
};

/* "a:1,b:[256:1,>:8]" -> options; commas inside brackets belong to the value. */
static int parse_opts(const char *s, size_t n, struct opt *o, size_t *count) {
  *count = 0;
  size_t i = 0;
  while (i < n) {
    size_t k = i;
    int depth = 0;
    while (i < n && s[i] != ':' && s[i] != ',') i++;
    if (i >= n || s[i] != ':' || i == k || *count == MAX_OPTS) return VF_EINVAL;
    size_t v = ++i;
    for (; i < n && (depth > 0 || s[i] != ','); i++) depth += (s[i] == '[') - (s[i] == ']');
    o[(*count)++] = (struct opt){s + k, s + v, v - 1 - k, i - v};
    if (i < n) i++;
  }
  return 0;
}

/* The old options with add's values, then add's new options; VF_EINVAL when old does not
 * read as options (it is left to the user rather than dropped). */
static int merge_opts(const char *old, const struct opt *add, size_t nadd, char **out) {
  struct opt cur[MAX_OPTS];
  size_t n;
  if (parse_opts(old, strlen(old), cur, &n)) return VF_EINVAL;
  struct sbuf b = {0};
  bool used[MAX_OPTS] = {false};
  for (size_t i = 0; i < n; i++) {
    const struct opt *o = &cur[i];
    for (size_t j = 0; j < nadd && o == &cur[i]; j++) {
      if (add[j].kl != o->kl || memcmp(add[j].k, o->k, o->kl) != 0) continue;
      o = &add[j];
      used[j] = true;
    }
    sb_printf(&b, "%s%.*s:%.*s", b.len ? "," : "", (int)o->kl, o->k, (int)o->vl, o->v);
  }
  for (size_t j = 0; j < nadd; j++)
    if (!used[j])
      sb_printf(&b, "%s%.*s:%.*s", b.len ? "," : "", (int)add[j].kl, add[j].k, (int)add[j].vl,
                add[j].v);
  *out = sb_take(&b, NULL);
  return *out ? 0 : VF_ENOMEM;
}

/* One NAME=VALUE assignment found on a line. */
struct assign {
  int name;          /* index in names */
  size_t vstart, vend; /* the value token, quotes included */
  char quote;        /* '"', '\'' or 0 */
};

static size_t line_end(const char *s, size_t len, size_t ls) {
  const char *lf = memchr(s + ls, '\n', len - ls);
  return lf ? (size_t)(lf - s) : len;
}

/* Where a line's NAME starts: after blanks and an `export` keyword. */
static size_t line_body(const char *s, size_t ls, size_t le, bool *exported) {
  size_t p = ls;
  while (p < le && (s[p] == ' ' || s[p] == '\t')) p++;
  *exported = le - p > 7 && memcmp(s + p, "export", 6) == 0 && (s[p + 6] == ' ' || s[p + 6] == '\t');
  if (*exported)
    for (p += 6; p < le && (s[p] == ' ' || s[p] == '\t'); p++) {}
  return p;
}

/* The end of the value token at p (quotes included); *quote gets its quote, or 0. */
static size_t value_end(const char *s, size_t p, size_t le, char *quote) {
  *quote = p < le && (s[p] == '"' || s[p] == '\'') ? s[p] : 0;
  if (!*quote) {
    while (p < le && !strchr(" \t;#\r", s[p])) p++;
    return p;
  }
  for (p++; p < le && s[p] != *quote; p++)
    if (s[p] == '\\' && *quote == '"') p++;
  return p < le ? p + 1 : le;
}

static bool find_assign(const char *s, size_t ls, size_t le, struct assign *a) {
  bool exported;
  size_t p = line_body(s, ls, le, &exported);
  for (a->name = 0; a->name < N_NAMES; a->name++) {
    size_t n = strlen(names[a->name]);
    if (le - p > n && memcmp(s + p, names[a->name], n) == 0 && s[p + n] == '=') break;
  }
  if (a->name == N_NAMES) return false;
  a->vstart = p + strlen(names[a->name]) + 1;
  a->vend = value_end(s, a->vstart, le, &a->quote);
  return true;
}

#define CONF_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:,.+-"

/* Brackets and '>' (roundup_power2_divisions) mean globbing and redirection unquoted. */
static bool bare_safe(const char *v) { return *v && strspn(v, CONF_CHARS) == strlen(v); }

static void put_token(struct sbuf *b, const char *v, char quote) {
  if (!quote && bare_safe(v)) {
    sb_puts(b, v);
    return;
  }
  char q = quote ? quote : '"';
  sb_printf(b, "%c%s%c", q, v, q);
}

static char *token_value(const char *s, const struct assign *a) {
  size_t from = a->vstart + (a->quote != 0);
  size_t to = a->quote && a->vend > from && s[a->vend - 1] == a->quote ? a->vend - 1 : a->vend;
  return bytes_dup(s + from, to - from);
}

static void line_of(const char *s, size_t at, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < at; i++) {
    if (s[i] == '\n') ++*line, *col = 1;
    else *col += ((unsigned char)s[i] & 0xC0) != 0x80;
  }
}

static int add_change(struct vf_edited *res, const char *s, int name, size_t at, const char *old,
                      const char *now, bool created) {
  struct vf_change *grown = realloc(res->changes, (res->n_changes + 1) * sizeof *grown);
  if (!grown) return VF_ENOMEM;
  res->changes = grown;
  struct vf_change *c = &grown[res->n_changes++];
  memset(c, 0, sizeof *c);
  line_of(s, at, &c->line, &c->col);
  c->created = created;
  c->key = strdup(names[name]);
  c->path = strdup(names[name]);
  c->old_text = strdup(old);
  c->new_text = strdup(now);
  return c->key && c->path && c->old_text && c->new_text ? 0 : VF_ENOMEM;
}

struct scan {
  const char *file, *s;
  size_t len;
  const struct opt *add;
  size_t nadd;
};

/* Calls fn for every assignment of either name, line by line. */
static int each_assign(const struct scan *sc, int (*fn)(const struct scan *, const struct assign *, void *),
                       void *arg) {
  for (size_t ls = 0, le; ls < sc->len; ls = le + 1) {
    le = line_end(sc->s, sc->len, ls);
    struct assign a;
    if (!find_assign(sc->s, ls, le, &a)) continue;
    int rc = fn(sc, &a, arg);
    if (rc) return rc;
  }
  return 0;
}

struct rewrite {
  struct sbuf out;
  size_t cursor;
  bool seen[N_NAMES];
  char *first; /* the first assignment's new value: a missing name gets the same */
  struct vf_edited *res;
  struct vf_diag *d;
};

static int rewrite_one(const struct scan *sc, const struct assign *a, void *arg) {
  struct rewrite *w = arg;
  w->seen[a->name] = true;
  char *old = token_value(sc->s, a);
  if (!old) return VF_ENOMEM;
  char *now = NULL;
  int rc = strpbrk(old, "$`") ? VF_EINVAL : merge_opts(old, sc->add, sc->nadd, &now);
  if (rc == VF_EINVAL) {
    int line, col;
    line_of(sc->s, a->vstart, &line, &col);
    diag_line(w->d, rc, sc->file, line, col,
              "%s is set to '%s', which apply cannot merge into; edit it by hand",
              names[a->name], old);
  }
  if (!rc && !w->first && !(w->first = strdup(now))) rc = VF_ENOMEM;
  if (!rc && strcmp(now, old) != 0) {
    sb_add(&w->out, sc->s + w->cursor, a->vstart - w->cursor);
    size_t at = w->out.len;
    put_token(&w->out, now, a->quote);
    char *tok = bytes_dup(w->out.p + at, w->out.len - at);
    char *was = bytes_dup(sc->s + a->vstart, a->vend - a->vstart);
    rc = tok && was ? add_change(w->res, sc->s, a->name, a->vstart, was, tok, false) : VF_ENOMEM;
    free(tok);
    free(was);
    w->cursor = a->vend;
  }
  free(old);
  free(now);
  return rc;
}

/* New lines follow the file: `export NAME=V` in a shell script, bare NAME=V in an env file
 * (docker's --env-file takes no export), export in a new file. */
static bool prefers_export(const char *s, size_t len) {
  bool bare = false, exported;
  for (size_t ls = 0, le; ls < len; ls = le + 1) {
    le = line_end(s, len, ls);
    size_t p = line_body(s, ls, le, &exported);
    if (exported) return true;
    size_t n = strspn(s + p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
    bare |= n > 0 && p + n < le && s[p + n] == '=';
  }
  return !bare;
}

static size_t name_len(const char *s, size_t p, size_t le) {
  size_t n = 0;
  for (unsigned char c; p + n < le && (c = (unsigned char)s[p + n], c == '_' || isalpha(c) || (n && isdigit(c)));) n++;
  return n;
}

enum line_kind { LINE_QUIET, LINE_SETTING, LINE_COMMAND };

/* Blank or a comment; only assignments (NAME=V ..., export NAME=V); or a line that runs a
 * command (an assignment in front of one included). */
static enum line_kind kind_of(const char *s, size_t ls, size_t le) {
  bool exported;
  size_t p = line_body(s, ls, le, &exported);
  if (p == le || s[p] == '#' || s[p] == '\r') return LINE_QUIET;
  while (p < le && s[p] != '#') {
    size_t n = name_len(s, p, le);
    char quote;
    if (!n || p + n >= le || s[p + n] != '=') return LINE_COMMAND;
    for (p = value_end(s, p + n + 1, le, &quote); p < le && strchr(" \t;\r", s[p]); p++) {}
  }
  return LINE_SETTING;
}

/* Where new lines go: in a launch script before its first command, so that the command
 * runs with them (after the assignments that lead up to it, else after a #! line); at the
 * end of an env file. *script says which the file is. */
static size_t insert_at(const char *s, size_t len, bool *script) {
  size_t after_settings = SIZE_MAX, after_shebang = 0;
  for (size_t ls = 0, le; ls < len; ls = le + 1) {
    le = line_end(s, len, ls);
    size_t next = le < len ? le + 1 : len;
    enum line_kind k = kind_of(s, ls, le);
    if (k == LINE_COMMAND) {
      *script = true;
      return after_settings != SIZE_MAX ? after_settings : after_shebang;
    }
    if (k == LINE_SETTING) after_settings = next;
    if (ls == 0 && le >= 2 && memcmp(s, "#!", 2) == 0) after_shebang = next;
  }
  *script = false;
  return len;
}

/* Adds the names the file lacks, on lines of their own (w->out holds the whole rewritten
 * file); a line that was below them moves down in the changes already listed. */
static int add_missing(const struct scan *sc, struct rewrite *w, const char *value) {
  const char *lf = memchr(sc->s, '\n', sc->len);
  const char *eol = lf && lf > sc->s && lf[-1] == '\r' ? "\r\n" : "\n";
  bool script;
  size_t at = insert_at(w->out.p, w->out.len, &script);
  bool ends_open = at == w->out.len && at && w->out.p[at - 1] != '\n';
  bool exported = script || prefers_export(sc->s, sc->len);
  struct sbuf ins = {0};
  size_t starts[N_NAMES], added = 0;
  for (int i = 0; i < N_NAMES; i++) {
    if (w->seen[i]) continue;
    if (ends_open) sb_puts(&ins, eol);
    starts[added++] = ins.len;
    sb_printf(&ins, "%s%s=", exported ? "export " : "", names[i]);
    put_token(&ins, value, 0);
    if (!ends_open) sb_puts(&ins, eol);
  }
  int line, col;
  line_of(w->out.p, at, &line, &col);
  for (size_t c = 0; c < w->res->n_changes && at < w->out.len; c++)
    if (w->res->changes[c].line >= line) w->res->changes[c].line += (int)added;
  struct sbuf all = {0};
  sb_add(&all, w->out.p, at);
  sb_add(&all, ins.p, ins.len);
  sb_add(&all, w->out.p + at, w->out.len - at);
  sb_free(&ins);
  sb_free(&w->out);
  w->out = all;
  int rc = all.oom ? VF_ENOMEM : 0;
  for (size_t k = 0, i = 0; k < added && !rc; k++, i++) {
    while (w->seen[i]) i++;
    size_t from = at + starts[k], vat = from + strcspn(all.p + from, "=") + 1;
    char *tok = bytes_dup(all.p + vat, line_end(all.p, all.len, vat) - vat - (*eol == '\r' && !ends_open));
    rc = tok ? add_change(w->res, all.p, (int)i, from, "", tok, true) : VF_ENOMEM;
    free(tok);
  }
  return rc;
}

/* Re-reads the result: every assignment must already hold the options asked for. */
static int check_one(const struct scan *sc, const struct assign *a, void *arg) {
  int *count = arg;
  count[a->name]++;
  char *v = token_value(sc->s, a), *m = NULL;
  int rc = v ? merge_opts(v, sc->add, sc->nadd, &m) : VF_ENOMEM;
  if (!rc && strcmp(v, m) != 0) rc = VF_EFORMAT;
  free(v);
  free(m);
  return rc;
}

int vf_env_edit(const char *file, const char *text, size_t len, const char *alloc_conf,
                struct vf_edited *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  struct opt add[MAX_OPTS];
  size_t nadd;
  if (!alloc_conf || strspn(alloc_conf, CONF_CHARS "[]>") != strlen(alloc_conf) ||
      parse_opts(alloc_conf, strlen(alloc_conf), add, &nadd) || !nadd)
    return diag_at(d, VF_EINVAL, file, UINT64_MAX,
                   "'%s' is not an allocator setting (OPTION:VALUE,...)", alloc_conf ? alloc_conf : "");
  struct scan sc = {file, text, len, add, nadd};
  struct rewrite w = {.res = out, .d = d};
  int rc = each_assign(&sc, rewrite_one, &w);
  if (!rc) {
    sb_add(&w.out, text + w.cursor, len - w.cursor);
    rc = add_missing(&sc, &w, w.first ? w.first : alloc_conf);
  }
  free(w.first);
  char *now = rc ? NULL : sb_take(&w.out, &out->len);
  sb_free(&w.out);
  if (!rc && !now) rc = VF_ENOMEM;
  int count[N_NAMES] = {0};
  struct scan check = {file, now, out->len, add, nadd};
  if (!rc && (each_assign(&check, check_one, count) || !count[0] || !count[1]))
    rc = diag_at(d, VF_EFORMAT, file, UINT64_MAX, "cannot edit safely: the result does not read back");
  if (rc) {
    free(now);
    vf_edited_cleanup(out);
    return rc;
  }
  out->text = now;
  return 0;
}
