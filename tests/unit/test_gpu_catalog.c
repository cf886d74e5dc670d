#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "vramfit.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static void lookup_by_name_alias_and_spelling(void **state) {
  (void)state;
  struct vf_gpu_spec g;
  assert_int_equal(vf_gpu_lookup("a100-80gb", &g), 0);
  assert_string_equal(g.name, "a100-80gb");
  assert_int_equal(g.cc_major, 8);
  assert_int_equal(g.cc_minor, 0);
  assert_int_equal(g.capacity_bytes, 81920 * MiB);
  assert_true(g.bf16_tflops > 311 && g.bf16_tflops < 313);

  const char *same[] = {"RTX 4090", "rtx4090", "Rtx_4090", "RTX-4090"};
  for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
    assert_int_equal(vf_gpu_lookup(same[i], &g), 0);
    assert_string_equal(g.name, "rtx-4090");
    assert_int_equal(g.capacity_bytes, 24564 * MiB);
  }
  assert_int_equal(vf_gpu_lookup("h200", &g), 0);
  assert_string_equal(g.name, "h200-141gb");
  assert_int_equal(vf_gpu_lookup("h100-sxm-80gb", &g), 0);
  assert_string_equal(g.name, "h100-80gb");
  assert_int_equal(vf_gpu_lookup("h100-pcie-80gb", &g), 0);
  assert_true(g.bf16_tflops < 800);
  assert_int_equal(vf_gpu_lookup("nope-9000", &g), VF_ENOTFOUND);
  assert_int_equal(vf_gpu_lookup("", &g), VF_ENOTFOUND);
}

static void catalogue_rows_are_complete(void **state) {
  (void)state;
  static const char *expect[] = {
      "v100-16gb", "v100-32gb", "a100-40gb", "a100-80gb", "a10", "a10g", "l4", "l40s", "t4",
      "h100-80gb", "h100-pcie-80gb", "h100-96gb", "h200-141gb", "b200", "rtx-3060", "rtx-3080",
      "rtx-3090", "rtx-4070", "rtx-4080", "rtx-4090", "rtx-5090", "rtx-a4000", "rtx-a5000",
      "rtx-a6000", "rtx-6000-ada", "quadro-rtx-6000", "mi250x", "mi300x"};
  size_t n = vf_gpu_catalog_count();
  assert_int_equal(n, sizeof expect / sizeof *expect);
  for (size_t i = 0; i < n; i++) {
    struct vf_gpu_spec g;
    assert_int_equal(vf_gpu_catalog_get(i, &g), 0);
    assert_string_equal(g.name, expect[i]);
    assert_true(g.capacity_bytes > 8 * GiB);
    assert_true(g.bandwidth_gbps > 100);
    assert_true(g.fp16_tflops > 20);
    assert_true(g.fp32_tflops > 5);
    assert_true(g.full_name[0] && g.vendor[0] && g.arch[0]);
    assert_true(strcmp(g.vendor, "AMD") == 0 || g.cc_major >= 7);
    /* Every name and alias must find this row and no earlier one. */
    struct vf_gpu_spec back;
    assert_int_equal(vf_gpu_lookup(g.name, &back), 0);
    assert_string_equal(back.name, g.name);
    char aliases[sizeof g.aliases];
    strcpy(aliases, g.aliases);
    for (char *save, *a = strtok_r(aliases, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
      assert_int_equal(vf_gpu_lookup(a, &back), 0);
      assert_string_equal(back.name, g.name);
    }
  }
  struct vf_gpu_spec g;
  assert_int_equal(vf_gpu_catalog_get(n, &g), VF_ENOTFOUND);
}

static void documented_capacity_choices(void **state) {
  (void)state;
  struct vf_gpu_spec g;
  assert_int_equal(vf_gpu_lookup("h100-96gb", &g), 0);
  assert_int_equal(g.capacity_bytes, 97871 * MiB);
  assert_int_equal(vf_gpu_lookup("l40s", &g), 0);
  assert_int_equal(g.capacity_bytes, 46068 * MiB); /* ECC on */
  assert_int_equal(vf_gpu_lookup("v100-16gb", &g), 0);
  assert_int_equal(g.capacity_bytes, 16384 * MiB);
  assert_int_equal(g.bf16_tflops, 0); /* no bf16 tensor cores */
  assert_int_equal(vf_gpu_lookup("b200", &g), 0);
  assert_int_equal(g.cc_major, 10);
  assert_int_equal(vf_gpu_lookup("rtx-5090", &g), 0);
  assert_int_equal(g.cc_major, 12);
}

static void parse_sizes(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t bytes;
  } ok[] = {
      {"24GiB", 24 * GiB},        {"80GB", 80000000000ull}, {"24G", 24 * GiB},
      {"24576MiB", 24576 * MiB},  {"24 gib", 24 * GiB},     {"23.5GiB", 47 * GiB / 2},
      {"1TiB", 1024 * GiB},       {"512MB", 512000000ull},
  };
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
    struct vf_gpu_spec g;
    struct vf_diag d;
    assert_int_equal(vf_gpu_parse(ok[i].text, &g, &d), 0);
    assert_int_equal(g.capacity_bytes, ok[i].bytes);
    assert_int_equal(g.cc_major, 0);
    assert_string_equal(g.name, "");
  }
  const char *bad[] = {"24", "24XB", "0GiB", "GiB", "24GiBs", "-5GB", "1e30TB"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct vf_gpu_spec g;
    struct vf_diag d;
    int rc = vf_gpu_parse(bad[i], &g, &d);
    assert_true(rc == VF_EINVAL || rc == VF_ENOTFOUND || rc == VF_ERANGE);
    assert_string_equal(d.file, "--gpu");
    assert_non_null(strstr(d.msg, bad[i]));
  }
}

static void parse_names_and_suggestions(void **state) {
  (void)state;
  struct vf_gpu_spec g;
  struct vf_diag d;
  assert_int_equal(vf_gpu_parse("A100-40GB", &g, &d), 0);
  assert_string_equal(g.name, "a100-40gb");

  assert_int_equal(vf_gpu_parse("a100", &g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "a100-40gb"));
  assert_non_null(strstr(d.msg, "a100-80gb"));

  assert_int_equal(vf_gpu_parse("rtx-4009", &g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "rtx-4090"));

  assert_int_equal(vf_gpu_parse("h100", &g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "h100-80gb"));
  assert_non_null(strstr(d.msg, "h100-pcie-80gb"));

  assert_int_equal(vf_gpu_parse("zzzzzzzzzzzz", &g, &d), VF_ENOTFOUND);
  assert_non_null(strstr(d.msg, "24GiB"));
  assert_int_equal(vf_gpu_parse("", &g, &d), VF_EINVAL);
  assert_int_equal(vf_gpu_parse("x", &g, NULL), VF_ENOTFOUND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lookup_by_name_alias_and_spelling),
      cmocka_unit_test(catalogue_rows_are_complete),
      cmocka_unit_test(documented_capacity_choices),
      cmocka_unit_test(parse_sizes),
      cmocka_unit_test(parse_names_and_suggestions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
