/* Processes: names and ancestry from /proc, and starting and reaping the command of a tree
 * (its members and their ending are proc_tree.c). */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/diag.h"
#include "sys/proc_internal.h"

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

/* The command name in /proc/<pid>/stat may itself hold ')' and spaces, so the fields after
 * it are found from the last ')'. */
int proc_stat(pid_t pid, struct proc_stat *out) {
  char stat[512];
  if (read_proc(pid, "stat", stat, sizeof stat) <= 0) return VF_ENOTFOUND;
  const char *close = strrchr(stat, ')');
  int ppid, pgrp;
  if (!close || sscanf(close + 1, " %c %d %d", &out->state, &ppid, &pgrp) != 3) return VF_EFORMAT;
  out->pid = pid;
  out->ppid = ppid;
  out->pgrp = pgrp;
  return 0;
}

static pid_t parent_of(pid_t pid) {
  struct proc_stat st;
  return proc_stat(pid, &st) ? 0 : st.ppid;
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
    return diag_at(d, VF_ENOCMD, "", UINT64_MAX, "command not found: %s", cmd);
  return diag_at(d, VF_ENOCMD, "", UINT64_MAX, "cannot run %s: %s", cmd, strerror(err));
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

/* Orphans of the tree come to us instead of init, where they can still be found and ended. */
static void become_subreaper(void) {
#ifdef PR_SET_CHILD_SUBREAPER
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
}

/* The child starts in its own process group (signals for the tree reach every member that
 * stays in it), with default signal handling and an empty mask, whatever ours are. */
static void plan_attributes(posix_spawnattr_t *attr) {
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(attr, &all);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setpgroup(attr, 0);
  posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
}

int vf_proc_spawn(char *const argv[], bool capture, bool null_stdin, struct vf_child *c,
                  struct vf_diag *d) {
  *c = (struct vf_child)VF_CHILD_NONE;
  become_subreaper();
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  plan_attributes(&attr);
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
  if (c->out_fd >= 0) fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
  if (c->err_fd >= 0) fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
  c->pidfd = pidfd_open(c->pid, 0);
  return 0;
}

static int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1; }

void proc_reap(struct vf_child *c) {
  int st;
  for (pid_t r; (r = waitpid(-1, &st, WNOHANG)) > 0 || (r < 0 && errno == EINTR);)
    if (r == c->pid) {
      c->exited = true;
      c->code = exit_code(st);
    }
}

int vf_proc_wait(struct vf_child *c, bool block) {
  if (c->pid <= 0) return VF_EINVAL;
  proc_reap(c);
  if (c->exited || !block) return c->exited;
  int st;
  pid_t r;
  do r = waitpid(c->pid, &st, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) return VF_EIO;
  c->exited = true;
  c->code = exit_code(st);
  return 1;
}

void vf_proc_close(struct vf_child *c) {
  if (c->pid > 0) vf_proc_end_tree(c, SIGKILL, 0);
  close_fd(&c->out_fd);
  close_fd(&c->err_fd);
  close_fd(&c->pidfd);
  c->pid = -1;
}
