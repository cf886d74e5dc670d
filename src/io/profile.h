/* Reading framework profiles: from the data files, or from texts in memory, which is what
 * vf_profile_load() does once it has read data/frameworks/<name>.json and data/torch.json
 * (the fuzz target feeds it any bytes). */
#ifndef VF_IO_PROFILE_H
#define VF_IO_PROFILE_H

#include <stddef.h>

#include "core/profile.h"

struct profile_texts {
  const char *framework, *torch; /* the two files' contents */
  size_t framework_len, torch_len;
  const char *framework_file, *torch_file; /* their names in messages */
};

/* The profile of spec's release (the newest without a version) under the PyTorch release
 * torch (NULL or "": the one that release names). 0, VF_EINVAL or VF_EFORMAT with d filled. */
int profile_parse(const struct vf_framework_spec *spec, const char *torch, const struct profile_texts *t,
                  struct vf_profile *p, struct vf_diag *d);

/* vf_profile_load() into a profile the caller holds (the library's own callers and the tests
 * keep profiles by value). */
int profile_read(const char *framework, const char *torch, struct vf_profile *p, struct vf_diag *d);

#endif
