/* The editing engine: every output must differ from its input only in the bytes of the
 * values set (or the lines of keys created), and the verify step must refuse anything else. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "vramfit.h"

/* Edits text with one KEY=VALUE (VALUE read as --set reads it); returns the code and, on
 * success, the result in *out (caller frees). */
static int edit(const char *file, const char *text, const char *path, const char *value, int create,
                int keep_type, char **out, struct vf_diag *d) {
  struct vf_path_edit e = {path, {0}, create, keep_type};
  assert_int_equal(vf_value_parse(value, &e.value), 0);
  struct vf_edited r;
  int rc = vf_edit_buffer(file, text, strlen(text), &e, 1, &r, d);
  *out = rc ? NULL : strdup(r.text);
  if (!rc) {
    assert_int_equal(r.len, strlen(r.text));
    vf_edited_cleanup(&r);
  }
  return rc;
}

static void expect_edit(const char *file, const char *text, const char *path, const char *value,
                        int create, const char *want) {
  char *got;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = edit(file, text, path, value, create, 0, &got, &d);
  if (rc) fail_msg("%s=%s: %s", path, value, d.msg);
  assert_string_equal(got, want);
  free(got);
}

/* Two edits in one call, the anchor's first: order does not matter. */
static void expect_edits(const char *file, const char *text, const char *p1, const char *v1, const char *p2,
                         const char *v2, const char *want) {
  struct vf_path_edit e[2] = {{p1, {0}, 0, 0}, {p2, {0}, 0, 0}};
  assert_int_equal(vf_value_parse(v1, &e[0].value), 0);
  assert_int_equal(vf_value_parse(v2, &e[1].value), 0);
  struct vf_edited r;
  struct vf_diag d;
  vf_diag_clear(&d);
  if (vf_edit_buffer(file, text, strlen(text), e, 2, &r, &d)) fail_msg("%s", d.msg);
  assert_string_equal(r.text, want);
  vf_edited_cleanup(&r);
}

static void expect_error(const char *text, const char *path, const char *value, int keep_type,
                         int code, int line, int col, const char *msg_part) {
  char *got;
  struct vf_diag d;
  vf_diag_clear(&d);
  assert_int_equal(edit("t.yaml", text, path, value, 0, keep_type, &got, &d), code);
  assert_null(got);
  assert_int_equal(d.line, line);
  assert_int_equal(d.col, col);
  if (!strstr(d.msg, msg_part)) fail_msg("'%s' lacks '%s'", d.msg, msg_part);
}

static void values_keep_comments_quotes_and_spacing(void **state) {
  (void)state;
  const char *in = "# comment\n\nbatch: 4   # per GPU\nname: 'old'\nopt: \"adamw\"\nmode: fast\n";
  expect_edit("t.yaml", in, "batch", "16", 0,
              "# comment\n\nbatch: 16   # per GPU\nname: 'old'\nopt: \"adamw\"\nmode: fast\n");
  expect_edit("t.yaml", in, "name", "it's", 0,
              "# comment\n\nbatch: 4   # per GPU\nname: 'it''s'\nopt: \"adamw\"\nmode: fast\n");
  expect_edit("t.yaml", in, "opt", "sgd", 0,
              "# comment\n\nbatch: 4   # per GPU\nname: 'old'\nopt: \"sgd\"\nmode: fast\n");
  /* A plain string that would read as a bool or number gets quoted. */
  expect_edit("t.yaml", in, "mode", "yes", 0,
              "# comment\n\nbatch: 4   # per GPU\nname: 'old'\nopt: \"adamw\"\nmode: \"yes\"\n");
  expect_edit("t.yaml", in, "mode", "16-mixed", 0,
              "# comment\n\nbatch: 4   # per GPU\nname: 'old'\nopt: \"adamw\"\nmode: \"16-mixed\"\n");
}

static void bools_keep_their_spelling(void **state) {
  (void)state;
  expect_edit("t.yaml", "a: True  # x\n", "a", "false", 0, "a: False  # x\n");
  expect_edit("t.yaml", "a: TRUE\n", "a", "false", 0, "a: FALSE\n");
  expect_edit("t.yaml", "a: yes\n", "a", "false", 0, "a: false\n");
  /* A new bool follows the file's first bool. */
  expect_edit("t.yaml", "compile: False\nb: 1\n", "c", "true", 1, "compile: False\nb: 1\nc: True\n");
}

