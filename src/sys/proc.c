/* Processes: names and ancestry from /proc, and the child that 'vramfit watch -- CMD' runs. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/diag.h"
#include "vramfit/monitor.h"

extern char **environ;

/* Reads the first line of /proc/<pid>/<file> into buf; returns its length or -1. */
static ssize_t read_proc(pid_t pid, const char *file, char *buf, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

int vf_proc_name(pid_t pid, char *buf, size_t size) {
  if (pid <= 0 || read_proc(pid, "comm", buf, size) <= 0) return VF_ENOTFOUND;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* The parent of pid, or 0. The command name in /proc/<pid>/stat may itself hold ')' and
 * spaces, so the fields after it are found from the last ')'. */
static pid_t parent_of(pid_t pid) {
  char stat[512];
  if (read_proc(pid, "stat", stat, sizeof stat) <= 0) return 0;
  const char *close = strrchr(stat, ')');
  char state;
  int ppid;
  if (!close || sscanf(close + 1, " %c %d", &state, &ppid) != 2) return 0;
  return ppid;
}

bool vf_proc_in_tree(pid_t pid, pid_t root) {
  for (int depth = 0; pid > 1 && depth < 128; depth++) {
    if (pid == root) return true;
    pid = parent_of(pid);
  }
  return pid == root;
}

static int spawn_error(int err, const char *cmd, struct vf_diag *d) {
  if (err == ENOENT)
    return vf_diag_at(d, VF_ENOCMD, "", UINT64_MAX, "command not found: %s", cmd);
  return vf_diag_at(d, VF_ENOCMD, "", UINT64_MAX, "cannot run %s: %s", cmd, strerror(err));
}

/* Standard streams for the child: pipes for stdout/stderr, /dev/null for stdin. */
static int plan_streams(posix_spawn_file_actions_t *fa, bool capture, bool null_stdin,
                        int out[2], int err[2]) {
  int rc = 0;
  if (null_stdin) rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
  if (!rc && capture) {
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) return errno;
    rc = posix_spawn_file_actions_adddup2(fa, out[1], 1);
    if (!rc) rc = posix_spawn_file_actions_adddup2(fa, err[1], 2);
  }
  return rc;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

int vf_child_spawn(char *const argv[], bool capture, bool null_stdin, struct vf_child *c,
                   struct vf_diag *d) {
  *c = (struct vf_child){.pid = -1, .out_fd = -1, .err_fd = -1, .pidfd = -1};
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  /* The child starts with default signal handling and an empty mask, whatever ours are. */
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = plan_streams(&fa, capture, null_stdin, out, err);
  if (!rc) rc = posix_spawnp(&c->pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close_fd(&out[1]);
  close_fd(&err[1]);
  if (rc) {
    close_fd(&out[0]);
    close_fd(&err[0]);
    c->pid = -1;
    return spawn_error(rc, argv[0], d);
  }
  c->out_fd = out[0];
  c->err_fd = err[0];
  c->pidfd = pidfd_open(c->pid, 0);
  return 0;
}

int vf_child_wait(struct vf_child *c, bool block, int *code) {
  if (c->pid <= 0) return VF_EINVAL;
  int st;
  pid_t r;
  do r = waitpid(c->pid, &st, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == 0) return 0;
  if (r < 0) return VF_EIO;
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
  c->pid = -1;
  return 1;
}

void vf_child_signal(const struct vf_child *c, int sig) {
  if (c->pid > 0) kill(c->pid, sig);
}

void vf_child_close(struct vf_child *c) {
  close_fd(&c->out_fd);
  close_fd(&c->err_fd);
  close_fd(&c->pidfd);
}
