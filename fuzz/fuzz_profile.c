/* libFuzzer target: the framework profile reader (src/io/profile.c) on any bytes, as a
 * framework's file or as torch.json (the first byte says which; the second picks the
 * version asked for). A user's copy of data/ (VRAMFIT_DATA_DIR) can hold anything: it is
 * read into a profile or refused with one line naming the file, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/data.h"
#include "io/profile.h"

static const char *const specs[] = {"hf", "hf@4.16", "hf@2023-10", "hf@0.1", "hf@99"};
static const char *const torches[] = {NULL, "1.10", "2.13", "0.1"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  bool torch_file = data[0] & 1;
  const char *torch = torches[(data[0] >> 1) % (sizeof torches / sizeof *torches)];
  struct vf_framework_spec spec;
  if (vf_framework_spec_parse(specs[data[1] % (sizeof specs / sizeof *specs)], &spec, NULL)) abort();
  struct profile_texts t = {.framework_file = "frameworks/hf.json", .torch_file = "torch.json"};
  const char *shipped;
  size_t shipped_len;
  if (data_get(torch_file ? t.framework_file : t.torch_file, &shipped, &shipped_len)) abort();
  if (torch_file) t.framework = shipped, t.framework_len = shipped_len;
  else t.torch = shipped, t.torch_len = shipped_len;
  if (torch_file) t.torch = (const char *)data + 2, t.torch_len = size - 2;
  else t.framework = (const char *)data + 2, t.framework_len = size - 2;
  struct vf_profile p;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = profile_parse(&spec, torch, &t, &p, &d);
  data_release(shipped);
  if (rc == 0 && (!p.release[0] || !p.torch[0] || !p.date[0])) abort();
  /* A refusal is one line naming one of the two files. */
  if (rc != 0 && (!d.msg[0] || strchr(d.msg, '\n') ||
                  (strcmp(d.file, t.framework_file) != 0 && strcmp(d.file, t.torch_file) != 0)))
    abort();
  return 0;
}
