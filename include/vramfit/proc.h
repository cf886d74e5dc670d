/* Processes: names and ancestry from /proc, and the process trees vramfit starts (probe
 * launches, `watch -- CMD`, and any other command the tool runs on the user's behalf).
 *
 * The guarantee: a tree started with vf_proc_spawn() never outlives its vf_proc_end_tree()
 * (or vf_proc_close()). The command runs in its own process group, and the caller becomes a
 * child subreaper (Linux), so a grandchild that leaves the group (setsid) and loses its
 * parent (a double fork) is reparented to the caller instead of init and stays findable.
 * Members of a tree are therefore: every process in its group, and every descendant of the
 * caller. Run one tree at a time: while one runs, any other child of the caller counts as
 * part of it. Nothing here survives a SIGKILL of the caller itself. */
#ifndef VRAMFIT_PROC_H
#define VRAMFIT_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "vramfit/api.h"
#include "vramfit/error.h"

/* The command name of pid ("python3"); VF_ENOTFOUND when it is gone or not visible. */
VF_API int vf_proc_name(pid_t pid, char *buf, size_t size);

/* Whether pid is root or one of root's descendants, right now (for `watch --pid`). */
VF_API bool vf_proc_in_tree(pid_t pid, pid_t root);

struct vf_child {
  pid_t pid;          /* the command; its process group has the same id */
  int out_fd, err_fd; /* read ends of the command's stdout/stderr, or -1 when inherited */
  int pidfd;          /* readable when the command exits; -1 where unsupported */
  bool exited;        /* the command was reaped: code holds its exit code */
  int code;           /* as shells report it: 128 + signal for a killed command */
};

/* A vf_child that holds nothing, for structs set up before any spawn. */
#define VF_CHILD_NONE {.pid = -1, .out_fd = -1, .err_fd = -1, .pidfd = -1}

/* Starts argv[0] (searched in PATH) in a new process group, with default signal dispositions
 * and an empty signal mask. capture: its stdout and stderr go to pipes (non-blocking read
 * ends); null_stdin: its stdin is /dev/null. VF_ENOCMD (d says why) when the command cannot
 * be found or run. */
VF_API int vf_proc_spawn(char *const argv[], bool capture, bool null_stdin, struct vf_child *c,
                         struct vf_diag *d);

/* Reaps the command if it has exited (block: waits for it). Returns 1 once it has, with its
 * exit code in c->code, else 0. Also reaps orphans the caller adopted from the tree. */
VF_API int vf_proc_wait(struct vf_child *c, bool block);

/* Whether pid is a member of c's tree right now (see the top of this file). */
VF_API bool vf_proc_tree_has(const struct vf_child *c, pid_t pid);

/* Sends sig to every live member of the tree (and SIGCONT after it, so that a stopped member
 * can act on it). Returns how many members were signalled. */
VF_API size_t vf_proc_signal_tree(struct vf_child *c, int sig);

/* Ends the whole tree: sig (SIGTERM, or SIGINT for an interrupt) to every member, SIGKILL to
 * whatever is left after grace_s seconds, members that appear meanwhile included; returns when
 * no member is left, every zombie of the caller reaped and the command's code in c->code.
 * VF_EIO when members survive even SIGKILL for 5 s (stuck in the kernel). */
VF_API int vf_proc_end_tree(struct vf_child *c, int sig, double grace_s);

/* Closes the pipes; SIGKILLs and reaps whatever is left of the tree first (an error path
 * that skipped vf_proc_end_tree still leaves nothing behind). */
VF_API void vf_proc_close(struct vf_child *c);

/* ---- stop signals ---- */

/* Catches SIGINT, SIGTERM and SIGHUP instead of dying of them, so that the caller can end its
 * trees first. Returns a descriptor that becomes readable when one arrives (for poll), or -1
 * when it cannot be made. */
VF_API int vf_proc_catch_stop_signals(void);

/* The stop signal caught so far; 0 for none. */
VF_API int vf_proc_stop_signal(void);

/* Dies of sig as if it had never been caught, so that the parent sees the signal. */
VF_API void vf_proc_die_of(int sig);

#endif
