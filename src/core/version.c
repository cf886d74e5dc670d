#include "core/version.h"

#include <ctype.h>
#include <string.h>

#include "base/diag.h"
#include "core/profile.h"
#include "vramfit.h"

/* Digits only, 1 to max of them; the value in *out, the end in *end. */
static bool number(const char *s, int max, uint32_t *out, const char **end) {
  uint32_t v = 0;
  int n = 0;
  for (; s[n] >= '0' && s[n] <= '9'; n++) {
    if (n == max) return false;
    v = v * 10 + (uint32_t)(s[n] - '0');
  }
  *out = v;
  *end = s + n;
  return n > 0;
}

int version_release_parse(const char *text, struct version *v) {
  memset(v, 0, sizeof *v);
  const char *s = text;
  for (int i = 0; i < VF_VERSION_PARTS; i++) {
    if (!number(s, 6, &v->part[i], &s)) return VF_EINVAL;
    if (*s == '\0') return 0;
    if (*s++ != '.') return VF_EINVAL;
  }
  return VF_EINVAL; /* more parts than a release has, or a trailing dot */
}

int version_month_parse(const char *text, struct version *v) {
  memset(v, 0, sizeof *v);
  v->month = true;
  const char *s = text;
  if (!number(s, 4, &v->part[0], &s) || s != text + 4 || *s++ != '-') return VF_EINVAL;
  if (!number(s, 2, &v->part[1], &s) || s != text + 7 || *s) return VF_EINVAL;
  return v->part[0] >= 1900 && v->part[1] >= 1 && v->part[1] <= 12 ? 0 : VF_EINVAL;
}

int version_parse(const char *text, struct version *v) {
  return strchr(text, '-') ? version_month_parse(text, v) : version_release_parse(text, v);
}

int version_compare(const struct version *a, const struct version *b) {
  for (int i = 0; i < VF_VERSION_PARTS; i++)
    if (a->part[i] != b->part[i]) return a->part[i] < b->part[i] ? -1 : 1;
  return 0;
}

int vf_framework_spec_parse(const char *text, struct vf_framework_spec *out, struct vf_diag *d) {
  memset(out, 0, sizeof *out);
  const char *at = strchr(text, '@');
  size_t n = at ? (size_t)(at - text) : strlen(text);
  /* The name names a data file: letters, digits, '-' and '_' only. */
  bool named = n > 0 && n < sizeof out->name;
  for (size_t i = 0; named && i < n; i++)
    named = isalnum((unsigned char)text[i]) || text[i] == '-' || text[i] == '_';
  if (!named) return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "unknown framework '%.*s'", (int)n, text);
  memcpy(out->name, text, n);
  if (!at) return 0;
  struct version v;
  if (strlen(at + 1) >= sizeof out->version || version_parse(at + 1, &v))
    return diag_at(d, VF_EINVAL, NULL, UINT64_MAX,
                   "'%s': the version after '@' is a release (4.46) or a month (2023-10)", text);
  memcpy(out->version, at + 1, strlen(at + 1));
  return 0;
}

int vf_torch_release_check(const char *text, struct vf_diag *d) {
  struct version v;
  if (strlen(text) < sizeof ((struct vf_profile *)0)->torch && version_release_parse(text, &v) == 0) return 0;
  return diag_at(d, VF_EINVAL, NULL, UINT64_MAX, "'%s' is not a PyTorch release like 2.1", text);
}
