/* Unified diffs as `patch` reads them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "edit/internal.h"

static void expect_diff(const char *a, const char *b, const char *want) {
  char *got;
  assert_int_equal(diff_unified("f", a, strlen(a), b, strlen(b), &got), 0);
  assert_string_equal(got, want);
  free(got);
}

static void hunks(void **state) {
  (void)state;
  expect_diff("a\nb\n", "a\nb\n", "");
  expect_diff("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n",
              "1\nX\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\nY\n16\n",
              "--- f\n+++ f\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n 4\n 5\n@@ -12,5 +12,5 @@\n 12\n 13\n 14\n-15\n+Y\n 16\n");
  /* Changes six lines apart share a hunk. */
  expect_diff("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "X\n2\n3\n4\n5\n6\n7\nY\n9\n",
              "--- f\n+++ f\n@@ -1,9 +1,9 @@\n-1\n+X\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+Y\n 9\n");
  expect_diff("a: 1", "a: 2", "--- f\n+++ f\n@@ -1 +1 @@\n-a: 1\n\\ No newline at end of file\n+a: 2\n\\ No newline at end of file\n");
  expect_diff("", "x\n", "--- f\n+++ f\n@@ -0,0 +1 @@\n+x\n");
  expect_diff("a\n", "a\nb\n", "--- f\n+++ f\n@@ -1 +1,2 @@\n a\n+b\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(hunks)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
