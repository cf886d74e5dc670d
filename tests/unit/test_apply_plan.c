/* Plans, format detection, groups of files and the rules that tie them together, through
 * the public apply API (nothing is written: only vf_apply_prepare runs). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "tmpdir.h"
#include "vramfit.h"

static char dir[512];

static const char *put(const char *name, const char *text) {
  static char paths[8][1024];
  static int next;
  char *p = paths[next++ % 8];
  vf_test_write(dir, name, text, strlen(text), p, 1024);
  return p;
}

/* Prepares one group (all files share settings); returns the code, r filled. */
static int prepare(struct vf_apply *r, const char *const *files, size_t n, const struct vf_setting *s,
                   size_t ns, int create, struct vf_diag *d) {
  struct vf_apply_input in[8];
  for (size_t i = 0; i < n; i++) in[i] = (struct vf_apply_input){files[i], s, ns};
  struct vf_apply_opts o = {.create = create, .dry_run = 1};
  vf_apply_init(r);
  vf_diag_clear(d);
  return vf_apply_prepare(r, in, n, &o, d);
}

static const struct vf_change *change(const struct vf_apply_file *f, const char *path) {
  for (size_t i = 0; i < f->n_changes; i++)
    if (strcmp(f->changes[i].path, path) == 0) return &f->changes[i];
  return NULL;
}

static void detects_each_ecosystem(void **state) {
  (void)state;
  static const char *const cases[][2] = {
      {"hf.yaml", "per_device_train_batch_size: 4\nlearning_rate: 1.0e-4\noutput_dir: o\n"},
      {"trl.yaml", "per_device_train_batch_size: 4\nuse_peft: true\nmax_length: 1024\n"},
      {"ds.json", "{\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 2}}"},
      {"lit.yaml", "seed_everything: 1\ntrainer:\n  precision: 16-mixed\ndata:\n  batch_size: 4\n"},
      {"axo.yml", "base_model: x\nmicro_batch_size: 4\nsequence_len: 2048\n"},
      {"tt.yaml", "model:\n  _component_: m\nbatch_size: 4\nenable_activation_checkpointing: True\n"},
      {"lf.yaml", "stage: sft\nfinetuning_type: lora\ncutoff_len: 1024\nper_device_train_batch_size: 4\n"},
      {"hy.yaml", "defaults:\n  - _self_\ndata_loader:\n  batch_size: 4\n"},
  };
  static const char *const want[] = {"hf", "trl", "deepspeed", "lightning", "axolotl", "torchtune",
                                     "llamafactory", "hydra"};
  static const char *const path[] = {"per_device_train_batch_size", "per_device_train_batch_size",
                                     "train_micro_batch_size_per_gpu", "data.batch_size",
                                     "micro_batch_size", "batch_size", "per_device_train_batch_size",
                                     "data_loader.batch_size"};
  struct vf_setting s = {"batch", "2", 0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *f = put(cases[i][0], cases[i][1]);
    struct vf_apply r;
    struct vf_diag d;
    int rc = prepare(&r, &f, 1, &s, 1, 0, &d);
    if (rc) fail_msg("%s: %s", cases[i][0], d.msg);
    assert_string_equal(r.files[0].format, want[i]);
    assert_non_null(change(&r.files[0], path[i]));
    vf_apply_cleanup(&r);
  }
}

static void a_group_shares_the_settings(void **state) {
  (void)state;
  const char *files[2] = {
      put("args.yaml", "per_device_train_batch_size: 4\noptim: adamw_torch\ndeepspeed: z.json\n"),
      put("z.json", "{\n  \"train_micro_batch_size_per_gpu\": \"auto\",\n  \"zero_optimization\": {\"stage\": 2}\n}\n")};
  struct vf_setting s[3] = {{"batch", "8", 0}, {"zero_stage", "3", 0}, {"optimizer", "adamw_8bit", 0}};
  struct vf_apply r;
  struct vf_diag d;
  assert_int_equal(prepare(&r, files, 2, s, 3, 0, &d), 0);
  assert_string_equal(change(&r.files[0], "per_device_train_batch_size")->new_text, "8");
  assert_string_equal(change(&r.files[0], "optim")->new_text, "adamw_bnb_8bit");
  assert_string_equal(change(&r.files[1], "zero_optimization.stage")->new_text, "3");
  assert_null(change(&r.files[1], "train_micro_batch_size_per_gpu")); /* "auto" stays */
  assert_true(r.n_notes >= 1);
  vf_apply_cleanup(&r);
  /* Alone, the JSON cannot take the batch: it is "auto". */
  assert_int_equal(prepare(&r, &files[1], 1, s, 1, 0, &d), VF_EINVAL);
  assert_non_null(strstr(d.msg, "\"auto\""));
  vf_apply_cleanup(&r);
}

