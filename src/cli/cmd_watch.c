/* Placeholder until the watch subcommand lands; replaced by its own implementation. */
#include "cli/cli.h"

int cmd_watch(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "vramfit watch: not available in this build yet\n");
  return EXIT_INTERNAL;
}
