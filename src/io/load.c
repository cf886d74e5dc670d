/* MODEL argument → model description: config files, folders and checkpoints, models of the
 * local Hugging Face Hub cache, catalogue names, Hub ids and aliases, in that order (the
 * user's own files before what vramfit ships). A checkpoint's real tensors win over what
 * its config implies. Never the network. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/closest.h"
#include "base/diag.h"
#include "base/fileio.h"
#include "io/catalog.h"
#include "io/data.h"
#include "io/hub.h"
#include "vramfit.h"

#define MAX_CONFIG_BYTES (16u << 20)

static int set_names(struct vf_model *m, const char *name, const char *source) {
  free(m->name);
  free(m->source);
  m->name = strdup(name);
  m->source = strdup(source);
  return (m->name && m->source) ? 0 : VF_ENOMEM;
}

static int load_config_file(struct vf_model *m, const char *path, struct vf_diag *d) {
  char *text;
  size_t len;
  int rc = file_read(path, MAX_CONFIG_BYTES, &text, &len, d);
  if (rc) return rc;
  rc = vf_model_from_config_json(m, text, len, path, d);
  free(text);
  return rc;
}

/* Reads the checkpoint at path with reader and makes its tensors the model's. */
static int merge_checkpoint(struct vf_model *m, const char *path,
                            int (*reader)(struct vf_model *, const char *, struct vf_diag *),
                            struct vf_diag *d) {
  struct vf_model ck;
  vf_model_init(&ck);
  int rc = reader(&ck, path, d);
  if (!rc && !(ck.source = strdup(path))) rc = VF_ENOMEM;
  if (!rc) {
    if (m->has_arch) {
      rc = vf_model_adopt_checkpoint(m, &ck);
    } else {
      /* No config: the checkpoint (a GGUF carries its own) is all there is. */
      char *name = m->name;
      m->name = NULL;
      vf_model_cleanup(m);
      *m = ck;
      vf_model_init(&ck);
      m->name = name;
    }
  }
  vf_model_cleanup(&ck);
  return rc;
}

static int safetensors_files(struct vf_model *m, const char *dir, struct vf_diag *d);

