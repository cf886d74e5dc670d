/* vramfit models: the built-in catalogue. */
#include <getopt.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: vramfit models [--json]\n\n"
    "Lists the built-in model catalogue: name, architecture family, parameters.\n"
    "Any name listed here is a valid MODEL argument (case-insensitive).\n\n"
    "  --json   a list of {\"name\", \"family\", \"params\"}\n";

int cmd_models(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  bool json = false;
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == 'j') json = true;
    else if (c == 'h') return fputs(usage, stdout), EXIT_OK;
    else return cli_option_error("models", c, argv);
  }
  if (optind < argc) return cli_usage_error("models", "unexpected argument '%s'", argv[optind]);

  json_t *list = json ? json_array() : NULL;
  if (!json) printf("%-26s %-9s %17s\n", "MODEL", "FAMILY", "PARAMETERS");
  size_t n = vf_catalog_count();
  for (size_t i = 0; i < n; i++) {
    char name[128];
    struct vf_model m;
    struct vf_diag d;
    if (vf_catalog_name(i, name, sizeof name)) continue;
    vf_model_init(&m);
    int rc = vf_model_load(&m, name, &d);
    if (rc) {
      vf_model_cleanup(&m);
      json_decref(list);
      return cli_diag_error("models", rc, &d);
    }
    const char *family = vf_family_name(m.arch.family);
    uint64_t params = vf_model_params(&m);
    if (json) {
      json_array_append_new(list, json_pack("{s:s, s:s, s:I}", "name", name, "family", family,
                                            "params", (json_int_t)params));
    } else {
      char grouped[32];
      cli_group_digits(params, grouped, sizeof grouped);
      printf("%-26s %-9s %17s\n", name, family, grouped);
    }
    vf_model_cleanup(&m);
  }
  return json ? cli_print_json(list) : EXIT_OK;
}
