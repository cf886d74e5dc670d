#include "io/hub.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/diag.h"
#include "base/fileio.h"

#define REFS_MAX 256 /* refs/main holds one commit hash */

bool hub_name_valid(const char *s, size_t len) {
  if (len == 0 || len > HUB_PART_MAX || strchr("-.", s[0]) || strchr("-.", s[len - 1]))
    return false;
  for (size_t i = 0; i < len; i++) {
    if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i])) return false;
    if (i && (s[i] == '-' || s[i] == '.') && s[i] == s[i - 1]) return false;
  }
  return true;
}

bool hub_id_valid(const char *id) {
  const char *slash = strchr(id, '/');
  return slash && hub_name_valid(id, (size_t)(slash - id)) &&
         hub_name_valid(slash + 1, strlen(slash + 1));
}

/* An environment variable, unless unset or empty. */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

void hub_cache_dir(char *out, size_t size) {
  const char *v;
  if ((v = env("HF_HUB_CACHE"))) snprintf(out, size, "%s", v);
  else if ((v = env("HF_HOME"))) snprintf(out, size, "%s/hub", v);
  else if ((v = env("HOME"))) snprintf(out, size, "%s/.cache/huggingface/hub", v);
  else out[0] = '\0';
}

/* The cache's folder name for a valid id, "models--ORG--NAME", into out. */
static void folder_name(const char *id, char *out, size_t size) {
  const char *slash = strchr(id, '/');
  snprintf(out, size, "models--%.*s--%s", (int)(slash - id), id, slash + 1);
}

/* Among the cache's folders, the first in byte order whose name is want ignoring case. */
static bool find_folder(const char *cache, const char *want, char *out, size_t size) {
  DIR *dh = opendir(cache);
  if (!dh) return false; /* no cache, or one this user cannot read: nothing is cached */
  out[0] = '\0';
  for (struct dirent *e; (e = readdir(dh));)
    if (strcasecmp(e->d_name, want) == 0 && (!out[0] || strcmp(e->d_name, out) < 0))
      snprintf(out, size, "%s", e->d_name);
  closedir(dh);
  return out[0] != '\0';
}

bool hub_find(const char *id, struct hub_model *out) {
  char cache[HUB_PATH_MAX], want[HUB_ID_MAX + 16], found[256]; /* a d_name */
  if (!hub_id_valid(id)) return false;
  hub_cache_dir(cache, sizeof cache);
  folder_name(id, want, sizeof want);
  if (!cache[0] || !find_folder(cache, want, found, sizeof found)) return false;
  int n = snprintf(out->folder, sizeof out->folder, "%s/%s", cache, found);
  if (n < 0 || (size_t)n >= sizeof out->folder || !path_is_dir(out->folder)) return false;
  /* The folder's name reads back as the id, '/' for the "--" after the organisation. */
  size_t org = (size_t)(strchr(id, '/') - id);
  snprintf(out->id, sizeof out->id, "%.*s/%s", (int)org, found + 8, found + 8 + org + 2);
  return true;
}

/* The commit hash in refs/main, without its line end, into out. */
static int read_ref(const char *refs, char *out, size_t size, struct vf_diag *d) {
  char *text;
  size_t len;
  int rc = file_read(refs, REFS_MAX, &text, &len, d);
  if (rc) return rc;
  while (len && isspace((unsigned char)text[len - 1])) len--;
  bool hex = len > 0 && len < size;
  for (size_t i = 0; hex && i < len; i++) hex = isxdigit((unsigned char)text[i]);
  if (hex) snprintf(out, size, "%.*s", (int)len, text);
  free(text);
  return hex ? 0 : diag_at(d, VF_EFORMAT, refs, UINT64_MAX, "not a commit hash");
}

int hub_snapshot(const struct hub_model *h, char *dir, size_t size, struct vf_diag *d) {
  char refs[HUB_PATH_MAX + 16], hash[REFS_MAX];
  snprintf(refs, sizeof refs, "%s/refs/main", h->folder);
  if (!path_is_file(refs))
    return diag_at(d, VF_ENOTFOUND, h->folder, UINT64_MAX,
                   "this Hub cache folder has no refs/main (no snapshot of the main branch); "
                   HUB_GET_CONFIG, h->id);
  int rc = read_ref(refs, hash, sizeof hash, d);
  if (rc) return rc;
  int n = snprintf(dir, size, "%s/snapshots/%s", h->folder, hash);
  if (n < 0 || (size_t)n >= size)
    return diag_at(d, VF_ERANGE, h->folder, UINT64_MAX, "path too long");
  if (!path_is_dir(dir))
    return diag_at(d, VF_ENOTFOUND, dir, UINT64_MAX,
                   "the snapshot refs/main names is not in the Hub cache; " HUB_GET_CONFIG,
                   h->id);
  return 0;
}
