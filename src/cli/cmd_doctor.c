/* vramfit doctor: checks the environment a training run meets and explains an
 * out-of-memory report found in its log. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/doctor.h"
#include "cli/history_cli.h"

static const char usage[] =
    "usage: vramfit doctor [--log FILE] [--plan PLAN.json] [--json]\n\n"
    "Checks what the GPU memory guides ask you to check by hand: the NVIDIA driver, other\n"
    "processes holding GPU memory and how much, the allocator variables\n"
    "(PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF) and what they change,\n"
    "CUDA_VISIBLE_DEVICES, and free memory against a plan.\n\n"
    "  --log FILE   a training log: finds the out-of-memory report of PyTorch (0.x to 2.x),\n"
    "               CUDA, cuBLAS, cuDNN, NCCL, JAX/XLA, TensorFlow or the host allocator, reads\n"
    "               its numbers and explains the likely cause: fragmentation, another process\n"
    "               (or memory outside PyTorch), a leak, a per-process memory limit, a GPU that\n"
    "               was not full, or a setting too large for the GPU ('vramfit watch --log'\n"
    "               files count too)\n"
    "  --plan FILE  'vramfit plan --json' (or 'estimate --json') output: does its peak fit in\n"
    "               the memory free now? (default: the last plan 'vramfit plan' made for\n"
    "               this project: made in this folder's git work tree, or of a config in\n"
    "               it)\n"
    "  --json       print {\"findings\": [{\"level\", \"topic\", \"message\"}], \"problems\",\n"
    "               \"log\": {\"file\", \"report\": null | {\"source\", \"certain\", \"line\", \"count\",\n"
    "               \"gpu\", \"excerpt\", \"progress_lines\", \"leak_warning\", \"numbers\": {...},\n"
    "               \"processes\": [{\"pid\", \"bytes\", \"this_run\"}], \"cause\", \"explanation\",\n"
    "               \"fix\"}}} instead\n\n"
    "Exit 0 when nothing is wrong, 1 when a problem was found, 2 for an unreadable file,\n"
    "3 when there is neither a driver to check nor a log to read. With --log, a machine\n"
    "without a driver is no problem: the log is read and judged alone.\n";

#define NAME "doctor"

struct args {
  const char *log, *plan;
  bool json;
};

static int parse_args(int argc, char **argv, struct args *a) {
  static const struct option opts[] = {{"log", required_argument, NULL, 'l'},
                                       {"plan", required_argument, NULL, 'p'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == 'l') a->log = optarg;
    else if (c == 'p') a->plan = optarg;
    else if (c == 'j') a->json = true;
    else return cli_option_error(NAME, c, argv);
  }
  if (optind < argc) return cli_usage_error(NAME, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* Without --plan: the last plan 'vramfit plan' kept for this project, when there is one.
 * Without a GPU here it is only named: the log of a run elsewhere is no reason to fail. */
static int check_last_plan(struct doctor *d) {
  char *json, *about;
  if (history_last_plan(NAME, &json, &about)) return 0;
  doctor_report(d, DOCTOR_INFO, "plan", "the last plan made for this project: %s", about);
  int rc = d->nvml ? doctor_check_plan(d, about, json) : 0;
  free(json);
  free(about);
  return rc;
}

static int run(struct doctor *d, const struct args *a) {
  struct vf_diag diag;
  vf_diag_clear(&diag);
  bool driver = vf_nvml_open(&d->nvml, &diag) == 0;
  if (!d->json) printf("environment\n");
  /* Reading a log needs no GPU: without one, the missing driver is only said. */
  if (!driver) doctor_report(d, a->log ? DOCTOR_INFO : DOCTOR_FAIL, "driver", "%s%s", diag.msg,
                             a->log ? " (the log is read all the same)" : "");
  doctor_check_env(d);
  int rc = a->plan ? doctor_check_plan(d, a->plan, NULL) : check_last_plan(d);
  if (!rc && a->log) rc = doctor_check_log(d, a->log);
  vf_nvml_close(d->nvml);
  if (rc) return rc;
  if (d->json) {
    json_object_set_new(d->json, "problems", json_integer(d->problems));
    cli_print_json(json_incref(d->json));
  }
  if (!driver && !a->log) return EXIT_ENV;
  if (!d->json) printf("\n%u problem%s found\n", d->problems, d->problems == 1 ? "" : "s");
  return d->problems ? EXIT_NO : EXIT_OK;
}

int cmd_doctor(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct args a = {0};
  int code = parse_args(argc, argv, &a);
  if (code) return code;
  struct doctor d = {.color = !a.json && cli_use_color(stdout), .gpu = -1};
  if (a.json && !(d.json = json_pack("{s:[], s:n}", "findings", "log"))) return EXIT_INTERNAL;
  code = run(&d, &a);
  json_decref(d.json);
  return code;
}
