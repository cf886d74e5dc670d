/* The user's own training configs as MODEL (estimate, plan, trace): the positional
 * arguments sorted into the model and the configs, the configs' settings taken through the
 * same option parser as the command line's (which wins over them), each with its place. */
#ifndef VF_CLI_SETUP_CONFIG_H
#define VF_CLI_SETUP_CONFIG_H

#include "cli/setup_opts.h"

struct setup_config {
  struct vf_config cfg;  /* empty when MODEL is a model */
  char **where;          /* "FILE:LINE" of each setting, which r->read_from points into */
  const char *model;     /* the model to load: the MODEL argument, else the one a config names */
  const char **files;    /* the configs given */
  size_t n_files;
};

/* Sorts args (the positional arguments) into at most one model and the training configs
 * (those a format map claims, or --format names), reads the configs and sets r's values
 * from them where the command line left them. Returns an exit code, the error printed
 * (a config's place, file:line, when one is at fault); on EXIT_OK release sc with
 * setup_config_cleanup(). */
int setup_config_read(struct setup_request *r, char *const *args, int n, struct setup_config *sc);
void setup_config_cleanup(struct setup_config *sc);
/* Whether MODEL came with training configs. */
bool setup_config_any(const struct setup_config *sc);

/* On stderr, what the configs say that the setup cannot express, each with the value the
 * estimate used instead (c: the loaded context). */
void setup_config_warn(const struct setup_request *r, const struct setup_context *c, const struct setup_config *sc);
/* "read from train.yaml (trl): model qwen2.5-7b (line 3), batch 4 (11), ...": a line per
 * config that gave a value the setup uses. */
void setup_config_print(const struct setup_request *r, const struct setup_context *c, const struct setup_config *sc);
/* The warnings as sentences, for --json ("warnings"). */
json_t *setup_config_warnings_json(const struct setup_request *r, const struct setup_context *c,
                                   const struct setup_config *sc);
/* Writes plan (`plan --json`'s object, with "read_from") into the configs the setup was read
 * from, as `vramfit apply --plan` would (a key the configs left to a default is added where
 * only one of them can hold it):
 * the diffs on stdout and what was written on stderr, or, with json, into *written.
 * Returns an exit code, the error printed. */
int setup_config_write(const struct setup_request *r, const struct setup_config *sc, const json_t *plan, bool json,
                       json_t **written);
/* The knobs (vf_keep_parse bits) a plan of the configs must keep as they are: those whose
 * values vramfit could not model, and those apply cannot write into these configs (a plan
 * of a config is written back into it). 0 without configs. */
uint32_t setup_config_keep(const struct setup_config *sc);

#endif
