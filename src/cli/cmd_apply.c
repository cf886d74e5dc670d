/* vramfit apply FILE...: write settings into the user's own config files. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/apply_view.h"

static const char usage[] =
    "usage: vramfit apply FILE... (--plan PLAN.json [--tier T] | --set KEY=VALUE ...)\n"
    "                     [--format F] [--map KEY=PATH] [--create] [--gpus N]\n"
    "                     [--env FILE [--alloc-conf S]] [--dry-run] [--json]\n\n"
    "Writes settings into training config files (YAML or JSON), changing only the bytes of\n"
    "the values it sets: comments, blank lines, indentation, quoting, key order, anchors,\n"
    "flow lists, CRLF line ends and a BOM stay as they were. Every edit is re-read and\n"
    "checked (every other value unchanged) before anything is written; then each file is\n"
    "backed up to the first free FILE.backup, FILE.backup.1, ... (an existing backup is\n"
    "never replaced) and replaced atomically, keeping its mode. Symlinks are followed. The\n"
    "unified diff goes to stdout, notes to stderr.\n\n"
    "KEY is a logical key or a dotted path in the file (data_loader.batch_size=45); a path\n"
    "written with a leading dot (.precision=bf16-true) is always a path, even one named\n"
    "like a logical key:\n"
    "  batch         micro batch per GPU          accumulation  gradient accumulation steps\n"
    "  seq           tokens per sample            zero_stage    0..3 (DeepSpeed)\n"
    "  grad_ckpt     none, full, selective        precision     bf16, fp16, fp32, or\n"
    "                                             bf16-mixed, bf16-true, fp16-mixed, fp16-true\n"
    "  optimizer     adamw, adamw-8bit, paged-adamw-8bit, adafactor, sgd, sgd-momentum, lion\n"
    "  offload       none, or a comma list of optimizer, params, activations\n"
    "Each tool spells these its own way (per_device_train_batch_size, micro_batch_size,\n"
    "train_micro_batch_size_per_gpu, ...); the format is detected from the file's keys. A\n"
    "plain bf16 or fp16 keeps the file's family (Lightning's bf16-true stays true). Notes on\n"
    "stderr say what a tool cannot express (selective checkpointing written as full, ...).\n\n"
    "  --set KEY=VALUE  a setting (repeatable); VALUE \"quoted\" is written as a string\n"
    "  --plan FILE      settings from 'vramfit plan --json' output ('-': standard input)\n"
    "  --tier T         the plan's tier to use: safe, balanced, aggressive\n"
    "                   (default: its \"recommended\")\n"
    "  --format F       auto (default), hf, trl (SFT, DPO, KTO, reward), trl-grpo (GRPO,\n"
    "                   RLOO), lightning, litgpt, deepspeed, axolotl, torchtune,\n"
    "                   llamafactory, hydra\n"
    "  --map KEY=PATH   where a logical key lives in these files (repeatable), e.g.\n"
    "                   --map batch=data_loader.batch_size for a Hydra config\n"
    "  --create         add missing keys (and missing parent mappings)\n"
    "  --gpus N         data-parallel GPUs, for DeepSpeed's train_batch_size and litgpt's\n"
    "                   global_batch_size (default: derived from the file's values)\n"
    "  --env FILE       set PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF (both, same value)\n"
    "                   in a shell env file or launch script; created when missing\n"
    "  --alloc-conf S   the allocator setting for --env, merged into what is there\n"
    "                   (default: the plan's \"alloc_conf\", else expandable_segments:True)\n"
    "  --dry-run        print the diff (and notes) only; write nothing\n"
    "  --json           print {\"dry_run\", \"files\": [{\"file\", \"target\", \"format\", \"backup\",\n"
    "                   \"changes\": [{\"key\", \"path\", \"line\", \"col\", \"old\", \"new\",\n"
    "                   \"created\", \"note\"}], \"diff\"}], \"notes\"} instead\n\n"
    "Consistency across the FILEs of one call: a DeepSpeed JSON's train_batch_size is kept\n"
    "equal to micro x accumulation x GPUs (\"auto\" values are left to the HF Trainer);\n"
    "concrete DeepSpeed batch values must match the TrainingArguments file that names the\n"
    "JSON; a JSON used by Lightning must not hold gradient_accumulation_steps; DeepSpeed\n"
    "offload_param needs ZeRO stage 3; litgpt's global_batch_size is micro x accumulation\n"
    "x devices x num_nodes; a Hydra value that a defaults entry after _self_ overrides is\n"
    "written into that entry's config when it is one of the FILEs, else refused. Edits\n"
    "that would break these are refused.\n\n"
    "Plan JSON (the fields apply reads):\n"
    "  {\"recommended\": {\"batch\": 8, \"accumulation\": 4, \"seq\": 2048, \"grad_ckpt\": \"full\",\n"
    "                   \"optimizer\": \"adamw\", \"precision\": \"bf16\", \"shard\": \"zero2\",\n"
    "                   \"offload\": \"none\", \"set\": {\"dotted.path\": VALUE}},\n"
    "   \"tiers\": {\"safe\": {...}, \"balanced\": {...}, \"aggressive\": {...}},\n"
    "   \"stages\": [{\"name\": \"02_text\", \"batch\": 4, \"set\": {\"n_negatives\": 24}},\n"
    "              {\"file\": \"conf/text_curriculum/03_text.yaml\", ...}],\n"
    "   \"alloc_conf\": \"expandable_segments:True\", \"gpus\": 2}\n"
    "A stage applies to the FILE it names by path, base name, or base name without\n"
    "extension; other FILEs get \"recommended\" (or --tier). shard zero1..3 becomes\n"
    "zero_stage; method and the figures are not written. A plan field with no place in the\n"
    "files is a note, unless the tool's default for it differs from the plan.\n\n"
    "Exit: 0 written (or nothing to change); 2 bad input, one line \"FILE:LINE:COL: why\",\n"
    "nothing written.\n";

struct args {
  const char **files;
  size_t n_files;
  struct vf_setting *sets, *maps;
  size_t n_sets, n_maps;
  const char *plan, *tier, *env, *alloc_conf;
  struct vf_apply_opts o;
  bool json;
};

static int add_pair(struct vf_setting **list, size_t *n, const char *flag, char *text) {
  char *eq = strchr(text, '=');
  if (!eq || eq == text) return cli_usage_error("apply", "%s expects KEY=VALUE, got '%s'", flag, text);
  struct vf_setting *grown = realloc(*list, (*n + 1) * sizeof *grown);
  if (!grown) return cli_usage_error("apply", "out of memory");
  *eq = '\0';
  grown[(*n)++] = (struct vf_setting){text, eq + 1, 0};
  *list = grown;
  return 0;
}

static int parse_args(int argc, char **argv, struct args *a) {
  static const struct option opts[] = {
      {"set", required_argument, NULL, 's'},    {"plan", required_argument, NULL, 'p'},
      {"tier", required_argument, NULL, 't'},   {"format", required_argument, NULL, 'f'},
      {"map", required_argument, NULL, 'm'},    {"create", no_argument, NULL, 'c'},
      {"gpus", required_argument, NULL, 'g'},   {"env", required_argument, NULL, 'e'},
      {"alloc-conf", required_argument, NULL, 'a'}, {"dry-run", no_argument, NULL, 'n'},
      {"json", no_argument, NULL, 'j'},         {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0; /* getopt's own message would make the error two lines */
  for (int c; (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1;) {
    int rc = 0;
    switch (c) {
    case 's': rc = add_pair(&a->sets, &a->n_sets, "--set", optarg); break;
    case 'm': rc = add_pair(&a->maps, &a->n_maps, "--map", optarg); break;
    case 'p': a->plan = optarg; break;
    case 't': a->tier = optarg; break;
    case 'f': a->o.format = optarg; break;
    case 'c': a->o.create = 1; break;
    case 'e': a->env = optarg; break;
    case 'a': a->alloc_conf = optarg; break;
    case 'n': a->o.dry_run = 1; break;
    case 'j': a->json = true; break;
    case 'g':
      rc = cli_parse_u64("apply", "--gpus", optarg, &a->o.gpus);
      if (!rc && a->o.gpus == 0) rc = cli_usage_error("apply", "--gpus expects at least 1");
      break;
    default:
      return cli_option_error("apply", c, argv);
    }
    if (rc) return EXIT_BAD_INPUT;
  }
  a->files = (const char **)argv + optind;
  a->n_files = (size_t)(argc - optind);
  a->o.maps = a->maps;
  a->o.n_maps = a->n_maps;
  if (!a->n_files && !a->env) return cli_usage_error("apply", "no FILE given; see 'vramfit apply --help'");
  if (a->n_files && !a->plan && !a->n_sets)
    return cli_usage_error("apply", "nothing to set: give --plan or --set KEY=VALUE");
  if (a->tier && !a->plan) return cli_usage_error("apply", "--tier needs --plan");
  if (a->alloc_conf && !a->env) return cli_usage_error("apply", "--alloc-conf needs --env FILE");
  return 0;
}

