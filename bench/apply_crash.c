/* Crash test for `vramfit apply`: runs it N times (default 1000) and SIGKILLs it at a
 * random point of its run. After every kill the config must be byte-for-byte the old or
 * the new version, the backup that existed before must be intact, and a new backup, if
 * any, must be a complete copy of the old version.
 *
 *   bench_apply_crash [VRAMFIT [N]]   (VRAMFIT defaults to ../vramfit next to this binary)
 *
 * Kill times are uniform over 0..1.3x the mean uninterrupted run for half of the runs, and
 * over 0.6..1.1x (where the backup and the rename happen) for the other half; the outcome
 * counts show where they fell. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char old_text[] =
    "# SFT trainer config (TrainingArguments)\n"
    "model_name_or_path: mistralai/Mistral-7B-v0.1\n"
    "bf16: true\n"
    "gradient_accumulation_steps: 2\n"
    "gradient_checkpointing: true\n"
    "learning_rate: 2.0e-04   # PyYAML needs the dot\n"
    "max_seq_length: 2048\n"
    "output_dir: data/zephyr-7b-sft-qlora\n"
    "per_device_train_batch_size: 4\n"
    "optim: adamw_torch\n";
static const char sentinel[] = "an older backup that must survive\n";

struct stats {
  int runs, killed, finished, torn, lost_backup, bad_new_backup, old_only, old_with_backup, new_version;
  int left_temp;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  size_t n = fread(buf, 1, (1 << 16) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static bool put(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok;
}

static pid_t launch(const char *vramfit, const char *dir) {
  pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir) != 0) _exit(127);
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(127);
    execl(vramfit, vramfit, "apply", "config.yaml", "--set", "batch=8", "--set", "accumulation=4",
          "--set", "optimizer=paged-adamw-8bit", (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Resets the folder: the old config, the older backup, no other backups and no
 * temporary files; returns how many temporary files the last run left. */
static int reset(const char *dir) {
  char path[4200];
  int temps = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d));) {
    bool temp = strstr(e->d_name, ".vramfit-") != NULL;
    temps += temp;
    if (!temp && strncmp(e->d_name, "config.yaml.backup.", 19) != 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  snprintf(path, sizeof path, "%s/config.yaml", dir);
  put(path, old_text);
  snprintf(path, sizeof path, "%s/config.yaml.backup", dir);
  put(path, sentinel);
  return temps;
}

static int count_temps(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".vramfit-") != NULL;
  if (d) closedir(d);
  return n;
}

static char *file_in(const char *dir, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return slurp(path);
}

/* One run killed after delay seconds; classifies what it left. */
static void one(const char *vramfit, const char *dir, const char *new_text, double delay, struct stats *s) {
  s->left_temp += reset(dir) > 0;
  pid_t pid = launch(vramfit, dir);
  struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
  nanosleep(&ts, NULL);
  kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  s->runs++;
  if (WIFSIGNALED(status)) s->killed++;
  else s->finished++;
  char *cfg = file_in(dir, "config.yaml"), *b0 = file_in(dir, "config.yaml.backup");
  char *b1 = file_in(dir, "config.yaml.backup.1");
  bool is_old = cfg && strcmp(cfg, old_text) == 0, is_new = cfg && strcmp(cfg, new_text) == 0;
  if (!is_old && !is_new) s->torn++;
  if (!b0 || strcmp(b0, sentinel) != 0) s->lost_backup++;
  if (b1 && strcmp(b1, old_text) != 0) s->bad_new_backup++;
  if (is_new && !b1) s->bad_new_backup++; /* written without its backup */
  if (is_old && !b1) s->old_only++;
  if (is_old && b1) s->old_with_backup++;
  if (is_new) s->new_version++;
  free(cfg);
  free(b0);
  free(b1);
}

/* A temporary file of a dead run (a reaped child's pid) must go with the next run. */
static int stale_then_clean(const char *vramfit, const char *dir) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char path[4200];
  snprintf(path, sizeof path, "%s/.config.yaml.vramfit-%ld-aB3dE9", dir, (long)dead);
  put(path, "half");
  pid_t pid = launch(vramfit, dir);
  waitpid(pid, NULL, 0);
  return count_temps(dir);
}

static double mean_run(const char *vramfit, const char *dir, char **new_text) {
  double total = 0;
  for (int i = 0; i < 20; i++) {
    reset(dir);
    double t0 = now_s();
    pid_t pid = launch(vramfit, dir);
    int status;
    waitpid(pid, &status, 0);
    total += now_s() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  }
  *new_text = file_in(dir, "config.yaml");
  return total / 20;
}

static void default_binary(char *out, size_t size) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  char *slash = strrchr(self, '/');
  if (slash) *slash = '\0';
  snprintf(out, size, "%s/../vramfit", self);
}

int main(int argc, char **argv) {
  char given[4200], vramfit[PATH_MAX];
  if (argc > 1) snprintf(given, sizeof given, "%s", argv[1]);
  else default_binary(given, sizeof given);
  /* The runs happen in a scratch folder: the path must not be relative. */
  if (!realpath(given, vramfit)) return perror(given), 2;
  int n = argc > 2 ? atoi(argv[2]) : 1000;
  char dir[] = "/tmp/vramfit-crash-XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 2;
  char *new_text = NULL;
  double mean = mean_run(vramfit, dir, &new_text);
  if (mean < 0 || !new_text || strcmp(new_text, old_text) == 0) {
    fprintf(stderr, "apply_crash: %s apply does not run cleanly\n", vramfit);
    return 2;
  }
  srand((unsigned)time(NULL));
  struct stats s = {0};
  for (int i = 0; i < n; i++) {
    double u = (double)rand() / RAND_MAX;
    one(vramfit, dir, new_text, i % 2 ? mean * (0.6 + 0.5 * u) : mean * 1.3 * u, &s);
  }
  s.left_temp += reset(dir) > 0;
  int after_clean_run = stale_then_clean(vramfit, dir);
  printf("apply crash test: %d runs, SIGKILL at uniform 0..%.1f ms or %.1f..%.1f ms (mean run %.2f ms)\n",
         s.runs, mean * 1.3e3, mean * 0.6e3, mean * 1.1e3, mean * 1e3);
  printf("  killed %d, finished before the kill %d\n", s.killed, s.finished);
  printf("  left: old file, no new backup %d | old file, complete backup %d | new file %d\n",
         s.old_only, s.old_with_backup, s.new_version);
  printf("  torn files %d, older backup lost or changed %d, bad new backups %d\n", s.torn,
         s.lost_backup, s.bad_new_backup);
  printf("  runs that left a temporary file %d; a dead run's file after the next run %d\n",
         s.left_temp, after_clean_run);
  free(new_text);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "apply_crash: could not remove %s\n", dir);
  return s.torn || s.lost_backup || s.bad_new_backup || after_clean_run ? 1 : 0;
}
