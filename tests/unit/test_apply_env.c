/* PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF in env files and launch scripts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "vramfit.h"

static void expect_env(const char *in, const char *conf, const char *want) {
  struct vf_edited r;
  struct vf_diag d;
  vf_diag_clear(&d);
  int rc = vf_env_edit("x.env", in, strlen(in), conf, &r, &d);
  if (rc) fail_msg("%s", d.msg);
  assert_string_equal(r.text, want);
  vf_edited_cleanup(&r);
}

static void merges_into_existing_lines(void **state) {
  (void)state;
  expect_env("export PYTORCH_CUDA_ALLOC_CONF=\"max_split_size_mb:512\"  # tuned\n",
             "expandable_segments:True",
             "export PYTORCH_CUDA_ALLOC_CONF=\"max_split_size_mb:512,expandable_segments:True\"  # tuned\n"
             "export PYTORCH_ALLOC_CONF=max_split_size_mb:512,expandable_segments:True\n");
  /* An option already there takes the new value in place. */
  expect_env("PYTORCH_ALLOC_CONF=expandable_segments:False,max_split_size_mb:64\r\n"
             "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:False'\r\n",
             "expandable_segments:True",
             "PYTORCH_ALLOC_CONF=expandable_segments:True,max_split_size_mb:64\r\n"
             "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'\r\n");
  /* A prefix on a command line is an assignment too; the name it lacks is exported before
   * the command, which would not see it after. */
  expect_env("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 torchrun train.py\n", "expandable_segments:True",
             "export PYTORCH_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True\n"
             "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True torchrun train.py\n");
}

/* A launch script gets its exports before the launch line, never after it. */
static void launch_script_gets_them_before_the_command(void **state) {
  (void)state;
  /* After the assignments that lead up to the first command, exported even where they are not. */
  expect_env("#!/bin/bash\n# 4 GPUs\nNPROC=4\nMASTER_PORT=29500  # free port\ntorchrun --nproc_per_node=$NPROC train.py\n"
             "echo done\n",
             "expandable_segments:True",
             "#!/bin/bash\n# 4 GPUs\nNPROC=4\nMASTER_PORT=29500  # free port\n"
             "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
             "export PYTORCH_ALLOC_CONF=expandable_segments:True\n"
             "torchrun --nproc_per_node=$NPROC train.py\necho done\n");
  /* No assignment before the first command: right after the #! line. */
  expect_env("#!/bin/sh\r\nset -e\r\ncd /data; python train.py\r\n", "expandable_segments:True",
             "#!/bin/sh\r\nexport PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\r\n"
             "export PYTORCH_ALLOC_CONF=expandable_segments:True\r\nset -e\r\ncd /data; python train.py\r\n");
  /* The changes name the lines the values end up on. */
  const char *in = "#!/bin/sh\npython train.py\nexport PYTORCH_ALLOC_CONF=max_split_size_mb:64\n";
  struct vf_edited r;
  assert_int_equal(vf_env_edit("run.sh", in, strlen(in), "expandable_segments:True", &r, NULL), 0);
  assert_string_equal(r.text, "#!/bin/sh\nexport PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True\n"
                              "python train.py\nexport PYTORCH_ALLOC_CONF=max_split_size_mb:64,expandable_segments:True\n");
  assert_int_equal(r.n_changes, 2);
  assert_int_equal(r.changes[0].line, 4);
  assert_string_equal(r.changes[1].key, "PYTORCH_CUDA_ALLOC_CONF");
  assert_int_equal(r.changes[1].line, 2);
  assert_string_equal(r.changes[1].new_text, "max_split_size_mb:64,expandable_segments:True");
  vf_edited_cleanup(&r);
}

static void appends_and_quotes(void **state) {
  (void)state;
  expect_env("", "expandable_segments:True",
             "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
             "export PYTORCH_ALLOC_CONF=expandable_segments:True\n");
  expect_env("A=1", "expandable_segments:True",
             "A=1\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nPYTORCH_ALLOC_CONF=expandable_segments:True");
  /* Brackets and '>' would glob and redirect unquoted. */
  expect_env("# x\n", "roundup_power2_divisions:[256:1,>:8]",
             "# x\nexport PYTORCH_CUDA_ALLOC_CONF=\"roundup_power2_divisions:[256:1,>:8]\"\n"
             "export PYTORCH_ALLOC_CONF=\"roundup_power2_divisions:[256:1,>:8]\"\n");
  /* Commented-out lines are not assignments. */
  expect_env("# PYTORCH_CUDA_ALLOC_CONF=x:1\n", "expandable_segments:True",
             "# PYTORCH_CUDA_ALLOC_CONF=x:1\nexport PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"
             "export PYTORCH_ALLOC_CONF=expandable_segments:True\n");
}

static void already_set_changes_nothing(void **state) {
  (void)state;
  const char *in = "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\nexport PYTORCH_ALLOC_CONF=expandable_segments:True\n";
  struct vf_edited r;
  assert_int_equal(vf_env_edit("x.env", in, strlen(in), "expandable_segments:True", &r, NULL), 0);
  assert_string_equal(r.text, in);
  assert_int_equal(r.n_changes, 0);
  vf_edited_cleanup(&r);
}

static void refuses_what_it_cannot_merge(void **state) {
  (void)state;
  struct vf_edited r;
  struct vf_diag d;
  const char *shell = "export PYTORCH_CUDA_ALLOC_CONF=$CONF\n";
  assert_int_equal(vf_env_edit("x.env", shell, strlen(shell), "expandable_segments:True", &r, &d), VF_EINVAL);
  assert_int_equal(d.line, 1);
  assert_int_equal(d.col, 32);
  const char *junk = "PYTORCH_ALLOC_CONF=nonsense\n";
  assert_int_equal(vf_env_edit("x.env", junk, strlen(junk), "expandable_segments:True", &r, &d), VF_EINVAL);
  assert_int_equal(vf_env_edit("x.env", "", 0, "expandable_segments", &r, &d), VF_EINVAL);
  assert_int_equal(vf_env_edit("x.env", "", 0, "a:1;rm -rf /", &r, &d), VF_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(merges_into_existing_lines),
      cmocka_unit_test(appends_and_quotes),
      cmocka_unit_test(launch_script_gets_them_before_the_command),
      cmocka_unit_test(already_set_changes_nothing),
      cmocka_unit_test(refuses_what_it_cannot_merge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
