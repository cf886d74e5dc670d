/* vramfit watch, internals shared by the sampling loop (cmd_watch.c), the tracking of
 * processes and warnings (watch_track.c), the log (watch_log.c) and the terminal view
 * (watch_tui.c). */
#ifndef VF_CLI_WATCH_H
#define VF_CLI_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "vramfit.h"

struct watch_opts {
  double interval;  /* seconds between samples */
  uint64_t count;   /* samples to take; 0: until stopped */
  const char *log_path;
  pid_t pid;        /* --pid; 0 when none */
  char **cmd;       /* -- CMD ARGS; NULL when none */
  bool plain;       /* lines even on a terminal */
  struct vf_trend_config trend;
  double underuse_window_s;
  double grace_s;   /* from SIGTERM to SIGKILL when CMD's tree is ended */
};

/* A time series that keeps its first point (the start, for the warm-up) and the points of
 * the last keep_s seconds. */
struct series {
  double *t, *v;
  size_t n, cap;
};

struct wproc {
  unsigned gpu;
  uint32_t pid;
  char name[64];
  bool watched; /* in the watched tree (or every process when there is none) */
  bool seen;    /* in the latest sample */
  uint64_t used_bytes;
  struct series mem;
  struct vf_trend trend;
};

struct wgpu {
  struct vf_gpu_sample s;
  int err;
  bool tree_seen; /* the watched tree has had memory here */
  struct series used, util, power;
  struct series held; /* what the watched processes held here, while they held any */
  struct vf_underuse under;
  struct vf_headroom headroom;
};

#define WATCH_MAX_WARN 16
#define WATCH_WARN_LEN 512 /* a warning, with what the last plan recommends */

struct watch {
  struct watch_opts o;
  struct vf_nvml *nvml;
  unsigned ngpus;
  struct wgpu *gpus;
  struct wproc *procs;
  size_t nprocs, cap;
  pid_t root;      /* --pid: the watched tree's root; 0: every process (or the command's) */
  const struct vf_child *tree; /* -- CMD: the command's process tree; NULL: none */
  uint64_t tree_peak;   /* the most the watched processes held on one GPU */
  unsigned tree_peak_gpu;
  double now;      /* seconds since the start */
  uint64_t samples;
  char plan[256];  /* what the last plan made for this project recommends; "" when none */
  size_t nwarn;    /* warnings raised by the latest sample */
  unsigned warn_gpu[WATCH_MAX_WARN];
  char warn[WATCH_MAX_WARN][WATCH_WARN_LEN];
};

/* Takes one sample of every GPU at time now and updates trends and warnings. VF_ENOMEM. */
int watch_sample(struct watch *w, double now);
/* Whether GPU i is shown: every GPU until the watched tree has used one, then those. */
bool watch_gpu_shown(const struct watch *w, unsigned i);
void watch_free(struct watch *w);

/* Keeps the watched command's run in the history store: its command, peak, GPU, exit code
 * (-1: unknown) and the stop signal passed on to it (0: none). A store that cannot be
 * written costs a warning on stderr, never the run. */
void watch_record(const struct watch *w, time_t started, double seconds, int exit_code,
                  int stopped_by);

/* "12 min", "45 s", "3.2 h". */
void watch_duration(double seconds, char *buf, size_t size);

/* The log: .csv or .jsonl by the file's extension, one row per shown GPU per sample. */
struct watch_log;
int watch_log_open(const char *path, struct watch_log **out);
void watch_log_rows(struct watch_log *l, const struct watch *w);
void watch_log_close(struct watch_log *l);

/* The terminal view. tui_open returns NULL when the terminal cannot be used. */
struct tui;
struct tui *tui_open(void);
void tui_draw(struct tui *t, const struct watch *w);
/* Handles pending keys; returns false when the user asked to quit. */
bool tui_keys(struct tui *t, const struct watch *w);
/* The watched command's output, for the bottom pane. */
void tui_output(struct tui *t, const char *bytes, size_t len);
/* Ends the view and prints the last lines of the command's output. */
void tui_close(struct tui *t);

#endif
