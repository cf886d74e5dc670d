/* vramfit gpus: the GPUs NVML sees, or the built-in GPU catalogue. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gpu_view.h"

static const char usage[] =
    "usage: vramfit gpus [--json] [--catalog]\n\n"
    "Lists the GPUs the NVIDIA driver sees: name, UUID, memory, utilization, temperature,\n"
    "power, and the processes holding memory on each (PID, command, memory).\n\n"
    "  --catalog  list the built-in GPU catalogue instead (names for --gpu; no driver needed)\n"
    "  --json     a list of {\"index\", \"name\", \"uuid\", \"total_bytes\", \"used_bytes\",\n"
    "             \"free_bytes\", \"utilization_gpu\", \"processes\": [{\"pid\", \"used_bytes\",\n"
    "             \"name\"}], ...}; with --catalog, the catalogue entries\n\n"
    "VRAMFIT_NVML names the NVML library to load instead of libnvidia-ml.so.1.\n"
    "Exit 3 when there is no NVIDIA driver.\n";

static json_t *catalog_json(const struct vf_gpu_spec *g) {
  json_t *aliases = json_array();
  char copy[sizeof g->aliases];
  snprintf(copy, sizeof copy, "%s", g->aliases);
  for (char *save, *a = strtok_r(copy, ",", &save); a; a = strtok_r(NULL, ",", &save))
    json_array_append_new(aliases, json_string(a));
  char cc[16];
  snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
  return json_pack("{s:s, s:o, s:s, s:s, s:s, s:o, s:I, s:f, s:f, s:f, s:f}", "name", g->name,
                   "aliases", aliases, "full_name", g->full_name, "vendor", g->vendor,
                   "architecture", g->arch, "compute_capability",
                   g->cc_major ? json_string(cc) : json_null(), "capacity_bytes",
                   (json_int_t)g->capacity_bytes, "bandwidth_gbps", g->bandwidth_gbps,
                   "bf16_tflops", g->bf16_tflops, "fp16_tflops", g->fp16_tflops, "fp32_tflops",
                   g->fp32_tflops);
}

static int list_catalog(bool json) {
  json_t *list = json ? json_array() : NULL;
  if (!json)
    printf("%-16s %10s %5s %8s %8s %8s %7s  %s\n", "NAME", "MEMORY", "CC", "GB/s", "BF16",
           "FP16", "FP32", "FULL NAME");
  size_t n = vf_gpu_catalog_count();
  for (size_t i = 0; i < n; i++) {
    struct vf_gpu_spec g;
    if (vf_gpu_catalog_get(i, &g)) continue;
    if (json) {
      json_array_append_new(list, catalog_json(&g));
      continue;
    }
    char mem[32], cc[8] = "-";
    cli_format_bytes(g.capacity_bytes, mem, sizeof mem);
    if (g.cc_major) snprintf(cc, sizeof cc, "%d.%d", g.cc_major, g.cc_minor);
    printf("%-16s %10s %5s %8.0f %8.1f %8.1f %7.1f  %s\n", g.name, mem, cc, g.bandwidth_gbps,
           g.bf16_tflops, g.fp16_tflops, g.fp32_tflops, g.full_name);
  }
  if (!json)
    printf("\nTFLOPS are dense tensor-core rates (0: no BF16); aliases: 'vramfit gpus "
           "--catalog --json'.\n");
  return json ? cli_print_json(list) : EXIT_OK;
}

static void print_procs(const struct vf_gpu_sample *s) {
  for (size_t i = 0; i < s->nprocs; i++) {
    const struct vf_gpu_proc *p = &s->procs[i];
    char mem[32];
    gpu_view_bytes(p->used_bytes, mem, sizeof mem);
    printf("    pid %-8u %-24s %12s\n", p->pid, p->name[0] ? p->name : "?", mem);
  }
  if ((s->fields & VF_FIELD_PROCS) && s->nprocs == 0) printf("    no processes\n");
}

static void print_driver(struct vf_nvml *n, bool color) {
  char version[80];
  int cuda;
  vf_nvml_driver(n, version, sizeof version, &cuda);
  printf("%sdriver %s, CUDA %d.%d, %u GPU%s%s\n", color ? "\033[1m" : "",
         version[0] ? version : "?", cuda / 1000, cuda % 1000 / 10, vf_nvml_count(n),
         vf_nvml_count(n) == 1 ? "" : "s", color ? "\033[0m" : "");
}

static int list_devices(bool json) {
  struct vf_nvml *n;
  int rc = gpu_view_open("gpus", &n);
  if (rc) return rc;
  unsigned count = vf_nvml_count(n);
  struct vf_gpu_sample *s = malloc(sizeof *s);
  json_t *list = json ? json_array() : NULL;
  if (!s) count = 0;
  if (!json) print_driver(n, cli_use_color(stdout));
  for (unsigned i = 0; i < count; i++) {
    int err = vf_nvml_sample(n, i, s);
    if (json) {
      json_array_append_new(list, gpu_view_json(s, err));
      continue;
    }
    char line[512];
    gpu_view_line(s, err, line, sizeof line);
    printf("%s\n", line);
    if (s->uuid[0]) printf("    %s\n", s->uuid);
    if (!err) print_procs(s);
  }
  free(s);
  vf_nvml_close(n);
  if (count == 0 && !json) {
    json_decref(list);
    fprintf(stderr, "vramfit gpus: the NVIDIA driver reports no GPU\n");
    return EXIT_ENV;
  }
  return json ? cli_print_json(list) : EXIT_OK;
}

int cmd_gpus(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"catalog", no_argument, NULL, 'c'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  bool json = false, catalog = false;
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == 'j') json = true;
    else if (c == 'c') catalog = true;
    else if (c == 'h') return fputs(usage, stdout), EXIT_OK;
    else return cli_option_error("gpus", c, argv);
  }
  if (optind < argc) return cli_usage_error("gpus", "unexpected argument '%s'", argv[optind]);
  return catalog ? list_catalog(json) : list_devices(json);
}