static void deepspeed_train_batch_follows(void **state) {
  (void)state;
  const char *f = put("t.json", "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4,\n"
                                " \"gradient_accumulation_steps\": 2}\n");
  struct vf_setting s[2] = {{"batch", "2", 0}, {"accumulation", "8", 0}};
  struct vf_apply r;
  struct vf_diag d;
  assert_int_equal(prepare(&r, &f, 1, s, 2, 0, &d), 0);
  const struct vf_change *c = change(&r.files[0], "train_batch_size");
  assert_non_null(c);
  assert_string_equal(c->new_text, "64"); /* 4 GPUs: 32 / (4 x 2) */
  assert_non_null(strstr(c->note, "4 GPUs"));
  vf_apply_cleanup(&r);
  /* Setting it by hand to something else is refused. */
  struct vf_setting wrong[2] = {{"batch", "2", 0}, {"train_batch_size", "100", 0}};
  assert_int_equal(prepare(&r, &f, 1, wrong, 2, 0, &d), VF_EINVAL);
  vf_apply_cleanup(&r);
}

static void missing_keys_and_defaults(void **state) {
  (void)state;
  const char *f = put("m.yaml", "per_device_train_batch_size: 4\noutput_dir: o\nlearning_rate: 0.1\n");
  struct vf_apply r;
  struct vf_diag d;
  /* Equal to the loader's default: nothing to write. */
  struct vf_setting same = {"accumulation", "1", 0};
  assert_int_equal(prepare(&r, &f, 1, &same, 1, 0, &d), 0);
  assert_int_equal(r.files[0].n_changes, 0);
  vf_apply_cleanup(&r);
  struct vf_setting differs = {"accumulation", "4", 0};
  assert_int_equal(prepare(&r, &f, 1, &differs, 1, 0, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "--create"));
  vf_apply_cleanup(&r);
  assert_int_equal(prepare(&r, &f, 1, &differs, 1, 1, &d), 0);
  assert_true(change(&r.files[0], "gradient_accumulation_steps")->created);
  vf_apply_cleanup(&r);
  /* A plan's field with no key and no known default is a note, after the one that says
   * which tool the file was taken for, and why. */
  struct vf_setting seq = {"seq", "2048", 1};
  assert_int_equal(prepare(&r, &f, 1, &seq, 1, 0, &d), 0);
  assert_int_equal(r.n_notes, 2);
  assert_non_null(strstr(r.notes[0], "m.yaml: taken for hf by its keys per_device_train_batch_size, output_dir, learning_rate"));
  vf_apply_cleanup(&r);
  seq.from_plan = 0;
  assert_int_equal(prepare(&r, &f, 1, &seq, 1, 0, &d), VF_ENOTFOUND);
  vf_apply_cleanup(&r);
  /* --map points a logical key anywhere. */
  struct vf_apply_input in = {f, &differs, 1};
  struct vf_setting map = {"accumulation", "learning_rate", 0};
  struct vf_apply_opts o = {.dry_run = 1, .maps = &map, .n_maps = 1};
  vf_apply_init(&r);
  assert_int_equal(vf_apply_prepare(&r, &in, 1, &o, &d), 0);
  assert_string_equal(change(&r.files[0], "learning_rate")->new_text, "4");
  vf_apply_cleanup(&r);
}

