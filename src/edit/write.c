/* Crash-safe file replacement: the backup is written to a temporary file and linked to
 * the first free FILE.backup[.N] name (link never replaces a file), the new content is
 * written to a temporary file in the same folder, synced, and renamed over the target.
 * A kill at any point leaves the old file or the new one, never a mix. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/diag.h"
#include "base/fileio.h"
#include "edit/internal.h"

enum { MAX_BACKUPS = 100000 };

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  return bytes_dup(path, slash == path ? 1 : (size_t)(slash - path));
}

static int64_t mtime_ns(const struct stat *st) {
  return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int io_error(struct vf_diag *d, const char *path, const char *what) {
  return diag_at(d, VF_EIO, path, UINT64_MAX, "%s: %s", what, strerror(errno));
}

static int read_all(int fd, char **out, size_t *len, size_t max) {
  struct sbuf b = {0};
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      sb_free(&b);
      return VF_EIO;
    }
    if (n == 0) break;
    sb_add(&b, chunk, (size_t)n);
    if (b.len > max) {
      sb_free(&b);
      return VF_ERANGE;
    }
  }
  *out = sb_take(&b, len);
  return *out ? 0 : VF_ENOMEM;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return VF_EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

/* Temporary files carry our pid, so a later run can tell a dead run's leftovers from a
 * live one's: ".NAME.vramfit-PID-XXXXXX". */
static void remove_stale_temps(const char *dir, const char *base) {
  DIR *dh = opendir(dir);
  if (!dh) return;
  size_t blen = strlen(base);
  for (struct dirent *e; (e = readdir(dh));) {
    const char *n = e->d_name;
    if (n[0] != '.' || strncmp(n + 1, base, blen) != 0 || strncmp(n + 1 + blen, ".vramfit-", 9) != 0)
      continue;
    char *end;
    long pid = strtol(n + 1 + blen + 9, &end, 10);
    if (pid > 0 && *end == '-' && kill((pid_t)pid, 0) == -1 && errno == ESRCH)
      unlinkat(dirfd(dh), n, 0);
  }
  closedir(dh);
}

static int check_writable(const struct target_file *f, const char *dir, struct vf_diag *d) {
  if (f->exists && (access(f->target, W_OK) != 0 || !(f->mode & 0222)))
    return diag_at(d, VF_EIO, f->path, UINT64_MAX, "the file is read-only; nothing written");
  if (access(dir, W_OK | X_OK) != 0)
    return diag_at(d, VF_EIO, f->path, UINT64_MAX,
                   "cannot create files in %s (needed for an atomic write): %s", dir,
                   strerror(errno));
  return 0;
}

/* Resolves symlinks and opens the file; *fd stays -1 when it is missing and that is allowed. */
static int open_target(struct target_file *f, bool missing_ok, int *fd, struct vf_diag *d) {
  *fd = -1;
  char *real = realpath(f->path, NULL);
  if (!real && errno == ENOENT && missing_ok) {
    struct stat st;
    if (lstat(f->path, &st) == 0)
      return diag_at(d, VF_EIO, f->path, UINT64_MAX, "the link points nowhere");
    f->target = strdup(f->path);
    return f->target ? 0 : VF_ENOMEM;
  }
  if (!real) return io_error(d, f->path, "cannot open");
  f->target = real;
  *fd = open(real, O_RDONLY | O_CLOEXEC);
  return *fd < 0 ? io_error(d, f->path, "cannot open") : 0;
}

