/* Placeholder until the gpus subcommand lands; replaced by its own implementation. */
#include "cli/cli.h"

int cmd_gpus(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "vramfit gpus: not available in this build yet\n");
  return EXIT_INTERNAL;
}
