#include "base/json_util.h"

#include "base/diag.h"

int parse_json_text(const char *text, size_t len, const char *file, json_t **out, struct vf_diag *d) {
  json_error_t err;
  /* JSON_ALLOW_NUL: a NUL inside the text is reported as an error with its position. */
  json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
  if (!v) {
    int line = err.line > 0 ? err.line : 1, col = err.column > 0 ? err.column : 1;
    return diag_line(d, VF_EFORMAT, file, line, col, "invalid JSON: %s", err.text);
  }
  *out = v;
  return 0;
}
