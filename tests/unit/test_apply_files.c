/* Atomic replacement, backups and the "changed on disk" guard (src/edit/write.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "edit/internal.h"
#include "tmpdir.h"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

static void assert_file(const char *path, const char *want) {
  char *got = slurp(path);
  if (!got) fail_msg("%s is missing", path);
  assert_string_equal(got, want);
  free(got);
}

static int replace(const char *path, const char *bytes, char **backup) {
  struct target_file f;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = target_load(&f, path, false, true, &d);
  if (!rc) rc = target_replace(&f, bytes, strlen(bytes), backup, &d);
  target_free(&f);
  return rc;
}

static void backups_are_never_replaced(void **state) {
  (void)state;
  char dir[512], path[1024], b0[1100], b1[1100];
  vf_test_tmpdir("apply-backups", dir, sizeof dir);
  vf_test_write(dir, "c.yaml", "v: 1\n", 5, path, sizeof path);
  chmod(path, 0640);
  char *backup = NULL;
  assert_int_equal(replace(path, "v: 2\n", &backup), 0);
  snprintf(b0, sizeof b0, "%s.backup", path);
  assert_string_equal(backup, b0);
  free(backup);
  assert_int_equal(replace(path, "v: 3\n", &backup), 0);
  snprintf(b1, sizeof b1, "%s.backup.1", path);
  assert_string_equal(backup, b1);
  free(backup);
  assert_file(path, "v: 3\n");
  assert_file(b0, "v: 1\n");
  assert_file(b1, "v: 2\n");
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);
  assert_int_equal(stat(b0, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);
}

static void changed_on_disk_is_not_clobbered(void **state) {
  (void)state;
  char dir[512], path[1024], b0[1100];
  vf_test_tmpdir("apply-changed", dir, sizeof dir);
  vf_test_write(dir, "c.yaml", "v: 1\n", 5, path, sizeof path);
  struct target_file f;
  struct vf_diag d;
  assert_int_equal(target_load(&f, path, false, true, &d), 0);
  /* Same size, and the same mtime put back: only the content tells. */
  struct stat st;
  stat(path, &st);
  FILE *w = fopen(path, "wb");
  fputs("v: 9\n", w);
  fclose(w);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  utimensat(AT_FDCWD, path, times, 0);
  char *backup = NULL;
  vf_diag_clear(&d);
  assert_int_equal(target_replace(&f, "v: 2\n", 5, &backup, &d), VF_ECHANGED);
  assert_non_null(strstr(d.msg, "changed on disk"));
  assert_null(backup);
  assert_file(path, "v: 9\n");
  snprintf(b0, sizeof b0, "%s.backup", path);
  assert_int_equal(access(b0, F_OK), -1);
  target_free(&f);
}

static void symlinks_are_followed(void **state) {
  (void)state;
  char dir[512], path[1024], link[1100], b0[1100];
  vf_test_tmpdir("apply-link", dir, sizeof dir);
  vf_test_write(dir, "real.yaml", "v: 1\n", 5, path, sizeof path);
  snprintf(link, sizeof link, "%s/link.yaml", dir);
  assert_int_equal(symlink("real.yaml", link), 0);
  char *backup = NULL;
  assert_int_equal(replace(link, "v: 2\n", &backup), 0);
  free(backup);
  struct stat st;
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_file(path, "v: 2\n");
  snprintf(b0, sizeof b0, "%s.backup", path);
  assert_file(b0, "v: 1\n");
}

static void refuses_what_it_cannot_write(void **state) {
  (void)state;
  char dir[512], path[1024];
  vf_test_tmpdir("apply-refuse", dir, sizeof dir);
  vf_test_write(dir, "ro.yaml", "v: 1\n", 5, path, sizeof path);
  chmod(path, 0444);
  struct target_file f;
  struct vf_diag d;
  vf_diag_clear(&d);
  assert_int_equal(target_load(&f, path, false, true, &d), VF_EIO);
  assert_non_null(strstr(d.msg, "read-only"));
  target_free(&f);
  /* Read-only is fine when nothing will be written (--dry-run). */
  assert_int_equal(target_load(&f, path, false, false, &d), 0);
  target_free(&f);
  vf_diag_clear(&d);
  assert_int_equal(target_load(&f, dir, false, false, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "directory"));
  target_free(&f);
}

static void new_files_do_not_replace_late_arrivals(void **state) {
  (void)state;
  char dir[512], path[1024], late[1024];
  vf_test_tmpdir("apply-new", dir, sizeof dir);
  snprintf(path, sizeof path, "%s/new.env", dir);
  struct target_file f;
  char *backup = NULL;
  assert_int_equal(target_load(&f, path, true, true, NULL), 0);
  assert_false(f.exists);
  assert_int_equal(target_replace(&f, "A=1\n", 4, &backup, NULL), 0);
  assert_null(backup);
  assert_file(path, "A=1\n");
  target_free(&f);
  snprintf(path, sizeof path, "%s/late.env", dir);
  assert_int_equal(target_load(&f, path, true, true, NULL), 0);
  vf_test_write(dir, "late.env", "B=2\n", 4, late, sizeof late);
  assert_int_equal(target_replace(&f, "A=1\n", 4, &backup, NULL), VF_ECHANGED);
  assert_file(path, "B=2\n");
  target_free(&f);
}

static int count_temps(const char *dir) {
  DIR *dh = opendir(dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(dh));) n += strstr(e->d_name, ".vramfit-") != NULL;
  closedir(dh);
  return n;
}

static void dead_runs_leftovers_are_removed(void **state) {
  (void)state;
  char dir[512], path[1024], tmp[1024];
  vf_test_tmpdir("apply-stale", dir, sizeof dir);
  vf_test_write(dir, "c.yaml", "v: 1\n", 5, path, sizeof path);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0);
  char name[128];
  snprintf(name, sizeof name, ".c.yaml.vramfit-%ld-AbC123", (long)child);
  vf_test_write(dir, name, "half", 4, tmp, sizeof tmp);
  snprintf(name, sizeof name, ".c.yaml.vramfit-%ld-XyZ789", (long)getpid());
  vf_test_write(dir, name, "live", 4, tmp, sizeof tmp);
  struct target_file f;
  assert_int_equal(target_load(&f, path, false, true, NULL), 0);
  target_free(&f);
  assert_int_equal(count_temps(dir), 1); /* the live run's file stays */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(backups_are_never_replaced),
      cmocka_unit_test(changed_on_disk_is_not_clobbered),
      cmocka_unit_test(symlinks_are_followed),
      cmocka_unit_test(refuses_what_it_cannot_write),
      cmocka_unit_test(new_files_do_not_replace_late_arrivals),
      cmocka_unit_test(dead_runs_leftovers_are_removed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