static void numbers_every_loader_reads_alike(void **state) {
  (void)state;
  /* PyYAML reads 1e-5 and 1.0e5 as strings; a dot and a signed exponent fix both. */
  expect_edit("t.yaml", "lr: 2.0e-04\n", "lr", "1e-5", 0, "lr: 1.0e-05\n");
  expect_edit("t.yaml", "lr: 2.0e-04\n", "lr", "1e-4", 0, "lr: 0.0001\n");
  expect_edit("t.yaml", "size: 1\n", "size", "5e8", 0, "size: 5.0e+08\n");
  expect_edit("t.yaml", "x: 1\n", "x", "2.5", 0, "x: 2.5\n");
  expect_edit("t.yaml", "x: 1.5\n", "x", "3", 0, "x: 3\n");
  /* The same value in another spelling is left alone, unless PyYAML would read a string. */
  expect_edit("t.yaml", "lr: 1.0e-4\n", "lr", "0.0001", 0, "lr: 1.0e-4\n");
  expect_edit("t.yaml", "lr: 1e-4\n", "lr", "0.0001", 0, "lr: 0.0001\n");
  expect_edit("t.json", "{\"lr\": 1e-4}", "lr", "0.0001", 0, "{\"lr\": 1e-4}");
}

static void empty_null_and_block_contexts(void **state) {
  (void)state;
  expect_edit("t.yaml", "lora_model_dir:\nnext: 1\n", "lora_model_dir", "/x", 0,
              "lora_model_dir: /x\nnext: 1\n");
  expect_edit("t.yaml", "max_seq_len: null # none\n", "max_seq_len", "2048", 0,
              "max_seq_len: 2048 # none\n");
  expect_edit("t.yaml", "a:\n  b:\n    c: 1\n  d: 2\n", "a.b.c", "3", 0, "a:\n  b:\n    c: 3\n  d: 2\n");
  expect_edit("t.yaml", "l:\n- x: 1\n  y: 2\n- x: 3\n", "l.1.x", "4", 0, "l:\n- x: 1\n  y: 2\n- x: 4\n");
  /* Keys may hold dots. */
  expect_edit("t.yaml", "a.b: 1\n", "a.b", "2", 0, "a.b: 2\n");
}

static void flow_anchor_crlf_bom_utf8(void **state) {
  (void)state;
  expect_edit("t.yaml", "rel: [1, 2]\nm: {a: 1, b: x}\n", "rel.1", "5", 0, "rel: [1, 5]\nm: {a: 1, b: x}\n");
  expect_edit("t.yaml", "rel: [1, 2]\nm: {a: 1, b: x}\n", "m.b", "z", 0, "rel: [1, 2]\nm: {a: 1, b: z}\n");
  expect_edit("t.yaml", "bs: &bs 8\nother: 1\n", "bs", "16", 0, "bs: &bs 16\nother: 1\n");
  /* A key that uses an anchor gets a value of its own; the anchor and its other uses keep theirs. */
  expect_edit("t.yaml", "bs: &bs 8\nuse: *bs\nalso: *bs\n", "use", "16", 0, "bs: &bs 8\nuse: 16\nalso: *bs\n");
  /* An anchor whose every use the call replaces is free to change. */
  expect_edits("t.yaml", "bs: &bs 8\nuse: *bs\n", "bs", "16", "use", "8", "bs: &bs 16\nuse: 8\n");
  /* libyaml counts characters: multibyte text before the value must not shift the splice. */
  expect_edit("t.yaml", "\xEF\xBB\xBF# caf\xC3\xA9 \xE6\x97\xA5\r\nn: \"\xC3\xA9t\xC3\xA9\"\r\nb: 4\r\n", "b", "8", 0,
              "\xEF\xBB\xBF# caf\xC3\xA9 \xE6\x97\xA5\r\nn: \"\xC3\xA9t\xC3\xA9\"\r\nb: 8\r\n");
  expect_edit("t.yaml", "n: \xF0\x9F\x98\x80\xF0\x9F\x98\x80\nb: 4\n", "b", "5", 0,
              "n: \xF0\x9F\x98\x80\xF0\x9F\x98\x80\nb: 5\n");
  /* A new line takes the file's CRLF. */
  expect_edit("t.yaml", "a: 1\r\n", "b", "2", 1, "a: 1\r\nb: 2\r\n");
}

