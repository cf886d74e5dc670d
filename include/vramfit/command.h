/* Running a vramfit command in-process: what the Python binding (python/vramfit/binding.py,
 * through ctypes) calls in libvramfit.so, the commands built in. The vramfit executable has
 * the same commands as its main(). */
#ifndef VRAMFIT_COMMAND_H
#define VRAMFIT_COMMAND_H

#include "vramfit/api.h"

/* Runs `vramfit ARGV...` (argv[0] is the command's name, not the program's). *json gets the
 * JSON the command printed (NULL: none) and *error its one-line error (NULL: none), both
 * freed with vf_free(). Returns the command's exit status (0 ok, 1 no, 2 bad input,
 * 3 environment, 4 internal). */
VF_API int vf_cli_json(int argc, char **argv, char **json, char **error);

#endif
