/* The CPU cost of 'vramfit watch' sampling at 10 Hz, measured with getrusage on whole
 * watch processes run against the fake NVML of the test tree (so the figure covers vramfit's
 * own work and a driver that answers at once; a real driver's calls add their own cost).
 *
 * Usage: bench_watch_cpu [seconds] (default 5). Finds ../vramfit and ../tests/libfake_nvml.so
 * next to its own build folder. */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct scenario {
  const char *name;
  unsigned gpus, procs_per_gpu;
  bool log;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* GPUs with growing processes, so that the trend analysis runs on every sample. */
static void write_script(const char *path, const struct scenario *s) {
  FILE *f = fopen(path, "w");
  if (!f) exit(1);
  for (unsigned g = 0; g < s->gpus; g++) {
    fprintf(f, "gpu index=%u name=\"NVIDIA H100 80GB HBM3\" total=80GiB util=90 power=500W "
               "limit=700W\n", g);
    for (unsigned p = 0; p < s->procs_per_gpu; p++)
      fprintf(f, "proc gpu=%u pid=%d used=lin:0:%uGiB,60:%uGiB\n", g, p == 0 ? (int)getpid() : 1,
              10 + p, 12 + p);
  }
  fclose(f);
}

/* Runs one watch for the given seconds at 10 Hz; returns its CPU seconds, wall in *wall. */
static double run(const char *dir, const struct scenario *s, double seconds, double *wall) {
  char vramfit[PATH_MAX + 16], lib[PATH_MAX + 32], script[] = "/tmp/vramfit-bench-XXXXXX", log[64],
       count[32];
  snprintf(vramfit, sizeof vramfit, "%s/vramfit", dir);
  snprintf(lib, sizeof lib, "%s/tests/libfake_nvml.so", dir);
  int fd = mkstemp(script);
  if (fd < 0) exit(1);
  close(fd);
  write_script(script, s);
  snprintf(log, sizeof log, "%s.jsonl", script);
  snprintf(count, sizeof count, "%.0f", seconds * 10);
  fflush(stdout); /* or the child would print our buffered lines again */
  double start = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    setenv("VRAMFIT_NVML", lib, 1);
    setenv("FAKE_NVML_SCRIPT", script, 1);
    if (!freopen("/dev/null", "w", stdout)) _exit(1);
    char *argv[] = {vramfit, "watch", "--interval", "0.1", "--count", count,
                    s->log ? "--log" : NULL, log, NULL};
    execv(vramfit, argv);
    _exit(127);
  }
  int status;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  *wall = now_s() - start;
  unlink(script);
  unlink(log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "watch failed (status %d): is %s built?\n", status, vramfit);
    exit(1);
  }
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* The build folder: this binary lives in <build>/bench/. */
static void build_dir(char *buf, size_t size) {
  ssize_t n = readlink("/proc/self/exe", buf, size - 1);
  if (n <= 0) exit(1);
  buf[n] = '\0';
  for (int up = 0; up < 2; up++) {
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
  }
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 5;
  char dir[PATH_MAX];
  build_dir(dir, sizeof dir);
  static const struct scenario scenarios[] = {
      {"1 GPU, 1 process", 1, 1, false},
      {"1 GPU, 1 process, --log jsonl", 1, 1, true},
      {"8 GPUs, 4 processes each, --log", 8, 4, true},
  };
  printf("watch --interval 0.1 for %.0f s (%.0f samples), plain lines to /dev/null; whole "
         "processes, start-up included:\n", seconds, seconds * 10);
  for (size_t i = 0; i < sizeof scenarios / sizeof *scenarios; i++) {
    double wall, cpu = run(dir, &scenarios[i], seconds, &wall);
    printf("  %-34s cpu %6.3f s in %5.2f s wall = %5.2f%% of one core, %4.0f us a sample\n",
           scenarios[i].name, cpu, wall, 100 * cpu / wall, cpu / (seconds * 10) * 1e6);
  }
  return 0;
}
