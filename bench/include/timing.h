/* Timing helpers shared by the benchmarks (header-only, since each bench .c file is its own
 * program). Medians, because the machines these run on are shared. */
#ifndef VF_BENCH_TIMING_H
#define VF_BENCH_TIMING_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n values (sorts them). */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return v[n / 2];
}

/* Median wall milliseconds of running argv (stdout discarded) `runs` times (at most 64);
 * -1 when it fails (exit status above 1: 1 is a "does not fit" answer). */
static inline double bench_process_ms(char *const argv[], int runs) {
  double t[64];
  if (runs > 64) runs = 64;
  fflush(stdout); /* or each child inherits and prints the buffer again */
  for (int i = 0; i < runs; i++) {
    double t0 = bench_now_ms();
    pid_t pid = fork();
    if (pid == 0) {
      if (!freopen("/dev/null", "w", stdout)) _exit(127);
      execv(argv[0], argv);
      _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    t[i] = bench_now_ms() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) > 1) return -1;
  }
  return bench_median(t, runs);
}

#endif
