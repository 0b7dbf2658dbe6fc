/* check_conqueue.c -- Note [console queue] (launcher/conqueue.h). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conqueue.h"

/* Reads fd until "want" appears or EOF; returns what was read. */
static char *read_until(int fd, const char *want)
{
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t n;

  ck_assert_ptr_nonnull(buf);
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      ck_assert_ptr_nonnull(buf);
    }
    n = read(fd, buf + len, 4096);
    if (n <= 0)
      break;
    len += (size_t)n;
    buf[len] = '\0';
    if (want && strstr(buf, want))
      break;
  }
  buf[len] = '\0';
  return buf;
}

/* A reader that does not read: puts never block; past the bound lines
 * are dropped and counted; once it reads, every queued line arrives and
 * then the count. */
START_TEST(test_stalled_reader)
{
  struct conqueue *q;
  char line[100], *got;
  int p[2], i;

  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(conqueue_create(p[1], 8192, &q), 0);
  memset(line, 'x', sizeof line - 1);
  line[sizeof line - 1] = '\n';
  /* The pipe holds 64 KiB and the queue 8 KiB: 2000 lines (200 KB)
   * cannot all fit, and none of these calls may block. */
  for (i = 0; i < 2000; i++)
    conqueue_put(q, line, sizeof line);
  ck_assert_uint_gt(conqueue_dropped(q), 0);
  got = read_until(p[0], "lines dropped\n");
  ck_assert_ptr_nonnull(strstr(got, "cdrun: the console did not keep up: "));
  free(got);
  ck_assert_uint_lt(conqueue_close(q, 5), 2000);
  close(p[1]);
  close(p[0]);
}
END_TEST

/* A reader that keeps up: nothing dropped, everything in order. */
START_TEST(test_reader_keeps_up)
{
  struct conqueue *q;
  char line[32], *got;
  int p[2], i;

  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(conqueue_create(p[1], 0, &q), 0);
  for (i = 0; i < 100; i++) {
    int n = snprintf(line, sizeof line, "line %d\n", i);

    conqueue_put(q, line, (size_t)n);
  }
  ck_assert_uint_eq(conqueue_close(q, 5), 0);
  close(p[1]);
  got = read_until(p[0], NULL);
  ck_assert_ptr_nonnull(strstr(got, "line 0\nline 1\n"));
  ck_assert_ptr_nonnull(strstr(got, "line 98\nline 99\n"));
  ck_assert_ptr_null(strstr(got, "dropped"));
  free(got);
  close(p[0]);
}
END_TEST

/* A reader that never reads: close gives up once no byte moved for the
 * stall time, and counts what never left as dropped. */
START_TEST(test_close_gives_up)
{
  struct conqueue *q;
  char line[100];
  int p[2], i;

  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(conqueue_create(p[1], 1 << 20, &q), 0);
  memset(line, 'y', sizeof line - 1);
  line[sizeof line - 1] = '\n';
  for (i = 0; i < 2000; i++)
    conqueue_put(q, line, sizeof line);
  /* 64 KiB fit in the pipe, the rest stays queued. */
  ck_assert_uint_gt(conqueue_close(q, 0.2), 0);
  /* The writer stays blocked in write(2) on p[1]: keep it open. */
}
END_TEST

static Suite *conqueue_suite(void)
{
  Suite *s = suite_create("conqueue");
  TCase *tc = tcase_create("queue");

  tcase_add_test(tc, test_stalled_reader);
  tcase_add_test(tc, test_reader_keeps_up);
  tcase_add_test(tc, test_close_gives_up);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(conqueue_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
