/* vramfit inspect MODEL: what the model is made of. */
#include <getopt.h>
#include <string.h>

#include "cli/cli.h"

static const char usage[] =
    "usage: vramfit inspect MODEL [--json] [--tensors]\n\n"
    "Describes a model: family, dimensions, parameter counts (total, embedding,\n"
    "non-embedding, per projection kind), stored dtype and bytes.\n\n"
    "MODEL is a config.json, a model folder, a .safetensors file, a\n"
    "model.safetensors.index.json, a .gguf file, a Hub id (Org/Name) of the local Hugging\n"
    "Face Hub cache, or a catalogue name, Hub id or alias ('vramfit models'). When a\n"
    "checkpoint is given its real tensors win, and disagreements with the config are\n"
    "listed.\n\n"
    "  --json      machine-readable output\n"
    "  --tensors   list every tensor (name, shape, dtype)\n";

static json_t *shape_json(const struct vf_tensor *t) {
  json_t *s = json_array();
  for (uint32_t i = 0; i < t->ndim; i++) json_array_append_new(s, json_integer((json_int_t)t->shape[i]));
  return s;
}

static json_t *inspect_json(const struct vf_model *m, bool tensors, uint64_t bytes) {
  uint64_t by_kind[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(m, by_kind);
  uint64_t params = vf_model_params(m), emb = vf_model_embedding_params(m);
  json_t *kinds = json_object();
  for (int k = 0; k < VF_KIND_PUBLIC_COUNT; k++)
    json_object_set_new(kinds, vf_kind_name((enum vf_kind)k), json_integer((json_int_t)by_kind[k]));
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(m->name));
  json_object_set_new(o, "family", m->has_arch ? json_string(vf_family_name(m->arch.family)) : json_null());
  json_object_set_new(o, "model_type", m->has_arch ? json_string(m->arch.model_type) : json_null());
  json_object_set_new(o, "source", json_string(m->source ? m->source : m->name));
  json_object_set_new(o, "params", json_integer((json_int_t)params));
  json_object_set_new(o, "embedding_params", json_integer((json_int_t)emb));
  json_object_set_new(o, "non_embedding_params", json_integer((json_int_t)(params - emb)));
  json_object_set_new(o, "dtype", json_string(vf_dtype_name(vf_model_main_dtype(m))));
  json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
  json_object_set_new(o, "by_kind", kinds);
  if (m->has_arch) {
    const struct vf_arch *a = &m->arch;
    json_object_set_new(o, "dims", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}",
        "hidden", (json_int_t)a->hidden, "layers", (json_int_t)a->layers,
        "heads", (json_int_t)a->heads, "kv_heads", (json_int_t)a->kv_heads,
        "head_dim", (json_int_t)a->head_dim, "intermediate", (json_int_t)a->intermediate,
        "vocab", (json_int_t)a->vocab, "max_positions", (json_int_t)a->max_positions,
        "experts", (json_int_t)a->experts, "experts_per_token", (json_int_t)a->experts_per_token,
        "tied_embeddings", a->tied_embeddings));
  }
  json_t *notes = json_array();
  for (size_t i = 0; i < m->n_notes; i++) json_array_append_new(notes, json_string(m->notes[i]));
  json_object_set_new(o, "notes", notes);
  if (tensors) {
    json_t *list = json_array();
    for (size_t i = 0; i < m->n_tensors; i++) {
      const struct vf_tensor *t = &m->tensors[i];
      json_array_append_new(list, json_pack("{s:s, s:o, s:s, s:s}", "name", t->name, "shape",
                                            shape_json(t), "dtype", vf_dtype_name(t->dtype),
                                            "kind", vf_kind_name(t->kind)));
    }
    json_object_set_new(o, "tensors", list);
  }
  return o;
}

static void print_count(const char *label, uint64_t v) {
  char g[32];
  cli_group_digits(v, g, sizeof g);
  printf("  %-18s %17s\n", label, g);
}

