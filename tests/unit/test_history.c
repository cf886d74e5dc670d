/* The run history store: runs and plans go in and come back; the folder comes from
 * XDG_STATE_HOME or HOME; readers never make a store; several processes writing at once lose
 * nothing; a writer killed mid-write leaves a whole store; a file that is not a store is
 * refused. Plus the calibration of an estimate by a measured peak. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tmpdir.h"
#include "vramfit.h"

#define GIB 1073741824ull

static struct vf_run run_of(uint64_t batch, const char *outcome, uint64_t peak, const char *setup) {
  struct vf_run r = {.when = 1700000000 + (double)batch, .command = "python3 train.py --batch 4",
                     .setup = (char *)setup, .batch = batch, .exit_code = 0, .peak_device_bytes = peak,
                     .seconds = 12.5};
  snprintf(r.source, sizeof r.source, "probe");
  snprintf(r.outcome, sizeof r.outcome, "%s", outcome);
  snprintf(r.gpu, sizeof r.gpu, "NVIDIA H100 80GB HBM3");
  snprintf(r.driver, sizeof r.driver, "550.54.15");
  return r;
}

static struct vf_history *open_store(const char *dir) {
  struct vf_history *h;
  struct vf_diag d;
  if (vf_history_open(dir, true, &h, &d)) fail_msg("open %s: %s", dir, d.msg);
  return h;
}

static size_t count(const char *dir) {
  struct vf_history *h = open_store(dir);
  struct vf_run *runs;
  size_t n;
  assert_int_equal(vf_history_list(h, 0, &runs, &n, NULL), 0);
  vf_history_runs_free(runs, n);
  vf_history_close(h);
  return n;
}

static void runs_come_back(void **state) {
  (void)state;
  char dir[512], sub[600];
  vf_test_tmpdir("history_runs", dir, sizeof dir);
  snprintf(sub, sizeof sub, "%s/deep/er/vramfit", dir);
  struct vf_history *h;
  /* A reader finds nothing and makes nothing. */
  assert_int_equal(vf_history_open(sub, false, &h, NULL), VF_ENOTFOUND);
  struct stat st;
  assert_int_not_equal(stat(sub, &st), 0);
  h = open_store(sub);
  struct vf_run a = run_of(4, "ok", 21 * GIB, "{\"model\":\"gpt2\"}");
  struct vf_run b = run_of(6, "oom", 79 * GIB, "{\"model\":\"gpt2\"}");
  struct vf_run c = run_of(0, "ok", 0, NULL);
  snprintf(c.source, sizeof c.source, "watch");
  c.exit_code = -1;
  assert_int_equal(vf_history_add(h, &a, NULL), 0);
  assert_int_equal(vf_history_add(h, &b, NULL), 0);
  assert_int_equal(vf_history_add(h, &c, NULL), 0);
  struct vf_run *runs;
  size_t n;
  assert_int_equal(vf_history_list(h, 0, &runs, &n, NULL), 0);
  assert_int_equal(n, 3);
  assert_string_equal(runs[0].command, "python3 train.py --batch 4");
  assert_string_equal(runs[0].setup, "{\"model\":\"gpt2\"}");
  assert_int_equal(runs[0].batch, 4);
  assert_int_equal(runs[0].peak_device_bytes, 21 * GIB);
  assert_string_equal(runs[0].gpu, "NVIDIA H100 80GB HBM3");
  assert_string_equal(runs[0].driver, "550.54.15");
  assert_true(runs[0].when == 1700000004.0 && runs[0].seconds == 12.5);
  assert_string_equal(runs[1].outcome, "oom");
  assert_null(runs[2].setup);
  assert_int_equal(runs[2].batch, 0);
  assert_int_equal(runs[2].exit_code, -1);
  assert_string_equal(runs[2].source, "watch");
  vf_history_runs_free(runs, n);
  /* The last two only, oldest first. */
  assert_int_equal(vf_history_list(h, 2, &runs, &n, NULL), 0);
  assert_int_equal(n, 2);
  assert_string_equal(runs[0].outcome, "oom");
  vf_history_runs_free(runs, n);
  vf_history_close(h);
}

