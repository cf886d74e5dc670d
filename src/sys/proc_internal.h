/* Shared by the two halves of the process code: proc.c (names, spawning, reaping) and
 * proc_tree.c (the members of a tree, ending it, stop signals). */
#ifndef VF_SYS_PROC_INTERNAL_H
#define VF_SYS_PROC_INTERNAL_H

#include "vramfit/proc.h"

struct proc_stat {
  pid_t pid, ppid, pgrp;
  char state; /* 'R', 'S', 'Z' (exited, not reaped), ... */
};

/* The fields of /proc/<pid>/stat vramfit needs. VF_ENOTFOUND when pid is gone. */
int proc_stat(pid_t pid, struct proc_stat *out);

/* Reaps every child of the caller that has exited (the command, and orphans adopted from the
 * tree), recording the command's exit code in c. */
void proc_reap(struct vf_child *c);

#endif
