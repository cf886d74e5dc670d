/* Running a vramfit command in-process: what the Python binding (python/vramfit/binding.py,
 * through ctypes) calls in libvramfit.so, the commands built in. The vramfit executable has
 * the same commands as its main(). */
#ifndef VRAMFIT_COMMAND_H
#define VRAMFIT_COMMAND_H

#include <stddef.h>

#include "vramfit/api.h"

/* Runs `vramfit ARGV...` (argv[0] is the command's name, not the program's). *json gets the
 * JSON the command printed (NULL: none) and *error its one-line error (NULL: none), both
 * freed with vf_free(). Returns the command's exit status (0 ok, 1 no, 2 bad input,
 * 3 environment, 4 internal). */
VF_API int vf_cli_json(int argc, char **argv, char **json, char **error);

/* sizeof(struct vf_probe) (vramfit/probe.h), for a caller that holds the search as opaque
 * bytes and drives it through the vf_probe_* functions (the binding's find_max_batch). */
VF_API size_t vf_probe_size(void);

/* Adds a run measured outside the commands (a training script's, through the binding) to
 * the history store (vramfit/history.h): run_json is an object with "source" (up to 7
 * characters), "command", "outcome" and optionally "setup" (an object, kept as canonical
 * JSON), "batch", "exit_code", "peak_device_bytes", "gpu", "gpu_uuid", "driver", "seconds"
 * and "when" (seconds since 1970; default now). Returns 0, 2 with *error (vf_free) for a bad
 * object, 3 when the store cannot be opened or written. */
VF_API int vf_history_record(const char *run_json, char **error);

#endif