static void the_measurement_for_a_setup(void **state) {
  (void)state;
  char dir[512];
  vf_test_tmpdir("history_measured", dir, sizeof dir);
  struct vf_history *h = open_store(dir);
  const char *gpt2 = "{\"model\":\"gpt2\"}", *llama = "{\"model\":\"llama-3.1-8b\"}";
  struct vf_run r;
  assert_int_equal(vf_history_measured(h, gpt2, &r, NULL), VF_ENOTFOUND);
  struct vf_run runs[] = {run_of(8, "ok", 30 * GIB, gpt2), run_of(12, "ok", 40 * GIB, gpt2),
                          run_of(16, "oom", 79 * GIB, gpt2), run_of(13, "timeout", 0, gpt2),
                          run_of(20, "ok", 50 * GIB, llama)};
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) assert_int_equal(vf_history_add(h, &runs[i], NULL), 0);
  /* The latest that fitted with a peak: not the OOM, not the timeout without a peak. */
  assert_int_equal(vf_history_measured(h, gpt2, &r, NULL), 0);
  assert_int_equal(r.batch, 12);
  assert_int_equal(r.peak_device_bytes, 40 * GIB);
  vf_run_cleanup(&r);
  assert_int_equal(vf_history_measured(h, "{\"model\":\"bert\"}", &r, NULL), VF_ENOTFOUND);
  vf_history_close(h);
}

/* A plan comes back for the projects it was made for, never for another one. */
static void plans_come_back(void **state) {
  (void)state;
  char dir[512];
  vf_test_tmpdir("history_plans", dir, sizeof dir);
  struct vf_history *h = open_store(dir);
  char *json, *label;
  double when;
  assert_int_equal(vf_history_last_plan(h, "/p/a", &json, &label, &when, NULL), VF_ENOTFOUND);
  assert_int_equal(vf_history_save_plan(h, "gpt2 on rtx-4090", "{\"a\":1}", "/p/a", NULL, NULL), 0);
  assert_int_equal(vf_history_save_plan(h, "llama on a100-80gb", "{\"a\":2}", "/home/me", "/p/b", NULL), 0);
  assert_int_equal(vf_history_last_plan(h, "/p/a", &json, &label, &when, NULL), 0);
  assert_string_equal(json, "{\"a\":1}");
  assert_string_equal(label, "gpt2 on rtx-4090");
  assert_true(when > 1.7e9);
  vf_free(json);
  vf_free(label);
  /* Made in one folder of a config in another: both projects have it. */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(vf_history_last_plan(h, i ? "/p/b" : "/home/me", &json, &label, &when, NULL), 0);
    assert_string_equal(json, "{\"a\":2}");
    vf_free(json);
    vf_free(label);
  }
  assert_int_equal(vf_history_last_plan(h, "/p", &json, &label, &when, NULL), VF_ENOTFOUND);
  vf_history_close(h);
}