static void json_values_and_keys(void **state) {
  (void)state;
  const char *in = "{\n    \"train_batch_size\": \"auto\",\n    \"zero\": {\"stage\": 2, \"b\": 5e8}\n}";
  expect_edit("ds.json", in, "train_batch_size", "32", 0,
              "{\n    \"train_batch_size\": 32,\n    \"zero\": {\"stage\": 2, \"b\": 5e8}\n}");
  expect_edit("ds.json", in, "zero.stage", "3", 0,
              "{\n    \"train_batch_size\": \"auto\",\n    \"zero\": {\"stage\": 3, \"b\": 5e8}\n}");
  expect_edit("ds.json", in, "zero.offload.device", "cpu", 1,
              "{\n    \"train_batch_size\": \"auto\",\n    \"zero\": {\"stage\": 2, \"b\": 5e8, "
              "\"offload\": {\"device\": \"cpu\"}}\n}");
  expect_edit("ds.json", in, "bf16.enabled", "true", 1,
              "{\n    \"train_batch_size\": \"auto\",\n    \"zero\": {\"stage\": 2, \"b\": 5e8},\n"
              "    \"bf16\": {\"enabled\": true}\n}");
  expect_edit("ds.json", "{}\n", "a", "x", 1, "{\"a\": \"x\"}\n");
  /* JSON strings are always double-quoted JSON, whatever the old value was. */
  expect_edit("ds.json", "{\"a\": 1}", "a", "x\"y", 0, "{\"a\": \"x\\\"y\"}");
}

static void creating_keys(void **state) {
  (void)state;
  /* Under a nested mapping, at its indentation, after its last entry and its comment. */
  expect_edit("t.yaml", "train:\n    lr: 1  # c\n    # about model\nmodel: x\n", "train.batch", "4", 1,
              "train:\n    lr: 1  # c\n    batch: 4\n    # about model\nmodel: x\n");
  /* Missing parents are created with the file's indentation step. */
  expect_edit("t.yaml", "a:\n    b: 1\n", "c.d.e", "1", 1, "a:\n    b: 1\nc:\n    d:\n        e: 1\n");
  /* No final newline stays so. */
  expect_edit("t.yaml", "n_negatives: 32", "n_positives", "8", 1, "n_negatives: 32\nn_positives: 8");
  expect_edit("t.yaml", "# only a comment\n", "a", "1", 1, "# only a comment\na: 1\n");
  expect_edit("t.yaml", "m: {a: 1}\n", "m.b", "2", 1, "m: {a: 1, b: 2}\n");
  expect_edit("t.yaml", "- a: 1\n  b: 2\n", "0.c", "3", 1, "- a: 1\n  b: 2\n  c: 3\n");
}

static void refusals(void **state) {
  (void)state;
  /* Changing a value other keys use through its anchor would change them too. */
  expect_error("a: &x 1\nb: *x\nc: [*x]\n", "a", "2", 0, VF_EINVAL, 1, 4,
               "a carries the anchor &x, which line 2 and 1 more use as *x: a new value here would change them too");
  expect_error("m: &m {a: 1}\nb: *m\n", "b", "2", 0, VF_EINVAL, 2, 4, "b is an alias of a mapping");
  expect_error("l:\n- 1\n", "l", "2", 0, VF_EINVAL, 2, 1, "holds a list");
  expect_error("m:\n  a: 1\n", "m", "2", 0, VF_EINVAL, 2, 3, "holds a mapping");
  expect_error("t: |\n  x\n", "t", "y", 0, VF_EINVAL, 1, 4, "block scalar");
  expect_error("t: !!str 8\n", "t", "9", 0, VF_EINVAL, 1, 4, "explicit tag");
  expect_error("a: 1\n", "b", "2", 0, VF_ENOTFOUND, 1, 1, "no key b");
  expect_error("a: 1\na: 2\n", "a", "3", 0, VF_EFORMAT, 2, 1, "duplicate key");
  expect_error("a: 1\n", "a.b", "3", 0, VF_ENOTFOUND, 1, 4, "under a plain value");
  expect_error("lr: 0.1\n", "lr", "fast", 1, VF_EINVAL, 1, 5, "holds a number");
  expect_error("x: true\n", "x", "2", 1, VF_EINVAL, 1, 4, "true or false");
  /* Positions count characters, as editors show them. */
  expect_error("\xC3\xA9\xC3\xA9: [1, 2\n", "a", "1", 0, VF_EFORMAT, 2, 1, "invalid YAML");
  expect_error("a: 1\n---\nb: 2\n", "a", "3", 0, VF_EFORMAT, 2, 1, "more than one");
}

static void equal_values_change_nothing(void **state) {
  (void)state;
  struct vf_path_edit e = {"a", {.kind = VF_VALUE_BOOL, .b = 1}, 0, 0};
  struct vf_edited r;
  const char *in = "a: True # keep\n";
  assert_int_equal(vf_edit_buffer("t.yaml", in, strlen(in), &e, 1, &r, NULL), 0);
  assert_string_equal(r.text, in);
  assert_int_equal(r.n_changes, 0);
  vf_edited_cleanup(&r);
}

