/* Scalar typing: what the loaders of the ecosystem (PyYAML, OmegaConf, jsonargparse, json)
 * read from a node, and values as typed on the command line or in a format map. Writing
 * values back is the editor's (src/edit/render.c), on the words and numbers defined here. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/doc.h"

static const char *const bool_words[] = {"yes", "no", "true", "false", "on", "off"};

int value_bool_word(const char *s) {
  for (size_t i = 0; i < sizeof bool_words / sizeof *bool_words; i++)
    if (strcasecmp(s, bool_words[i]) == 0) return (int)(i % 2 == 0);
  return -1;
}

/* PyYAML's bool resolver takes yes/true/on in lower, Capitalised or UPPER case only. */
static bool yaml11_bool(const char *s) {
  if (value_bool_word(s) < 0) return false;
  bool upper = true, lower = true;
  for (const char *p = s + 1; *p; p++) {
    upper &= *p >= 'A' && *p <= 'Z';
    lower &= *p >= 'a' && *p <= 'z';
  }
  return upper || lower;
}

static bool is_null_word(const char *s) {
  return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0;
}

static bool is_int_text(const char *s) {
  if (*s == '-' || *s == '+') s++;
  if (*s < '0' || *s > '9') return false;
  for (; *s; s++)
    if ((*s < '0' || *s > '9') && *s != '_') return false;
  return true;
}

static bool is_float_text(const char *s) {
  const char *t = s;
  if (*t == '-' || *t == '+') t++;
  if (strcmp(t, ".inf") == 0 || strcmp(t, ".Inf") == 0 || strcmp(t, ".INF") == 0) return true;
  if (strcmp(s, ".nan") == 0 || strcmp(s, ".NaN") == 0 || strcmp(s, ".NAN") == 0) return true;
  if (strspn(s, "0123456789.eE+-_") != strlen(s) || !strpbrk(s, "0123456789")) return false;
  char *end;
  errno = 0;
  strtod(s, &end);
  return *end == '\0' && end != s;
}

/* Whether PyYAML reads a float here too: it wants a dot and a signed exponent (1e-4 and
 * 1.0e4 are strings to it), and JSON wants no underscores. */
static bool pyyaml_float(const char *s) {
  const char *e = strpbrk(s, "eE");
  return strchr(s, '.') && !strchr(s, '_') && (!e || e[1] == '-' || e[1] == '+');
}

/* A whole number written the one way every loader reads alike (no underscores, no leading
 * zeros that YAML 1.1 takes as octal). */
static bool clean_int(const char *s, long long *out) {
  const char *d = *s == '-' || *s == '+' ? s + 1 : s;
  if (!*d || strspn(d, "0123456789") != strlen(d) || (d[0] == '0' && d[1])) return false;
  errno = 0;
  *out = strtoll(s, NULL, 10);
  return errno == 0;
}

static enum vf_value_kind tagged_type(const char *tag) {
  static const char prefix[] = "tag:yaml.org,2002:";
  if (strncmp(tag, prefix, sizeof prefix - 1) != 0) return VF_VALUE_STRING;
  const char *t = tag + sizeof prefix - 1;
  if (strcmp(t, "int") == 0) return VF_VALUE_INT;
  if (strcmp(t, "float") == 0) return VF_VALUE_FLOAT;
  if (strcmp(t, "bool") == 0) return VF_VALUE_BOOL;
  if (strcmp(t, "null") == 0) return VF_VALUE_NULL;
  return VF_VALUE_STRING;
}

enum vf_value_kind ynode_type(const struct ynode *n) {
  if (n->kind != YN_SCALAR) return VF_VALUE_STRING;
  if (n->tag) return tagged_type(n->tag);
  if (n->style != YAML_PLAIN_SCALAR_STYLE) return VF_VALUE_STRING;
  if (is_null_word(n->value)) return VF_VALUE_NULL;
  if (yaml11_bool(n->value)) return VF_VALUE_BOOL;
  if (is_int_text(n->value)) return VF_VALUE_INT;
  if (is_float_text(n->value)) return VF_VALUE_FLOAT;
  return VF_VALUE_STRING;
}

bool ynode_value(const struct ynode *n, struct vf_value *out) {
  memset(out, 0, sizeof *out);
  if (n->kind != YN_SCALAR) return false;
  out->kind = ynode_type(n);
  switch (out->kind) {
  case VF_VALUE_BOOL:
    out->b = value_bool_word(n->value) == 1;
    return true;
  case VF_VALUE_INT:
    if (clean_int(n->value, &out->i)) return true;
    out->kind = VF_VALUE_STRING;
    out->s = n->value;
    return true;
  case VF_VALUE_FLOAT:
    out->f = strtod(n->value, NULL);
    return true;
  case VF_VALUE_STRING:
    out->s = n->value;
    return true;
  case VF_VALUE_NULL:
    return true;
  }
  return false;
}

