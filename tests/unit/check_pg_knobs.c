/* check_pg_knobs.c -- unit tests for libpg/core/knobs.c: the one table of
 * libpg's environment knobs, read once, and documented. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "knobs.h"

START_TEST(test_table_complete)
{
  int k, j;

  for (k = 0; k < PG_KNOB_COUNT; k++) {
    ck_assert_msg(pg__knobs[k].name && pg__knobs[k].dflt &&
                  pg__knobs[k].doc && *pg__knobs[k].doc,
                  "knob %d has no name, default or doc", k);
    ck_assert_str_eq(pg__knob_name((enum pg__knob)k), pg__knobs[k].name);
    for (j = 0; j < k; j++)
      ck_assert_str_ne(pg__knobs[j].name, pg__knobs[k].name);
  }
}
END_TEST

/* Read once: a change after the first read is not seen. */
START_TEST(test_read_once)
{
  setenv("PG_SHM_BUF", "131072", 1);
  setenv("PG_HOST_ID", "", 1);
  ck_assert_str_eq(pg__knob(PG_KNOB_SHM_BUF), "131072");
  ck_assert_ptr_null(pg__knob(PG_KNOB_HOST_ID));   /* empty is unset */
  setenv("PG_SHM_BUF", "65536", 1);
  ck_assert_str_eq(pg__knob(PG_KNOB_SHM_BUF), "131072");
  ck_assert_ptr_null(pg__knob(PG_KNOB_COUNT));
}
END_TEST

/* Docs stay true: every knob is in man/libpg.3's ENVIRONMENT. */
START_TEST(test_documented)
{
  FILE *f = fopen("man/libpg.3", "r");
  static char man[1 << 20];
  size_t n;
  char *env;
  char want[128];
  int k;

  ck_assert_msg(f != NULL, "run from the repository root");
  n = fread(man, 1, sizeof man - 1, f);
  fclose(f);
  man[n] = '\0';
  env = strstr(man, "\n.SH ENVIRONMENT");
  ck_assert_ptr_nonnull(env);
  for (k = 0; k < PG_KNOB_COUNT; k++) {
    snprintf(want, sizeof want, "\n.B %s\n", pg__knobs[k].name);
    ck_assert_msg(strstr(env, want) != NULL, "%s is not documented in "
                  "man/libpg.3 ENVIRONMENT", pg__knobs[k].name);
  }
}
END_TEST

static Suite *knobs_suite(void)
{
  Suite *s = suite_create("pg_knobs");
  TCase *tc = tcase_create("knobs");

  tcase_add_test(tc, test_table_complete);
  tcase_add_test(tc, test_read_once);
  tcase_add_test(tc, test_documented);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(knobs_suite());
  int failed;

  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
