/* The run history as the commands use it: probe and watch write their runs, estimate and plan
 * compare themselves with what was measured (and --calibrate to it), plan keeps its result
 * for doctor, and `vramfit history` lists it. None of this ever fails a command: a store that
 * cannot be read or written costs one warning line on stderr. */
#ifndef VF_CLI_HISTORY_CLI_H
#define VF_CLI_HISTORY_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "cli/setup_opts.h"

#define HISTORY_UTC "%Y-%m-%dT%H:%M:%SZ" /* when, in JSON */
#define HISTORY_LOCAL "%Y-%m-%d %H:%M"   /* when, for people */

/* when (seconds since 1970) as strftime's format puts it, in UTC or local time; "?" when it
 * cannot be. */
void history_stamp(double when, const char *format, bool utc, char *buf, size_t size);

/* argv as one line a shell would run the same way ("python3 train.py --name 'a b'"),
 * truncated with "..." to fit. */
void history_command_line(char *const argv[], char *buf, size_t size);

/* The store to write runs to, made when missing; NULL (after a warning naming cmd) when it
 * cannot be. Close with vf_history_close. */
struct vf_history *history_open_for_writing(const char *cmd);

/* Fills the run's GPU name, UUID and the driver: the GPU index gpu, else (gpu < 0) the one a
 * run started here gets. Nothing without NVML. */
void history_gpu(struct vf_nvml *nvml, int gpu, struct vf_run *r);

/* Adds r to the store h (NULL: nothing); a failure warns once per process. */
void history_add(struct vf_history *h, const char *cmd, const struct vf_run *r);

/* The setup the estimate options describe, as canonical JSON (sorted keys, no spaces): the key
 * that ties an estimate to the runs measured for it. Every option but --batch and --gpu, and
 * the model (a path made absolute, else the model it resolved to in lower case, so that an
 * alias and its catalogue name are one key), with the weights the framework loads when no
 * --weights was given (c's model and profile say). Caller frees. */
char *history_setup_json(const struct setup_request *r, const char *model, const struct setup_context *c);

/* What was measured for an estimate's setup, and how far the estimate was from it. */
struct history_note {
  bool found;
  struct vf_run run;            /* the measurement */
  uint64_t estimate_bytes;      /* this setup's estimated device peak at run.batch */
  double ratio;                 /* measured / estimated batch-dependent part; 0: none */
  bool calibrated;              /* --calibrate scales the estimate by ratio */
};

/* Looks up the measurement for the setup of r and model (whose context ctx is loaded) and
 * estimates it at the measured batch. Never fails: without a store or a measurement
 * n->found is false. */
void history_note_find(const struct setup_request *r, const char *model, const struct setup_context *ctx,
                       struct history_note *n);
/* --calibrate: the measured ratio to scale estimates' batch-dependent part by (and the note
 * then says so); 0 after a warning naming cmd when there is none. */
double history_note_ratio(struct history_note *n, const char *cmd);
/* "measured 21.30 GiB at batch 4 on NVIDIA H100 80GB HBM3, 2026-11-20; this estimate was 4%
 * high" (and the calibration, when made); nothing when nothing was found. */
void history_note_print(const struct history_note *n);
/* Adds "measured" (and "calibration") to an estimate's or plan's JSON object. */
void history_note_json(const struct history_note *n, json_t *o);
void history_note_cleanup(struct history_note *n);

/* plan: keeps its --json object as the last plan of its projects (vf_history_project): the
 * current folder's, and config's (the training config or workload it was made of; NULL:
 * none), for doctor and watch. */
void history_save_plan(const char *label, json_t *plan, const char *config);

/* doctor, watch (cmd): the last plan kept for the current folder's project, as JSON text and
 * a line saying what and when ("llama-3.1-8b on a100-40gb, 2026-11-20 14:03"); VF_ENOTFOUND
 * when there is none. Caller frees both. */
int history_last_plan(const char *cmd, char **json, char **about);

#endif
