/* Hugging Face Hub ids and the local Hub cache, read without network: the folder
 * models--ORG--NAME/ holds refs/main (the hash of the snapshot the main branch names) and
 * snapshots/<hash>/, whose files link into blobs/ (huggingface_hub's file_download.py). */
#ifndef VF_IO_HUB_H
#define VF_IO_HUB_H

#include <stdbool.h>
#include <stddef.h>

#include "vramfit/error.h"

#define HUB_PART_MAX 96 /* the Hub's longest organisation or repository name */
#define HUB_ID_MAX (2 * HUB_PART_MAX + 2)
#define HUB_PATH_MAX 4096

/* How a user gets what a message says is missing, with the Hub id as argument. */
#define HUB_GET_CONFIG "get it with 'huggingface-cli download %s config.json'"

/* A repository name (or organisation) as the Hub allows them: letters, digits, '-', '_',
 * '.', at most HUB_PART_MAX, neither starting nor ending with '-' or '.', without "--" or
 * ".." (so that it is never a relative path, and the cache's folder name reads back). */
bool hub_name_valid(const char *s, size_t len);
/* ORG/NAME, both parts valid. */
bool hub_id_valid(const char *id);

/* The Hub cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $HOME/.cache/huggingface/hub; "" when none of them is set. */
void hub_cache_dir(char *out, size_t size);

/* A model the Hub cache holds: its folder, and its id as the cache spells it. */
struct hub_model {
  char folder[HUB_PATH_MAX];
  char id[HUB_ID_MAX];
};

/* Whether the cache has a folder for the Hub id (its case ignored, as the Hub does; the
 * first in byte order when the cache holds several spellings). */
bool hub_find(const char *id, struct hub_model *out);

/* The snapshot folder refs/main names. VF_ENOTFOUND when refs/main or the snapshot is
 * missing, VF_EFORMAT when refs/main holds no hash; d names the file and what to run. */
int hub_snapshot(const struct hub_model *h, char *dir, size_t size, struct vf_diag *d);

#endif