/* A store in a fresh folder (named for NAME, into dir) made by sql, as an older vramfit left it. */
static void make_store(const char *name, const char *sql, char *dir, size_t size) {
  char path[600];
  vf_test_tmpdir(name, dir, size);
  snprintf(path, sizeof path, "%s/history.sqlite3", dir);
  sqlite3 *db;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

/* A store of version 1 (plans without projects) is brought up to date by the next writer;
 * its old plans belong to no project, and a reader of the old store finds none. */
static void old_plans_belong_to_no_project(void **state) {
  (void)state;
  char dir[512];
  make_store("history_v1", "CREATE TABLE plans (id INTEGER PRIMARY KEY, saved REAL NOT NULL,"
                           " label TEXT NOT NULL, json TEXT NOT NULL);"
                           "INSERT INTO plans (saved, label, json) VALUES (1.7e9, 'old', '{}');"
                           "PRAGMA user_version=1", dir, sizeof dir);
  struct vf_history *h;
  char *json, *label;
  double when;
  assert_int_equal(vf_history_open(dir, false, &h, NULL), 0);
  assert_int_equal(vf_history_last_plan(h, "/p", &json, &label, &when, NULL), VF_ENOTFOUND);
  vf_history_close(h);
  h = open_store(dir);
  assert_int_equal(vf_history_last_plan(h, "/p", &json, &label, &when, NULL), VF_ENOTFOUND);
  assert_int_equal(vf_history_save_plan(h, "new", "{\"a\":3}", "/p", NULL, NULL), 0);
  assert_int_equal(vf_history_last_plan(h, "/p", &json, &label, &when, NULL), 0);
  assert_string_equal(label, "new");
  vf_free(json);
  vf_free(label);
  vf_history_close(h);
}

/* A store marked version 1 that has the plans' project columns already (a development
 * build's) is brought to the current version, not refused for a duplicate column. */
static void version_1_with_the_columns_opens(void **state) {
  (void)state;
  char dir[512];
  make_store("history_v1_cols", "CREATE TABLE plans (id INTEGER PRIMARY KEY, saved REAL NOT NULL,"
                                " label TEXT NOT NULL, json TEXT NOT NULL, made_in TEXT);"
                                "PRAGMA user_version=1", dir, sizeof dir);
  struct vf_history *h = open_store(dir);
  char *json, *label;
  double when;
  assert_int_equal(vf_history_save_plan(h, "new", "{}", "/p", NULL, NULL), 0);
  assert_int_equal(vf_history_last_plan(h, "/p", &json, &label, &when, NULL), 0);
  vf_free(json);
  vf_free(label);
  vf_history_close(h);
}

/* The file and its folder both belong to the project want. */
static void both_belong_to(const char *file, const char *folder, const char *want) {
  char out[1024];
  assert_int_equal(vf_history_project(file, out, sizeof out), 0);
  assert_string_equal(out, want);
  assert_int_equal(vf_history_project(folder, out, sizeof out), 0);
  assert_string_equal(out, want);
}

/* A project is the git work tree that holds a path (a .git folder, or a worktree's .git
 * file), else the path's own folder. */
static void projects_are_work_trees_or_folders(void **state) {
  (void)state;
  /* Outside the source tree, which is a work tree itself. */
  char dir[] = "/tmp/vf-project-XXXXXX", sub[600], file[700], git[600], out[1024], want[1024];
  assert_non_null(mkdtemp(dir));
  snprintf(sub, sizeof sub, "%s/conf", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  snprintf(file, sizeof file, "%s/config.yaml", sub);
  fclose(fopen(file, "w"));
  /* No work tree: the file's folder, the folder itself. */
  assert_non_null(realpath(sub, want));
  both_belong_to(file, sub, want);
  /* Inside a work tree (a worktree's .git is a file): its top. */
  snprintf(git, sizeof git, "%s/.git", dir);
  fclose(fopen(git, "w"));
  assert_non_null(realpath(dir, want));
  both_belong_to(file, sub, want);
  assert_int_equal(vf_history_project(file, out, 4), VF_ERANGE);
  assert_int_equal(vf_history_project("/nonexistent/vramfit/x.yaml", out, sizeof out), VF_EIO);
  unlink(file);
  rmdir(sub);
  unlink(git);
  rmdir(dir);
}

static void folder_from_the_environment(void **state) {
  (void)state;
  char buf[512];
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  setenv("XDG_STATE_HOME", "/x/state", 1);
  assert_int_equal(vf_history_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/x/state/vramfit");
  setenv("XDG_STATE_HOME", "relative/state", 1); /* the specification says to ignore it */
  setenv("HOME", "/home/me", 1);
  assert_int_equal(vf_history_dir(buf, sizeof buf), 0);
  assert_string_equal(buf, "/home/me/.local/state/vramfit");
  unsetenv("XDG_STATE_HOME");
  unsetenv("HOME");
  assert_int_equal(vf_history_dir(buf, sizeof buf), VF_ENOTFOUND);
  if (home) setenv("HOME", home, 1);
  free(home);
}

/* Eight processes add 40 runs each at once: all 320 arrive. */
static void concurrent_writers_lose_nothing(void **state) {
  (void)state;
  char dir[512];
  vf_test_tmpdir("history_concurrent", dir, sizeof dir);
  pid_t kids[8];
  for (int k = 0; k < 8; k++) {
    if ((kids[k] = fork()) == 0) {
      struct vf_history *h;
      int bad = 0;
      if (vf_history_open(dir, true, &h, NULL)) _exit(2);
      for (int i = 0; i < 40; i++) {
        struct vf_run r = run_of((uint64_t)(k * 100 + i + 1), "ok", GIB, NULL);
        bad += vf_history_add(h, &r, NULL) != 0;
      }
      vf_history_close(h);
      _exit(bad ? 1 : 0);
    }
  }
  for (int k = 0; k < 8; k++) {
    int st;
    assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  assert_int_equal(count(dir), 320);
}

/* Writers killed at random moments mid-write: the store stays whole, and every run it holds
 * is complete. */
static void a_crash_mid_write_leaves_a_whole_store(void **state) {
  (void)state;
  char dir[512], path[600];
  vf_test_tmpdir("history_crash", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/" VF_HISTORY_FILE, dir);
  char long_setup[4096];
  memset(long_setup, 'x', sizeof long_setup - 1);
  long_setup[sizeof long_setup - 1] = '\0';
  for (int round = 0; round < 6; round++) {
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t kid = fork();
    if (kid == 0) {
      struct vf_history *h;
      if (vf_history_open(dir, true, &h, NULL)) _exit(2);
      for (uint64_t i = 1;; i++) {
        struct vf_run r = run_of(i, "ok", GIB, long_setup);
        vf_history_add(h, &r, NULL);
        if (i == 1 && write(ready[1], "", 1) != 1) _exit(3); /* writing, however slow the machine */
      }
    }
    char byte;
    close(ready[1]);
    assert_int_equal(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    usleep(1000 + 7000 * (useconds_t)round);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
  }
  sqlite3 *db;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
  sqlite3_finalize(st);
  sqlite3_close(db);
  struct vf_history *h = open_store(dir);
  struct vf_run *runs;
  size_t n;
  assert_int_equal(vf_history_list(h, 0, &runs, &n, NULL), 0);
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++) assert_int_equal(strlen(runs[i].setup), sizeof long_setup - 1);
  vf_history_runs_free(runs, n);
  vf_history_close(h);
}

static void not_a_store_is_refused(void **state) {
  (void)state;
  char dir[512], path[600];
  vf_test_tmpdir("history_garbage", dir, sizeof dir);
  static const char junk[] = "this is not a database, it is a text file of some length..........";
  vf_test_write(dir, VF_HISTORY_FILE, junk, sizeof junk, path, sizeof path);
  struct vf_history *h;
  struct vf_diag d;
  vf_diag_clear(&d);
  assert_int_equal(vf_history_open(dir, true, &h, &d), VF_EIO);
  assert_non_null(strstr(d.file, VF_HISTORY_FILE));
  assert_true(d.msg[0]);
  assert_int_equal(vf_history_open(dir, false, &h, &d), 0); /* a reader opens lazily... */
  struct vf_run *runs;
  size_t n;
  assert_int_equal(vf_history_list(h, 0, &runs, &n, &d), VF_EIO); /* ...and fails on reading */
  vf_history_close(h);
}

/* ---- calibration ---- */

static struct vf_estimate estimate_of(uint64_t fixed, uint64_t act, uint64_t tmp) {
  struct vf_estimate e = {0};
  e.by_category[VF_CAT_WEIGHTS] = fixed;
  e.by_category[VF_CAT_ACTIVATIONS] = act;
  e.by_category[VF_CAT_TEMPORARIES] = tmp;
  e.allocated_peak = fixed + act + tmp;
  e.reserved_peak = e.allocated_peak + GIB;
  e.device_peak = e.reserved_peak + GIB / 2;
  e.allocator_slack = GIB;
  e.context = GIB / 2;
  return e;
}

static uint64_t breakdown_sum(const struct vf_estimate *e) {
  uint64_t sum = e->allocator_slack + e->context;
  for (int c = 0; c < VF_CAT_COUNT; c++) sum += e->by_category[c];
  return sum;
}

static void calibration_scales_the_batch_part(void **state) {
  (void)state;
  /* 10 GiB fixed, 8 + 2 GiB batch-dependent, 1.5 GiB slack and context: 21.5 GiB. */
  struct vf_estimate e = estimate_of(10 * GIB, 8 * GIB, 2 * GIB);
  assert_int_equal(vf_estimate_batch_part(&e), 10 * GIB);
  double ratio;
  /* Measured 19.5 GiB: the batch part was 8 GiB, not 10. */
  assert_int_equal(vf_calibration_ratio(&e, 19 * GIB + GIB / 2, &ratio), 0);
  assert_true(ratio > 0.7999 && ratio < 0.8001);
  assert_int_equal(vf_calibration_ratio(&e, 11 * GIB, &ratio), VF_ERANGE); /* below the rest */
  struct vf_estimate none = estimate_of(10 * GIB, 0, 0);
  assert_int_equal(vf_calibration_ratio(&none, 20 * GIB, &ratio), VF_ERANGE);
  /* Applied at another batch: its own batch part scaled, everything moving together. */
  struct vf_estimate big = estimate_of(10 * GIB, 16 * GIB, 4 * GIB);
  uint64_t device = big.device_peak;
  vf_estimate_calibrate(&big, 0.8);
  assert_int_equal(big.device_peak, device - 4 * GIB);
  assert_int_equal(big.allocated_peak, 26 * GIB);
  assert_int_equal(breakdown_sum(&big), big.device_peak);
  vf_estimate_calibrate(&big, 1.25); /* and back */
  assert_int_equal(big.device_peak, device);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runs_come_back),
      cmocka_unit_test(the_measurement_for_a_setup),
      cmocka_unit_test(plans_come_back),
      cmocka_unit_test(old_plans_belong_to_no_project),
      cmocka_unit_test(version_1_with_the_columns_opens),
      cmocka_unit_test(projects_are_work_trees_or_folders),
      cmocka_unit_test(folder_from_the_environment),
      cmocka_unit_test(concurrent_writers_lose_nothing),
      cmocka_unit_test(a_crash_mid_write_leaves_a_whole_store),
      cmocka_unit_test(not_a_store_is_refused),
      cmocka_unit_test(calibration_scales_the_batch_part),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