static void changes_report_position_and_bytes(void **state) {
  (void)state;
  struct vf_path_edit e[2] = {{"b", {.kind = VF_VALUE_INT, .i = 8}, 0, 0},
                              {"new", {.kind = VF_VALUE_STRING, .s = "x"}, 1, 0}};
  struct vf_edited r;
  const char *in = "a: 1\nb:   4\n";
  assert_int_equal(vf_edit_buffer("t.yaml", in, strlen(in), e, 2, &r, NULL), 0);
  assert_int_equal(r.n_changes, 2);
  assert_string_equal(r.changes[0].old_text, "4");
  assert_string_equal(r.changes[0].new_text, "8");
  assert_int_equal(r.changes[0].line, 2);
  assert_int_equal(r.changes[0].col, 6);
  assert_true(r.changes[1].created);
  assert_int_equal(r.changes[1].line, 3);
  assert_string_equal(r.text, "a: 1\nb:   8\nnew: x\n");
  vf_edited_cleanup(&r);
}

static void verify_refuses_changes_elsewhere(void **state) {
  (void)state;
  const char *old = "a: 1\nb: &k 2\nc: [x, y]\n";
  struct vf_path_edit e = {"a", {.kind = VF_VALUE_INT, .i = 5}, 0, 0};
  struct vf_path_edit c = {"d", {.kind = VF_VALUE_INT, .i = 5}, 1, 0};
  const char *good = "a: 5\nb: &k 2\nc: [x, y]\n";
  assert_int_equal(vf_edit_verify("t.yaml", old, strlen(old), good, strlen(good), &e, 1, NULL), 0);
  static const char *const bad[] = {
      "a: 5\nb: &k 3\nc: [x, y]\n",      /* another value */
      "a: 5\nB: &k 2\nc: [x, y]\n",      /* a key */
      "a: 5\nb: &j 2\nc: [x, y]\n",      /* an anchor */
      "a: 5\nb: &k \"2\"\nc: [x, y]\n",  /* a type, through quoting */
      "a: 5\nb: &k 2\nc: [x]\n",         /* a list */
      "a: 5\nb: &k 2\nc: [x, y]\nd: 1\n", /* an extra key */
      "a: 6\nb: &k 2\nc: [x, y]\n",      /* the edited value itself */
      "a: 5\nb: &k 2\nc:\n- x\n- y\n",   /* flow to block */
      "a: 5\n",                          /* lost keys */
      "a: 5\nb: &k 2\nc: [x, y]\na: 5\n", /* a duplicate */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct vf_diag d;
    vf_diag_clear(&d);
    if (vf_edit_verify("t.yaml", old, strlen(old), bad[i], strlen(bad[i]), &e, 1, &d) == 0)
      fail_msg("verify let through: %s", bad[i]);
  }
  const char *created = "a: 1\nb: &k 2\nc: [x, y]\nd: 5\n";
  assert_int_equal(vf_edit_verify("t.yaml", old, strlen(old), created, strlen(created), &c, 1, NULL), 0);
  const char *wrong_place = "d: 5\na: 1\nb: &k 2\nc: [x, y]\n";
  assert_int_not_equal(
      vf_edit_verify("t.yaml", old, strlen(old), wrong_place, strlen(wrong_place), &c, 1, NULL), 0);
}

static void value_parse(void **state) {
  (void)state;
  struct vf_value v;
  assert_int_equal(vf_value_parse("42", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_INT);
  assert_int_equal(v.i, 42);
  assert_int_equal(vf_value_parse("-3", &v), 0);
  assert_int_equal(v.i, -3);
  assert_int_equal(vf_value_parse("1e-4", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_FLOAT);
  assert_true(v.f == 1e-4);
  assert_int_equal(vf_value_parse("True", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_BOOL);
  assert_int_equal(vf_value_parse("null", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_NULL);
  assert_int_equal(vf_value_parse("bf16-mixed", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_STRING);
  assert_int_equal(vf_value_parse("yes", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_STRING);
  assert_int_equal(vf_value_parse("1.2.3", &v), 0);
  assert_int_equal(v.kind, VF_VALUE_STRING);
  assert_int_equal(vf_value_parse("99999999999999999999", &v), VF_ERANGE);
  assert_int_equal(vf_value_parse("", &v), VF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(values_keep_comments_quotes_and_spacing),
      cmocka_unit_test(bools_keep_their_spelling),
      cmocka_unit_test(numbers_every_loader_reads_alike),
      cmocka_unit_test(empty_null_and_block_contexts),
      cmocka_unit_test(flow_anchor_crlf_bom_utf8),
      cmocka_unit_test(json_values_and_keys),
      cmocka_unit_test(creating_keys),
      cmocka_unit_test(refusals),
      cmocka_unit_test(equal_values_change_nothing),
      cmocka_unit_test(changes_report_position_and_bytes),
      cmocka_unit_test(verify_refuses_changes_elsewhere),
      cmocka_unit_test(value_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
