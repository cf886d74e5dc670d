/* Opening a config file as a document: JSON when it looks like JSON, else YAML, into the
 * node tree of doc_tree.c. */
#include <stdlib.h>
#include <string.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "base/json_util.h"
#include "io/doc.h"

static bool looks_json(const char *file, const char *text, size_t len) {
  size_t i = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  while (i < len && strchr(" \t\r\n", text[i])) i++;
  return str_ends_with(file, ".json") || (i < len && (text[i] == '{' || text[i] == '['));
}

int doc_open(struct doc *doc, const char *file, const char *text, size_t len, struct vf_diag *d) {
  memset(doc, 0, sizeof *doc);
  /* Settings kept in code (guides' config/config.py) would read as broken YAML: say what
   * the file is instead. */
  if (str_ends_with(file, ".py"))
    return diag_line(d, VF_EUNSUPPORTED, file, 1, 1, "a Python file, not a YAML or JSON config: its settings are "
                     "code; set them there by hand, or in a config file the script reads");
  doc->file = strdup(file);
  if (!doc->file) return VF_ENOMEM;
  bool json = false;
  if (looks_json(file, text, len)) {
    size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    json_t *j = NULL;
    struct vf_diag jd;
    vf_diag_clear(&jd);
    int rc = parse_json_text(text + bom, len - bom, file, &j, &jd);
    json_decref(j);
    /* A flow-style YAML file also starts with '{': only a .json name insists on JSON. */
    if (rc && str_ends_with(file, ".json")) {
      if (d) *d = jd;
      doc_close(doc);
      return rc;
    }
    json = rc == 0;
  }
  int rc = ytree_parse(&doc->t, doc->file, text, len, json, d);
  if (rc) doc_close(doc);
  return rc;
}

void doc_close(struct doc *doc) {
  ytree_free(&doc->t);
  free(doc->file);
  doc->file = NULL;
}