/* A folder: config.json, then model.safetensors.index.json, *.safetensors or one *.gguf. */
static int load_dir(struct vf_model *m, const char *dir, struct vf_diag *d) {
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  int rc = 0;
  if (path_is_file(path) && (rc = load_config_file(m, path, d))) return rc;
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  if (path_is_file(path)) return merge_checkpoint(m, path, vf_safetensors_index_read, d);
  struct vf_model ck;
  vf_model_init(&ck);
  rc = safetensors_files(&ck, dir, d);
  if (!rc && ck.n_tensors) {
    if (!(ck.source = strdup(dir))) rc = VF_ENOMEM;
    else if (m->has_arch) rc = vf_model_adopt_checkpoint(m, &ck);
    else {
      vf_model_cleanup(m);
      *m = ck;
      vf_model_init(&ck);
    }
  }
  vf_model_cleanup(&ck);
  if (rc) return rc;
  if (!m->has_arch && !m->n_tensors)
    return diag_at(d, VF_ENOTFOUND, dir, UINT64_MAX,
                   "no config.json, *.safetensors or model.safetensors.index.json here");
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads every *.safetensors in dir, in name order, into m. */
static int safetensors_files(struct vf_model *m, const char *dir, struct vf_diag *d) {
  DIR *dh = opendir(dir);
  if (!dh) return diag_at(d, VF_EIO, dir, UINT64_MAX, "cannot open folder");
  char **files = NULL;
  size_t n = 0;
  int rc = 0;
  for (struct dirent *e; (e = readdir(dh)) && !rc;) {
    if (!str_ends_with(e->d_name, ".safetensors")) continue;
    char **grown = realloc(files, (n + 1) * sizeof *files);
    if (!grown || !(grown[n] = malloc(strlen(dir) + strlen(e->d_name) + 2))) {
      files = grown ? grown : files;
      rc = VF_ENOMEM;
      break;
    }
    files = grown;
    sprintf(files[n++], "%s/%s", dir, e->d_name);
  }
  closedir(dh);
  if (!rc && n) qsort(files, n, sizeof *files, cmp_str); /* files is NULL when n is 0 */
  for (size_t i = 0; i < n && !rc; i++) rc = vf_safetensors_read(m, files[i], d);
  for (size_t i = 0; i < n; i++) free(files[i]);
  free(files);
  return rc;
}

/* A checkpoint file: its folder's config.json describes it when there is one. */
static int load_checkpoint_file(struct vf_model *m, const char *path,
                                int (*reader)(struct vf_model *, const char *, struct vf_diag *),
                                struct vf_diag *d) {
  char config[4096];
  snprintf(config, sizeof config, "%s", path);
  char *slash = strrchr(config, '/');
  snprintf(slash ? slash + 1 : config, sizeof config - (size_t)(slash ? slash + 1 - config : 0),
           "config.json");
  int rc;
  if (reader != vf_gguf_read && path_is_file(config) && (rc = load_config_file(m, config, d)))
    return rc;
  return merge_checkpoint(m, path, reader, d);
}

static int load_path(struct vf_model *m, const char *arg, struct vf_diag *d) {
  if (path_is_dir(arg)) return load_dir(m, arg, d);
  if (str_ends_with(arg, ".gguf")) return load_checkpoint_file(m, arg, vf_gguf_read, d);
  if (str_ends_with(arg, ".safetensors"))
    return load_checkpoint_file(m, arg, vf_safetensors_read, d);
  if (str_ends_with(arg, ".safetensors.index.json"))
    return load_checkpoint_file(m, arg, vf_safetensors_index_read, d);
  if (str_ends_with(arg, ".json")) return load_config_file(m, arg, d);
  if (str_ends_with(arg, ".yaml") || str_ends_with(arg, ".yml"))
    return diag_at(d, VF_EUNSUPPORTED, arg, UINT64_MAX,
                   "model spec files are not supported yet; give a config.json");
  return diag_at(d, VF_EUNSUPPORTED, arg, UINT64_MAX,
                 "unrecognised model file (expected .json, .safetensors or .gguf)");
}

/* Names a model read: name as given; the source is what it was read from, or where. */
static int name_model(struct vf_model *m, const char *name, const char *where) {
  if (!m->source) return set_names(m, name, where);
  free(m->name);
  return (m->name = strdup(name)) ? 0 : VF_ENOMEM;
}

/* A model of the Hub cache: the snapshot refs/main names, read as a folder. A snapshot's
 * files link into blobs/, and a blob that is not there (a download of config.json alone,
 * a cache cleaned by hand) leaves the config. */
static int load_hub(struct vf_model *m, const struct hub_model *h, struct vf_diag *d) {
  char snap[HUB_PATH_MAX], config[HUB_PATH_MAX + 16];
  int rc = hub_snapshot(h, snap, sizeof snap, d);
  if (rc) return rc;
  rc = load_dir(m, snap, d);
  if (rc == VF_EIO && m->has_arch) { /* load_dir reads the config first: a checkpoint failed */
    vf_diag_clear(d);
    rc = 0;
  }
  snprintf(config, sizeof config, "%s/config.json", snap);
  if (rc && !m->has_arch && !path_is_file(config))
    return diag_at(d, VF_ENOTFOUND, snap, UINT64_MAX,
                   "this Hub cache snapshot has no config.json; " HUB_GET_CONFIG, h->id);
  return rc ? rc : name_model(m, h->id, snap);
}

/* A catalogue entry by its name (lower case); VF_ENOTFOUND when there is none. */
static int load_entry(struct vf_model *m, const char *name, struct vf_diag *d) {
  char path[160];
  const char *text;
  size_t len;
  if (snprintf(path, sizeof path, "models/%s.json", name) >= (int)sizeof path ||
      data_get(path, &text, &len) != 0)
    return VF_ENOTFOUND;
  int rc = vf_model_from_config_json(m, text, len, path, d);
  data_release(text);
  return rc ? rc : set_names(m, name, "catalogue");
}

#define UNKNOWN "unknown model '%.200s': no such file, "

static int unknown_model(const struct vf_catalog *c, const char *arg, struct vf_diag *d) {
  char list[CLOSEST_SHOWN * (CLOSEST_NAME + 2)];
  size_t n = catalog_suggest(c, arg, list, sizeof list);
  if (hub_id_valid(arg)) {
    char cache[HUB_PATH_MAX];
    hub_cache_dir(cache, sizeof cache);
    return diag_at(d, VF_ENOTFOUND, NULL, UINT64_MAX,
                   UNKNOWN "not in the Hub cache (%s) and not in the catalogue; " HUB_GET_CONFIG
                   ", or name a catalogue model%s%s%s",
                   arg, cache[0] ? cache : "none: no HF_HUB_CACHE, HF_HOME or HOME", arg,
                   n ? ": did you mean " : " ('vramfit models' lists them)", list, n ? "?" : "");
  }
  return diag_at(d, VF_ENOTFOUND, NULL, UINT64_MAX,
                 UNKNOWN "and not in the catalogue%s%s%s ('vramfit models' lists it)", arg,
                 n ? "; did you mean " : "", list, n ? "?" : "");
}

/* A catalogue name is its own file, so that the common case stays one look-up; Hub ids and
 * aliases are found in the catalogue's index. */
static int load_catalog(struct vf_model *m, const char *arg, struct vf_diag *d) {
  char lower[128];
  size_t n = strlen(arg);
  if (n && n < sizeof lower && !strchr(arg, '/')) {
    for (size_t i = 0; i <= n; i++) lower[i] = (char)tolower((unsigned char)arg[i]);
    int rc = load_entry(m, lower, d);
    if (rc != VF_ENOTFOUND) return rc;
  }
  struct vf_catalog c;
  vf_catalog_init(&c);
  int rc = vf_catalog_load(&c, d);
  if (!rc) {
    const struct vf_catalog_entry *e = catalog_find(&c, arg);
    rc = e ? load_entry(m, e->name, d) : unknown_model(&c, arg, d);
  }
  vf_catalog_cleanup(&c);
  return rc;
}

int vf_model_load(struct vf_model *m, const char *arg, struct vf_diag *d) {
  vf_diag_clear(d);
  if (path_is_dir(arg) || path_is_file(arg)) {
    int rc = load_path(m, arg, d);
    return rc ? rc : name_model(m, arg, arg);
  }
  struct hub_model h;
  if (hub_find(arg, &h)) return load_hub(m, &h, d);
  return load_catalog(m, arg, d);
}