bool ynode_equals(const struct ynode *n, const struct vf_value *v) {
  /* A tagged value is the user's own business: never taken as already set. */
  if (n->kind != YN_SCALAR || n->tag) return false;
  enum vf_value_kind t = ynode_type(n);
  long long i;
  switch (v->kind) {
  case VF_VALUE_NULL:
    return t == VF_VALUE_NULL;
  case VF_VALUE_BOOL:
    return t == VF_VALUE_BOOL && value_bool_word(n->value) == !!v->b;
  case VF_VALUE_INT:
    return t == VF_VALUE_INT && clean_int(n->value, &i) && i == v->i;
  case VF_VALUE_FLOAT:
    if (t == VF_VALUE_INT) return clean_int(n->value, &i) && (double)i == v->f;
    return t == VF_VALUE_FLOAT && (n->json || pyyaml_float(n->value)) && strtod(n->value, NULL) == v->f;
  case VF_VALUE_STRING:
    return t == VF_VALUE_STRING && n->vlen == strlen(v->s) && memcmp(n->value, v->s, n->vlen) == 0;
  }
  return false;
}

int vf_value_parse(const char *text, struct vf_value *out) {
  memset(out, 0, sizeof *out);
  if (!text || !*text) return VF_EINVAL;
  const char *digits = text + (*text == '-');
  size_t len = strlen(text);
  if (*digits && strspn(digits, "0123456789") == strlen(digits)) {
    errno = 0;
    long long i = strtoll(text, NULL, 10);
    if (errno) return VF_ERANGE;
    *out = (struct vf_value){.kind = VF_VALUE_INT, .i = i};
  } else if (strspn(text, "0123456789.eE+-") == len && strpbrk(text, "0123456789") &&
             is_float_text(text)) {
    double f = strtod(text, NULL);
    if (!isfinite(f)) return VF_ERANGE;
    *out = (struct vf_value){.kind = VF_VALUE_FLOAT, .f = f};
  } else if (strcasecmp(text, "true") == 0 || strcasecmp(text, "false") == 0) {
    *out = (struct vf_value){.kind = VF_VALUE_BOOL, .b = strcasecmp(text, "true") == 0};
  } else if (strcasecmp(text, "null") == 0) {
    out->kind = VF_VALUE_NULL;
  } else {
    *out = (struct vf_value){.kind = VF_VALUE_STRING, .s = text};
  }
  return 0;
}

void value_format_float(char *buf, size_t size, double f) {
  for (int p = 1; p <= 17; p++) {
    snprintf(buf, size, "%.*g", p, f);
    if (strtod(buf, NULL) == f) break;
  }
  if (strchr(buf, '.')) return;
  char tail[32] = "";
  char *e = strchr(buf, 'e');
  if (e) {
    snprintf(tail, sizeof tail, "%s", e);
    *e = '\0';
  }
  size_t n = strlen(buf);
  snprintf(buf + n, size - n, ".0%s", tail);
}

char *value_to_text(const struct vf_value *v) {
  char buf[64];
  switch (v->kind) {
  case VF_VALUE_NULL:
    return strdup("null");
  case VF_VALUE_BOOL:
    return strdup(v->b ? "true" : "false");
  case VF_VALUE_INT:
    snprintf(buf, sizeof buf, "%lld", v->i);
    return strdup(buf);
  case VF_VALUE_FLOAT:
    value_format_float(buf, sizeof buf, v->f);
    return strdup(buf);
  case VF_VALUE_STRING:
    return strdup(v->s);
  }
  return NULL;
}

int value_from_json(const json_t *j, struct vf_value *out) {
  memset(out, 0, sizeof *out);
  if (json_is_boolean(j)) *out = (struct vf_value){.kind = VF_VALUE_BOOL, .b = json_is_true(j)};
  else if (json_is_integer(j)) *out = (struct vf_value){.kind = VF_VALUE_INT, .i = json_integer_value(j)};
  else if (json_is_real(j)) *out = (struct vf_value){.kind = VF_VALUE_FLOAT, .f = json_real_value(j)};
  else if (json_is_string(j)) *out = (struct vf_value){.kind = VF_VALUE_STRING, .s = json_string_value(j)};
  else if (json_is_null(j)) out->kind = VF_VALUE_NULL;
  else return VF_EINVAL;
  return 0;
}

bool value_same(const struct vf_value *a, const struct vf_value *b) {
  if (a->kind != b->kind) return false;
  switch (a->kind) {
  case VF_VALUE_NULL:
    return true;
  case VF_VALUE_BOOL:
    return !a->b == !b->b;
  case VF_VALUE_INT:
    return a->i == b->i;
  case VF_VALUE_FLOAT:
    return a->f == b->f;
  case VF_VALUE_STRING:
    return strcmp(a->s, b->s) == 0;
  }
  return false;
}
