/* vramfit models: the built-in catalogue, or the entries a word finds in it. */
#include <getopt.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: vramfit models [--json] [WORD]\n\n"
    "Lists the built-in model catalogue: name, architecture family, parameters, the Hugging\n"
    "Face Hub id its config was taken from, and its aliases (the Hub ids and names of\n"
    "variants with the same architecture: instruct, chat, base). With WORD, only the\n"
    "entries whose name, Hub id or an alias contains it (any case); exit 1 when none does.\n"
    "Every name, Hub id and alias listed is a valid MODEL argument (case-insensitive).\n\n"
    "  --json   a list of {\"name\", \"family\", \"params\", \"hub_id\", \"aliases\"}\n";

static json_t *entry_json(const struct vf_catalog_entry *e, const struct vf_model *m) {
  json_t *aliases = json_array();
  for (size_t i = 0; i < e->n_aliases; i++) json_array_append_new(aliases, json_string(e->aliases[i]));
  return json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", e->name, "family",
                   vf_family_name(m->arch.family), "params", (json_int_t)vf_model_params(m),
                   "hub_id", e->hub_id, "aliases", aliases);
}

static void entry_text(const struct vf_catalog_entry *e, const struct vf_model *m) {
  char grouped[32];
  cli_group_digits(vf_model_params(m), grouped, sizeof grouped);
  printf("%-26s %-9s %17s  %s\n", e->name, vf_family_name(m->arch.family), grouped, e->hub_id);
  for (size_t i = 0; i < e->n_aliases; i++) printf("%s%s", i ? ", " : "  aliases: ", e->aliases[i]);
  if (e->n_aliases) putchar('\n');
}

/* Lists one entry: printed, or appended to list under --json. */
static int list_entry(const struct vf_catalog_entry *e, json_t *list) {
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_model_load(&m, e->name, &d);
  if (!rc && list) json_array_append_new(list, entry_json(e, &m));
  else if (!rc) entry_text(e, &m);
  vf_model_cleanup(&m);
  return rc ? cli_diag_error("models", rc, &d) : EXIT_OK;
}

/* Lists the entries word finds (all without one); EXIT_NO when it finds none. */
static int list_catalog(const char *word, json_t *list) {
  struct vf_catalog c;
  struct vf_diag d;
  vf_catalog_init(&c);
  int rc = vf_catalog_load(&c, &d);
  if (rc) return cli_diag_error("models", rc, &d);
  size_t shown = 0;
  for (size_t i = 0; i < c.n && !rc; i++) {
    if (word && !vf_catalog_entry_matches(&c.entries[i], word)) continue;
    if (!list && !shown) printf("%-26s %-9s %17s  %s\n", "MODEL", "FAMILY", "PARAMETERS", "HUB ID");
    shown++;
    rc = list_entry(&c.entries[i], list);
  }
  vf_catalog_cleanup(&c);
  return rc ? rc : shown || !word ? EXIT_OK : EXIT_NO;
}

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
  if (argc - optind > 1) return cli_usage_error("models", "expects at most one WORD, got '%s' too", argv[optind + 1]);
  const char *word = optind < argc ? argv[optind] : NULL;
  json_t *list = json ? json_array() : NULL;
  int code = list_catalog(word, list);
  if (!json) return code == EXIT_NO ? cli_error("models", code, "no catalogue model matches '%s'", word) : code;
  if (code != EXIT_OK && code != EXIT_NO) return json_decref(list), code;
  int printed = cli_print_json(list); /* under --json, an empty list is the answer "none" */
  return printed ? printed : code;
}