static int run(struct args *a, struct vf_apply *r, struct vf_diag *d) {
  struct vf_plan plan;
  vf_plan_init(&plan);
  struct vf_apply_input *shared = calloc(a->n_files ? a->n_files : 1, sizeof *shared);
  int rc = shared ? 0 : VF_ENOMEM;
  const struct vf_apply_input *in = shared;
  if (!rc && a->plan) {
    rc = vf_plan_load(&plan, a->plan, a->tier, a->files, a->n_files, a->sets, a->n_sets, d);
    in = plan.inputs;
    if (!a->o.gpus) a->o.gpus = plan.gpus;
  }
  for (size_t i = 0; !rc && !a->plan && i < a->n_files; i++)
    shared[i] = (struct vf_apply_input){a->files[i], a->sets, a->n_sets};
  if (!rc && a->n_files) rc = vf_apply_prepare(r, in, a->n_files, &a->o, d);
  const char *conf = a->alloc_conf ? a->alloc_conf : plan.alloc_conf ? plan.alloc_conf : "expandable_segments:True";
  if (!rc && a->env) rc = vf_apply_env(r, a->env, conf, &a->o, d);
  if (!rc && !a->json) apply_view_diffs(r);
  if (!rc && !a->o.dry_run) rc = vf_apply_commit(r, d);
  vf_plan_cleanup(&plan);
  free(shared);
  return rc;
}

int cmd_apply(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) return fputs(usage, stdout), EXIT_OK;
  struct args a = {0};
  int code = parse_args(argc, argv, &a);
  struct vf_apply r;
  vf_apply_init(&r);
  if (!code) {
    struct vf_diag d;
    vf_diag_clear(&d);
    int rc = run(&a, &r, &d);
    if (rc && !d.msg[0]) d.code = rc;
    if (rc) code = cli_diag_error("apply", rc, &d);
    else if (a.json) code = cli_print_json(apply_view_json(&r, a.o.dry_run));
    else if (!a.o.dry_run) apply_view_summary(&r);
  }
  vf_apply_cleanup(&r);
  free(a.sets);
  free(a.maps);
  return code;
}