static void print_tensors(const struct vf_model *m) {
  printf("\n  %-60s %-22s %s\n", "TENSOR", "SHAPE", "DTYPE");
  for (size_t i = 0; i < m->n_tensors; i++) {
    const struct vf_tensor *t = &m->tensors[i];
    char shape[64];
    size_t o = 0;
    for (uint32_t k = 0; k < t->ndim && o < sizeof shape; k++)
      o += snprintf(shape + o, sizeof shape - o, "%s%llu", k ? " x " : "", (unsigned long long)t->shape[k]);
    if (t->ndim == 0) snprintf(shape, sizeof shape, "scalar");
    printf("  %-60s %-22s %s\n", t->name, shape, vf_dtype_name(t->dtype));
  }
}

static void inspect_text(const struct vf_model *m, bool tensors, uint64_t bytes) {
  const struct vf_arch *a = &m->arch;
  printf("%s\n", m->name);
  if (m->has_arch) {
    printf("  family %s (model_type %s), from %s\n", vf_family_name(a->family), a->model_type,
           m->source ? m->source : m->name);
    printf("  hidden %llu, layers %llu, heads %llu (kv %llu, head_dim %llu), intermediate %llu, "
           "vocab %llu%s\n",
           (unsigned long long)a->hidden, (unsigned long long)a->layers, (unsigned long long)a->heads,
           (unsigned long long)a->kv_heads, (unsigned long long)a->head_dim,
           (unsigned long long)a->intermediate, (unsigned long long)a->vocab,
           a->tied_embeddings ? ", tied embeddings" : "");
    if (a->experts)
      printf("  experts %llu, %llu per token\n", (unsigned long long)a->experts,
             (unsigned long long)a->experts_per_token);
  } else {
    printf("  from %s (no config: dimensions unknown)\n", m->source ? m->source : m->name);
  }
  uint64_t params = vf_model_params(m), emb = vf_model_embedding_params(m);
  print_count("parameters", params);
  print_count("  embedding", emb);
  print_count("  non-embedding", params - emb);
  char human[32];
  cli_format_bytes(bytes, human, sizeof human);
  char g[32];
  cli_group_digits(bytes, g, sizeof g);
  printf("  %-18s %17s  (%s as %s)\n", "weight bytes", g, human, vf_dtype_name(vf_model_main_dtype(m)));
  uint64_t by_kind[VF_KIND_PUBLIC_COUNT];
  vf_model_by_kind(m, by_kind);
  printf("  parameters by kind:\n");
  for (int k = 0; k < VF_KIND_PUBLIC_COUNT; k++) {
    if (!by_kind[k]) continue;
    char label[32];
    snprintf(label, sizeof label, "  %s", vf_kind_name((enum vf_kind)k));
    print_count(label, by_kind[k]);
  }
  if (m->n_notes) {
    printf("  config and checkpoint disagree (the checkpoint wins):\n");
    for (size_t i = 0; i < m->n_notes; i++) printf("    %s\n", m->notes[i]);
  }
  if (tensors) print_tensors(m);
}

int cmd_inspect(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"tensors", no_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  bool json = false, tensors = false;
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    if (c == 'j') json = true;
    else if (c == 't') tensors = true;
    else if (c == 'h') return fputs(usage, stdout), EXIT_OK;
    else return cli_option_error("inspect", c, argv);
  }
  if (optind != argc - 1)
    return cli_usage_error("inspect", optind == argc ? "MODEL is missing; see 'vramfit inspect --help'"
                                                     : "expects exactly one MODEL");
  struct vf_model m;
  struct vf_diag d;
  vf_model_init(&m);
  int rc = vf_model_load(&m, argv[optind], &d);
  if (rc) {
    vf_model_cleanup(&m);
    return cli_diag_error("inspect", rc, &d);
  }
  uint64_t bytes = 0;
  if (vf_model_bytes(&m, &bytes) != 0) bytes = 0; /* unknown dtypes: size not knowable */
  int code = EXIT_OK;
  if (json) code = cli_print_json(inspect_json(&m, tensors, bytes));
  else inspect_text(&m, tensors, bytes);
  vf_model_cleanup(&m);
  return code;
}