static int read_target(struct target_file *f, int fd, struct vf_diag *d) {
  struct stat st;
  if (fstat(fd, &st) != 0) return io_error(d, f->path, "cannot stat");
  if (S_ISDIR(st.st_mode))
    return diag_at(d, VF_EINVAL, f->path, UINT64_MAX, "is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    return diag_at(d, VF_EINVAL, f->path, UINT64_MAX, "is not a regular file");
  int rc = read_all(fd, &f->bytes, &f->len, DOC_MAX_BYTES);
  if (rc == VF_ERANGE)
    return diag_at(d, rc, f->path, UINT64_MAX, "larger than %u bytes", DOC_MAX_BYTES);
  if (rc == VF_EIO) return io_error(d, f->path, "read error");
  if (rc) return rc;
  f->exists = true;
  f->dev = (uint64_t)st.st_dev;
  f->ino = (uint64_t)st.st_ino;
  f->size = (uint64_t)st.st_size;
  f->mtime_ns = mtime_ns(&st);
  f->mode = (unsigned)st.st_mode & 07777;
  f->uid = (unsigned)st.st_uid;
  f->gid = (unsigned)st.st_gid;
  return 0;
}

int target_load(struct target_file *f, const char *path, bool missing_ok, bool writable,
                struct vf_diag *d) {
  memset(f, 0, sizeof *f);
  if (!(f->path = strdup(path))) return VF_ENOMEM;
  int fd, rc = open_target(f, missing_ok, &fd, d);
  if (rc) return rc;
  if (fd >= 0) {
    rc = read_target(f, fd, d);
    close(fd);
  } else if (!(f->bytes = strdup(""))) {
    rc = VF_ENOMEM;
  }
  if (rc || !writable) return rc;
  char *dir = dir_of(f->target);
  if (!dir) return VF_ENOMEM;
  rc = check_writable(f, dir, d);
  if (!rc) remove_stale_temps(dir, path_base(f->target));
  free(dir);
  return rc;
}

void target_free(struct target_file *f) {
  free(f->path);
  free(f->target);
  free(f->bytes);
  memset(f, 0, sizeof *f);
}

int target_unchanged(const struct target_file *f, struct vf_diag *d) {
  struct stat st;
  int fd = open(f->target, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && !f->exists) return 0;
  bool same = fd >= 0 && f->exists && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == f->dev &&
              (uint64_t)st.st_ino == f->ino && (uint64_t)st.st_size == f->size &&
              mtime_ns(&st) == f->mtime_ns;
  char *now = NULL;
  size_t len = 0;
  if (same) same = read_all(fd, &now, &len, DOC_MAX_BYTES) == 0 && len == f->len &&
                   memcmp(now, f->bytes, len) == 0;
  free(now);
  if (fd >= 0) close(fd);
  if (same) return 0;
  return diag_at(d, VF_ECHANGED, f->path, UINT64_MAX,
                 "changed on disk while vramfit was working; nothing written, run again");
}

/* Writes bytes to a new temporary file next to target; *tmp gets its path. */
static int write_temp(const char *target, const char *bytes, size_t len, unsigned mode,
                      const struct target_file *owner, char **tmp, struct vf_diag *d) {
  char *dir = dir_of(target);
  struct sbuf name = {0};
  sb_printf(&name, "%s/.%s.vramfit-%ld-XXXXXX", dir ? dir : ".", path_base(target), (long)getpid());
  free(dir);
  *tmp = sb_take(&name, NULL);
  if (!*tmp) return VF_ENOMEM;
  int fd = mkstemp(*tmp);
  if (fd < 0) {
    int rc = io_error(d, target, "cannot create a temporary file");
    free(*tmp);
    *tmp = NULL;
    return rc;
  }
  int rc = write_all(fd, bytes, len);
  if (!rc && fchmod(fd, mode) != 0) rc = VF_EIO;
  if (!rc && owner && owner->exists && fchown(fd, owner->uid, owner->gid) != 0 && errno != EPERM)
    rc = VF_EIO;
  if (!rc && fsync(fd) != 0) rc = VF_EIO;
  if (close(fd) != 0 && !rc) rc = VF_EIO;
  if (rc) {
    io_error(d, target, "cannot write a temporary file");
    unlink(*tmp);
    free(*tmp);
    *tmp = NULL;
  }
  return rc;
}

/* Links the old content under the first free backup name. */
static int write_backup(const struct target_file *f, char **backup, struct vf_diag *d) {
  char *tmp;
  int rc = write_temp(f->target, f->bytes, f->len, f->mode, f, &tmp, d);
  if (rc) return rc;
  for (int i = 0; i < MAX_BACKUPS && !*backup; i++) {
    struct sbuf name = {0};
    if (i == 0) sb_printf(&name, "%s.backup", f->target);
    else sb_printf(&name, "%s.backup.%d", f->target, i);
    char *p = sb_take(&name, NULL);
    if (!p) {
      rc = VF_ENOMEM;
      break;
    }
    if (link(tmp, p) == 0) {
      *backup = p;
      break;
    }
    free(p);
    if (errno != EEXIST) {
      rc = io_error(d, f->path, "cannot write the backup");
      break;
    }
  }
  if (!rc && !*backup)
    rc = diag_at(d, VF_EIO, f->path, UINT64_MAX, "no free backup name (FILE.backup.N)");
  unlink(tmp);
  free(tmp);
  return rc;
}

static unsigned new_file_mode(void) {
  mode_t mask = umask(0);
  umask(mask);
  return 0666u & ~(unsigned)mask;
}

int target_replace(const struct target_file *f, const char *bytes, size_t len, char **backup,
                   struct vf_diag *d) {
  *backup = NULL;
  int rc = target_unchanged(f, d);
  if (!rc && f->exists) rc = write_backup(f, backup, d);
  char *tmp = NULL;
  if (!rc) rc = write_temp(f->target, bytes, len, f->exists ? f->mode : new_file_mode(), f, &tmp, d);
  if (rc) return rc;
  rc = target_unchanged(f, d);
  if (!rc && f->exists && rename(tmp, f->target) != 0) rc = io_error(d, f->path, "cannot replace");
  /* A file that did not exist is linked, not renamed, so one created meanwhile survives. */
  if (!rc && !f->exists && link(tmp, f->target) != 0)
    rc = errno == EEXIST ? target_unchanged(f, d) : io_error(d, f->path, "cannot create");
  if (rc || !f->exists) unlink(tmp);
  free(tmp);
  if (!rc) {
    char *dir = dir_of(f->target);
    if (dir) sync_dir(dir);
    free(dir);
  }
  return rc;
}
