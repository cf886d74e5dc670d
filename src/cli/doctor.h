/* vramfit doctor, internals: the environment checks (doctor_env.c) and the report lines
 * that both they and the log explanation (cmd_doctor.c) print. */
#ifndef VF_CLI_DOCTOR_H
#define VF_CLI_DOCTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "vramfit.h"

enum doctor_level { DOCTOR_OK, DOCTOR_INFO, DOCTOR_WARN, DOCTOR_FAIL };

struct doctor {
  bool color;
  unsigned problems;   /* warnings and failures reported */
  struct vf_nvml *nvml; /* NULL without a driver */
  int gpu;             /* the GPU a run started here gets; -1 when none */
  json_t *json;        /* --json: the object being built ("findings", "log"); NULL for text */
};

/* Prints "  TAG   TOPIC  MESSAGE" (or adds {"level", "topic", "message"} to the --json
 * findings) and counts warnings and failures. */
void doctor_report(struct doctor *d, enum doctor_level level, const char *topic,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Driver, GPUs and the processes on them, CUDA_VISIBLE_DEVICES, allocator variables. */
void doctor_check_env(struct doctor *d);
/* Free memory on the run's GPU against a plan's (or estimate's) peak: the file at path, or
 * the JSON text (path then names it). Returns an exit code for an unreadable plan, else 0. */
int doctor_check_plan(struct doctor *d, const char *path, const char *text);
/* The out-of-memory report in a training log and its likely cause. Returns an exit code for
 * an unreadable log, else 0. */
int doctor_check_log(struct doctor *d, const char *path);

#endif
