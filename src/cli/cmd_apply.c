/* Placeholder until the apply subcommand lands; replaced by its own implementation. */
#include "cli/cli.h"

int cmd_apply(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "vramfit apply: not available in this build yet\n");
  return EXIT_INTERNAL;
}
