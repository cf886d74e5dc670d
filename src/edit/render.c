/* Writing a value as text that every loader of the ecosystem reads back as that value, in
 * the style of the one it replaces (quoting, bool spelling); what counts as a bool word or
 * a float is the readers' (src/io/doc_value.c). */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "edit/internal.h"

/* A string a YAML loader reads back as that same string when written bare: no indicator,
 * nothing that resolves to a bool, null or number in YAML 1.1 or 1.2. */
static bool plain_safe(const char *s) {
  static const char first[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_/";
  static const char rest[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+@-";
  if (!*s || !strchr(first, *s) || strspn(s, rest) != strlen(s)) return false;
  return value_bool_word(s) < 0 && strcasecmp(s, "null") != 0 && strcasecmp(s, "y") != 0 &&
         strcasecmp(s, "n") != 0;
}

/* JSON string escapes, which YAML double-quoted scalars read the same. */
static void quote_double(struct sbuf *out, const char *s) {
  sb_puts(out, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char esc[2] = {'\\', (char)*p};
      sb_add(out, esc, 2);
    } else if (*p == '\n') {
      sb_puts(out, "\\n");
    } else if (*p == '\t') {
      sb_puts(out, "\\t");
    } else if (*p < 0x20 || *p == 0x7F) {
      sb_printf(out, "\\u%04x", *p);
    } else {
      sb_add(out, (const char *)p, 1);
    }
  }
  sb_puts(out, "\"");
}

static void quote_single(struct sbuf *out, const char *s) {
  sb_puts(out, "'");
  for (const char *p = s; *p; p++) {
    if (*p == '\'')
      sb_puts(out, "''");
    else
      sb_add(out, p, 1);
  }
  sb_puts(out, "'");
}

static bool has_control(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7F) return true;
  return false;
}

static void render_string(struct sbuf *out, const char *s, bool json, const struct ynode *old) {
  int style = old && old->kind == YN_SCALAR ? old->style : YAML_PLAIN_SCALAR_STYLE;
  if (json || style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
    quote_double(out, s);
  else if (style == YAML_SINGLE_QUOTED_SCALAR_STYLE && !has_control(s))
    quote_single(out, s);
  else if (plain_safe(s))
    sb_puts(out, s);
  else
    quote_double(out, s);
}

static const char *bool_spelling(bool v, bool json, const struct ynode *old,
                                 const struct ynode *style) {
  const struct ynode *t = old && ynode_type(old) == VF_VALUE_BOOL && !old->tag ? old : NULL;
  if (!t && style && ynode_type(style) == VF_VALUE_BOOL && !style->tag) t = style;
  if (json || !t || (t->value[0] >= 'a' && t->value[0] <= 'z')) return v ? "true" : "false";
  if (t->value[1] >= 'A' && t->value[1] <= 'Z') return v ? "TRUE" : "FALSE";
  return v ? "True" : "False";
}

int render_value(struct sbuf *out, const struct vf_value *v, bool json, const struct ynode *old,
                 const struct ynode *bool_style) {
  char num[64];
  switch (v->kind) {
  case VF_VALUE_NULL:
    sb_puts(out, "null");
    break;
  case VF_VALUE_BOOL:
    sb_puts(out, bool_spelling(v->b, json, old, bool_style));
    break;
  case VF_VALUE_INT:
    sb_printf(out, "%lld", v->i);
    break;
  case VF_VALUE_FLOAT:
    if (!isfinite(v->f)) return VF_EINVAL;
    value_format_float(num, sizeof num, v->f);
    sb_puts(out, num);
    break;
  case VF_VALUE_STRING:
    render_string(out, v->s, json, old);
    break;
  }
  return out->oom ? VF_ENOMEM : 0;
}

void render_key(struct sbuf *out, const char *key, bool json) {
  if (!json && plain_safe(key))
    sb_puts(out, key);
  else
    quote_double(out, key);
}
