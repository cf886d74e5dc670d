/* The entry point of the Python binding (python/vramfit/binding.py, through ctypes): one
 * vramfit command run in-process, its --json output handed back as text instead of printed.
 * Built into libvramfit.so with the commands, not into the vramfit executable. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "vramfit/command.h"

int vf_cli_json(int argc, char **argv, char **json, char **error) {
  *json = *error = NULL;
  char **args = calloc((size_t)argc + 2, sizeof *args);
  if (!args) return EXIT_INTERNAL;
  args[0] = "vramfit";
  memcpy(args + 1, argv, (size_t)argc * sizeof *argv);
  struct cli_capture c = {0};
  cli_capture_to(&c);
  int code = cli_run(argc + 1, args);
  cli_capture_to(NULL);
  free(args);
  if (c.json) *json = json_dumps(c.json, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (c.error[0]) *error = strdup(c.error);
  json_decref(c.json);
  return code;
}
