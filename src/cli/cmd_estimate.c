/* Placeholder until the estimate subcommand lands; replaced by its own implementation. */
#include "cli/cli.h"

int cmd_estimate(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "vramfit estimate: not available in this build yet\n");
  return EXIT_INTERNAL;
}