static void plans_tiers_and_stages(void **state) {
  (void)state;
  const char *plan = put("plan.json",
                         "{\"recommended\": {\"batch\": 8, \"accumulation\": 2, \"shard\": \"zero2\", \"method\": \"lora\"},\n"
                         " \"tiers\": {\"safe\": {\"batch\": 4}},\n"
                         " \"stages\": [{\"name\": \"02_text\", \"set\": {\"n_negatives\": 24, \"tag\": \"8\"}}],\n"
                         " \"alloc_conf\": \"expandable_segments:True\", \"gpus\": 4}");
  const char *files[2] = {"conf/config.yaml", "conf/text_curriculum/02_text.yaml"};
  struct vf_setting extra = {"accumulation", "3", 0};
  struct vf_plan p;
  struct vf_diag d;
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, plan, NULL, files, 2, &extra, 1, &d), 0);
  assert_int_equal(p.n_inputs, 2);
  assert_int_equal(p.inputs[0].n_settings, 3);
  assert_string_equal(p.inputs[0].settings[0].key, "batch");
  assert_string_equal(p.inputs[0].settings[0].value, "8");
  assert_true(p.inputs[0].settings[0].from_plan);
  assert_string_equal(p.inputs[0].settings[1].value, "3"); /* --set wins */
  assert_false(p.inputs[0].settings[1].from_plan);
  assert_string_equal(p.inputs[0].settings[2].key, "zero_stage");
  assert_string_equal(p.inputs[0].settings[2].value, "2");
  assert_string_equal(p.inputs[1].settings[0].key, "n_negatives");
  assert_string_equal(p.inputs[1].settings[1].value, "\"8\""); /* stays a string */
  assert_string_equal(p.alloc_conf, "expandable_segments:True");
  assert_int_equal(p.gpus, 4);
  vf_plan_cleanup(&p);

  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, plan, "safe", files, 1, NULL, 0, &d), VF_EINVAL); /* stage unmatched */
  vf_plan_cleanup(&p);
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, plan, "safe", files, 2, NULL, 0, &d), 0);
  assert_string_equal(p.inputs[0].settings[0].value, "4");
  vf_plan_cleanup(&p);
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, plan, "wild", files, 2, NULL, 0, &d), VF_EINVAL);
  vf_plan_cleanup(&p);
  const char *fsdp = put("fsdp.json", "{\"recommended\": {\"batch\": 8, \"shard\": \"fsdp\"}}");
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, fsdp, NULL, files, 1, NULL, 0, &d), VF_EUNSUPPORTED);
  vf_plan_cleanup(&p);
  const char *junk = put("junk.json", "{\"batch\": 8}");
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, junk, NULL, files, 1, NULL, 0, &d), VF_EFORMAT);
  vf_plan_cleanup(&p);
}

/* A plan of the user's own configs writes back what it changes and nothing else: a shard
 * kept as "fsdp" (which apply cannot write) and an optimizer kept as read stay as they are. */
static void a_plan_of_configs_writes_its_changes(void **state) {
  (void)state;
  static const char text[] =
      "{\"recommended\": {\"batch\": 2, \"accumulation\": 8, \"optimizer\": \"adamw\", \"shard\": \"fsdp\"},\n"
      " \"given\": {\"batch\": 4, \"accumulation\": 4, \"optimizer\": \"adamw\", \"shard\": \"fsdp\"},\n"
      " \"read_from\": {\"batch\": \"train.yaml:3\"}}";
  const char *files[1] = {"train.yaml"};
  struct vf_plan p;
  struct vf_diag d;
  vf_plan_init(&p);
  assert_int_equal(vf_plan_parse(&p, "plan", text, sizeof text - 1, NULL, files, 1, NULL, 0, &d), 0);
  assert_int_equal(p.inputs[0].n_settings, 2);
  assert_string_equal(p.inputs[0].settings[0].key, "batch");
  assert_string_equal(p.inputs[0].settings[1].value, "8");
  vf_plan_cleanup(&p);
}

/* A workload without stage files plans one stage with nothing of its own to set: the main
 * config takes the shared values, and no file need match the stage. */
static void a_stage_with_nothing_to_set_needs_no_file(void **state) {
  (void)state;
  const char *plan = put("workload-plan.json",
                         "{\"recommended\": {\"name\": \"default\", \"file\": null, \"set\": {}},\n"
                         " \"shared\": {\"set\": {\"micro_batch_size\": 3, \"gradient_accumulation_steps\": 21}},\n"
                         " \"stages\": [{\"name\": \"default\", \"file\": null, \"set\": {}}]}");
  const char *files[1] = {"pretrain.yaml"};
  struct vf_plan p;
  struct vf_diag d;
  vf_plan_init(&p);
  assert_int_equal(vf_plan_load(&p, plan, NULL, files, 1, NULL, 0, &d), 0);
  assert_int_equal(p.n_inputs, 1);
  assert_int_equal(p.inputs[0].n_settings, 2);
  assert_string_equal(p.inputs[0].settings[0].key, "micro_batch_size");
  assert_string_equal(p.inputs[0].settings[1].value, "21");
  vf_plan_cleanup(&p);
}

int main(void) {
  vf_test_tmpdir("apply-plan", dir, sizeof dir);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(detects_each_ecosystem),
      cmocka_unit_test(a_group_shares_the_settings),
      cmocka_unit_test(deepspeed_train_batch_follows),
      cmocka_unit_test(missing_keys_and_defaults),
      cmocka_unit_test(plans_tiers_and_stages),
      cmocka_unit_test(a_plan_of_configs_writes_its_changes),
      cmocka_unit_test(a_stage_with_nothing_to_set_needs_no_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
