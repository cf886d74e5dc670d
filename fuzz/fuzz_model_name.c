/* libFuzzer target: a MODEL name that is no path (src/io/load.c), on any bytes: a Hub id
 * looked up in a Hub cache holding a sound model and the broken folders a cache can hold
 * (no refs/main, a ref that is no hash, a snapshot that is gone, a config never
 * downloaded), then the catalogue's names, Hub ids and aliases, and the closest names for a
 * miss. A name is read or refused with one line, never a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vramfit.h"

#define HASH "0123456789abcdef0123456789abcdef01234567"
#define MAX_NAME 4096

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char cache[] = "/tmp/vramfit-fuzz-hub-XXXXXX";

static void remove_cache(void) {
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", cache);
}

/* Creates cache/path's folders, then the file holding text (a link to target when text is
 * NULL). */
static void put(const char *path, const char *text, const char *target) {
  char full[512], cmd[600];
  snprintf(full, sizeof full, "%s/%s", cache, path);
  snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", full);
  if (system(cmd) != 0) abort();
  FILE *f = text ? fopen(full, "w") : NULL;
  if (text && (!f || fputs(text, f) < 0 || fclose(f) != 0)) abort();
  if (!text && symlink(target, full) != 0) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!mkdtemp(cache)) abort();
  atexit(remove_cache);
  put("models--org--sound/refs/main", HASH, NULL);
  put("models--org--sound/blobs/c0ffee",
      "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2, \"vocab_size\": 16, \"intermediate_size\": 16}", NULL);
  put("models--org--sound/snapshots/" HASH "/config.json", NULL, "../../blobs/c0ffee");
  put("models--org--no-refs/blobs/.keep", "", NULL);
  put("models--org--bad-ref/refs/main", "../../..\n", NULL);
  put("models--org--gone/refs/main", HASH "\n", NULL);
  put("models--Org--Dangling/refs/main", HASH, NULL);
  put("models--Org--Dangling/snapshots/" HASH "/config.json", NULL, "../../blobs/never");
  setenv("HF_HUB_CACHE", cache, 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char name[MAX_NAME + 1];
  if (size > MAX_NAME) return 0;
  memcpy(name, data, size);
  name[size] = '\0';
  struct stat st;
  if (stat(name, &st) == 0) return 0; /* a path is the file readers' input, fuzzed apart */
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_model_load(&m, name, &d);
  if (rc != 0 && (!d.msg[0] || strchr(d.msg, '\n') || strchr(d.file, '\n'))) abort();
  if (rc == 0 && (!m.name || !m.has_arch)) abort();
  vf_model_cleanup(&m);
  return 0;
}
