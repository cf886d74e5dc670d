/* Shared pieces of the command-line tool. Each subcommand lives in its own cmd_*.c file
 * and is a thin client of the library (include/vramfit.h). */
#ifndef VF_CLI_H
#define VF_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "vramfit.h"

/* Contract exit codes. */
enum { EXIT_OK = 0, EXIT_NO = 1, EXIT_BAD_INPUT = 2, EXIT_ENV = 3, EXIT_INTERNAL = 4 };

/* A subcommand: argv[0] is its name. Returns an exit code. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

int cmd_models(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_gpus(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_history(int argc, char **argv);

/* Maps a VF_E* code to the contract's exit code. */
int cli_exit_code(int err);

/* Prints "vramfit CMD: MESSAGE" on stderr (one line) and returns exit code 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "vramfit CMD: MESSAGE" on stderr (one line) and returns code. */
int cli_error(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The one-line error, exit code 2, for what getopt_long returned as ':' (an option's value
 * is missing) or anything else unknown. Needs opterr = 0 and ':' leading the optstring
 * (after a '+'), so that a missing value is told apart from an unknown option. */
int cli_option_error(const char *cmd, int c, char **argv);

/* Prints "vramfit CMD: <diag>" on stderr and returns the exit code matching err. */
int cli_diag_error(const char *cmd, int err, const struct vf_diag *d);

/* Writes v to stdout as indented JSON followed by a newline, and releases v. */
int cli_print_json(json_t *v);
/* An estimate's breakdown at its peak, as the contract's "breakdown": the five categories,
 * the allocator's slack, and the runtime (CUDA context included). */
json_t *cli_breakdown_json(const struct vf_estimate *e);

/* The Python binding runs commands in-process (api.c): while a capture is set, the JSON a
 * command prints is kept in json (the capture owns it) and its error line in error. */
struct cli_capture {
  json_t *json;
  char error[1400];
};
void cli_capture_to(struct cli_capture *c);

/* The subcommand named by argv[1] (argv[0] is the program), as `vramfit ARGS` runs it. */
int cli_run(int argc, char **argv);

/* True when the user asked for --help (argv scanned up to "--"). */
bool cli_wants_help(int argc, char **argv);

/* Parses a whole non-negative decimal number for flag; prints the error itself. */
int cli_parse_u64(const char *cmd, const char *flag, const char *text, uint64_t *out);

/* "1,234,567". */
void cli_group_digits(uint64_t v, char *buf, size_t size);
/* "13.96 GiB", binary units. */
void cli_format_bytes(uint64_t bytes, char *buf, size_t size);

/* Seconds on a clock that never jumps. */
double cli_monotonic(void);

/* Reads what a non-blocking pipe holds, passing each chunk to sink, and closes it (*fd = -1)
 * at end of file or on an error. Never waits: a grandchild may hold the pipe open after the
 * command itself has ended. */
void cli_drain(int *fd, void (*sink)(void *arg, const char *buf, size_t n), void *arg);

/* Whether to colour output on stream f: a terminal and NO_COLOR unset. */
bool cli_use_color(FILE *f);

#endif
