/* vramfit: git-style dispatcher. Everything else is in the subcommand files. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

struct command {
  const char *name;
  cli_cmd_fn fn;
  const char *summary;
};

static const struct command commands[] = {
    {"models", cmd_models, "list the built-in model catalogue"},
    {"inspect", cmd_inspect, "describe a model: parameters, dtypes, tensors"},
    {"estimate", cmd_estimate, "peak GPU memory of the training run"},
    {"plan", cmd_plan, "the best setting that fits a GPU"},
    {"apply", cmd_apply, "write settings into training config files"},
    {"gpus", cmd_gpus, "list GPUs (NVML) or the GPU catalogue"},
    {"watch", cmd_watch, "monitor GPU memory, warn about leaks, under-use and unused memory"},
    {"doctor", cmd_doctor, "check the environment and explain an OOM log"},
    {"probe", cmd_probe, "find the largest batch that fits by running your command"},
    {"history", cmd_history, "the runs probe and watch measured on this machine"},
    {"trace", cmd_trace, "measure the framework's own training step on the CPU (no GPU)"},
};

static void usage(FILE *out) {
  fprintf(out, "usage: vramfit [--version] [--help] COMMAND [ARGS]\n\n"
               "Will this training run fit on my GPU, and what is the best setting that does?\n\n"
               "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'vramfit COMMAND --help' describes a command.\n");
}

int cli_run(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_BAD_INPUT;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    usage(stdout);
    return EXIT_OK;
  }
  if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
    printf("vramfit %s\n", VF_VERSION);
    return EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    if (strcmp(name, commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "vramfit: '%s' is not a command; see 'vramfit --help'\n", name);
  return EXIT_BAD_INPUT;
}
