/* vramfit probe: one launch of the user's command at one batch, watched until it exits or
 * runs out of time (probe_run.c). */
#ifndef VF_CLI_PROBE_RUN_H
#define VF_CLI_PROBE_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "vramfit.h"

#define PROBE_TAIL 65536 /* bytes of each output stream kept for the OOM parser */

struct probe_tail {
  size_t len;
  char buf[PROBE_TAIL];
};

struct probe_runner {
  char **cmd;           /* the command; "{batch}" in any argument stands for the batch */
  double timeout_s;     /* 0: none */
  double grace_s;       /* from SIGTERM to SIGKILL when a launch's tree is ended */
  struct vf_nvml *nvml; /* NULL: peaks unknown */
  int stop_fd;          /* vf_proc_catch_stop_signals()' descriptor, or -1 */
};

struct probe_launch {
  enum vf_probe_outcome outcome;
  int exit_code;           /* as shells report it (128 + signal); -1 when timed out */
  enum vf_oom_source oom;  /* who reported running out of memory */
  uint64_t peak_bytes;     /* most the command's processes held on one GPU; 0: unknown */
  int gpu;                 /* the GPU of the peak; -1: none seen */
  int stopped_by;          /* the stop signal that ended the launch's tree; 0: none */
  time_t started;
  double seconds;
  char command[1024];      /* as run, quoted as a shell would need it */
  struct probe_tail out, err;
};

/* Runs the command at batch (VRAMFIT_BATCH set, stdin /dev/null, output captured) and
 * judges the outcome. Its whole process tree is ended before this returns: at the time limit
 * (SIGTERM, SIGKILL after the grace period), on a stop signal (out->stopped_by; SIGINT
 * passed on as SIGINT, others as SIGTERM) and when the command exits leaving processes
 * behind. VF_ENOCMD (d says why) when it cannot be started; VF_ENOMEM. */
int probe_launch(const struct probe_runner *r, uint64_t batch, struct probe_launch *out,
                 struct vf_diag *d);

/* text with every key ("{batch}") replaced by value, malloc'd; NULL when out of memory. */
char *probe_substitute(const char *text, const char *key, const char *value);

#endif
