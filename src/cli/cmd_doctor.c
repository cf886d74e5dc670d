/* Placeholder until the doctor subcommand lands; replaced by its own implementation. */
#include "cli/cli.h"

int cmd_doctor(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "vramfit doctor: not available in this build yet\n");
  return EXIT_INTERNAL;
}
