/* Reading the user's own training configs (HF TrainingArguments and TRL, axolotl,
 * LLaMA-Factory, torchtune, litgpt, Lightning, Hydra; DeepSpeed and accelerate configs
 * beside them) into the setup they describe, as the command-line options would spell it.
 *
 * Each value keeps its place (file, line, key), so that a caller can say where it came
 * from, refuse a bad one naming that place, and write a plan back into the same key
 * (`vramfit apply`, which reads the files through the same format maps). */
#ifndef VRAMFIT_CONFIG_H
#define VRAMFIT_CONFIG_H

#include <stddef.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

/* One setting read. name is the setup's name in the contract ("batch", "lora_r", "model");
 * the option that takes it is "--" and the name with '-' for '_' ("--lora-r"), except
 * "model", the MODEL argument. */
struct vf_config_setting {
  char *name;
  char *value; /* as the option takes it: "4", "bf16", "q,v,o", a model name or path */
  char *file;  /* the config it was read from */
  int line;    /* 1-based line of the value; 0: the tool's default for a key the file lacks */
  char *key;   /* the key path that holds it, or would ("per_device_train_batch_size") */
};

/* Something a config says that the setup cannot express: the file's value and why. The
 * caller says what the estimate assumed instead. */
struct vf_config_warning {
  char *name; /* the setting it concerns, or NULL */
  char *file;
  int line;
  char *key;
  char *text; /* the value as the file has it ("galore_adamw") */
  char *why;  /* "is not an optimizer vramfit models" */
};

/* A file read, with the tool whose format map read it. */
struct vf_config_file {
  char *path;   /* as given, or as found beside the config that named it */
  char *format; /* "hf", "trl", "axolotl", "deepspeed", ... */
  char *why;    /* "--format", "its keys (micro_batch_size, sequence_len)", "deepspeed: in train.yaml" */
  char *writes; /* the settings `vramfit apply` can write into such a file, as its logical keys
                 * ("batch accumulation seq grad_ckpt precision optimizer") */
};

struct vf_config {
  struct vf_config_file *files;
  size_t n_files;
  struct vf_config_setting *settings; /* at most one per name */
  size_t n_settings;
  struct vf_config_warning *warnings;
  size_t n_warnings;
};

VF_API void vf_config_init(struct vf_config *c);
/* Whether path is a training config: a format map claims its keys (or format names one,
 * "auto" or NULL to detect). 1 yes, 0 no (a model's config.json, or a JSON that does not
 * parse: the model reader says why); a YAML file that no map claims is VF_EUNSUPPORTED and
 * one that does not parse VF_EFORMAT, with d naming the place. */
VF_API int vf_config_detect(const char *path, const char *format, struct vf_diag *d);
/* Reads the configs in order (the first is the main one; format, unless "auto" or NULL,
 * is its tool) and the configs they name (a `deepspeed:` JSON, a Hydra defaults list). A
 * value in an earlier file wins over a later file's, and any file's over a tool's
 * default; two files that disagree get a warning. VF_EFORMAT for a config that does not
 * parse, VF_EUNSUPPORTED for one no map claims, VF_ENOTFOUND for a config named but
 * missing; d names the file and line. */
VF_API int vf_config_read(struct vf_config *c, const char *const *paths, size_t n, const char *format,
                          struct vf_diag *d);
/* The setting of that name, or NULL. */
VF_API const struct vf_config_setting *vf_config_get(const struct vf_config *c, const char *name);
VF_API void vf_config_cleanup(struct vf_config *c);

#endif
