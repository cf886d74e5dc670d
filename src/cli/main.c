/* vramfit's entry point: the dispatcher (dispatch.c), which the Python binding's library
 * (api.c) shares. */
#include "cli/cli.h"

int main(int argc, char **argv) { return cli_run(argc, argv); }
