/* check_filetimer.c -- torch's file timer protocol (launcher/filetimer.c). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filetimer.h"

static struct filetimer_request fired[16];
static int nfired;

static void on_fired(void *ctx, const struct filetimer_request *t)
{
  (void)ctx;
  ck_assert_int_lt(nfired, 16);
  fired[nfired++] = *t;
}

static void setup(void)
{
  nfired = 0;
  memset(fired, 0, sizeof fired);
}

#define REQ(pid, scope, exp, sig) \
  "{\"version\": 1, \"pid\": " #pid ", \"scope_id\": \"" scope "\", " \
  "\"expiration_time\": " #exp ", \"signal\": " #sig "}\n"

static void feed(struct filetimer *t, const char *s, double now)
{
  filetimer_feed(t, s, strlen(s), now);
}

START_TEST(test_parse)
{
  struct filetimer_request r;
  char err[128];
  const char *ok = "{\"version\": 1, \"pid\": 42, \"scope_id\": \"step 3\", "
                   "\"expiration_time\": 1790000030.5, \"signal\": 9}";

  ck_assert_int_eq(filetimer_parse(ok, strlen(ok), &r, err, sizeof err), 0);
  ck_assert_int_eq(r.pid, 42);
  ck_assert_str_eq(r.scope_id, "step 3");
  ck_assert_double_eq(r.expiration_time, 1790000030.5);
  ck_assert_int_eq(r.signal, 9);
  /* Only as many bytes as given count. */
  ck_assert_int_eq(filetimer_parse(ok, 20, &r, err, sizeof err), -EINVAL);

#define BAD(text, why) do { \
    const char *t_ = (text); \
    ck_assert_int_eq(filetimer_parse(t_, strlen(t_), &r, err, sizeof err), \
                     -EINVAL); \
    ck_assert_msg(strstr(err, (why)) != NULL, "'%s' lacks '%s'", err, \
                  (why)); \
  } while (0)
  BAD("", "not a JSON object");
  BAD("[1]", "not a JSON object");
  BAD("{\"pid\": 1, \"scope_id\": \"s\", \"expiration_time\": 1, "
      "\"signal\": 9, \"version\": 2}", "version");
  BAD("{\"pid\": 0, \"scope_id\": \"s\", \"expiration_time\": 1}", "pid");
  BAD("{\"pid\": -1, \"scope_id\": \"s\", \"expiration_time\": 1}", "pid");
  BAD("{\"pid\": 1.5, \"scope_id\": \"s\", \"expiration_time\": 1}", "pid");
  BAD("{\"pid\": \"1\", \"scope_id\": \"s\", \"expiration_time\": 1}", "pid");
  BAD("{\"pid\": 1e300, \"scope_id\": \"s\", \"expiration_time\": 1}", "pid");
  BAD("{\"pid\": 1, \"scope_id\": 3, \"expiration_time\": 1}", "scope_id");
  BAD("{\"pid\": 1, \"scope_id\": \"s\"}", "expiration_time");
  BAD("{\"pid\": 1, \"scope_id\": \"s\", \"expiration_time\": \"1\"}",
      "expiration_time");
  BAD("{\"pid\": 1, \"scope_id\": \"s\", \"expiration_time\": 1, "
      "\"signal\": 65}", "signal");
  BAD("{\"pid\": 1, \"scope_id\": \"s\", \"expiration_time\": 1, "
      "\"signal\": -9}", "signal");
  {
    char big[400];

    snprintf(big, sizeof big, "{\"pid\": 1, \"scope_id\": \"%0300d\", "
             "\"expiration_time\": 1}", 0);
    BAD(big, "scope_id");
  }
  /* No version and no signal: torch's older clients; signal 0. */
  ck_assert_int_eq(filetimer_parse("{\"pid\": 7, \"scope_id\": \"\", "
                                   "\"expiration_time\": -1}", 50, &r, err,
                                   sizeof err), 0);
  ck_assert_int_eq(r.signal, 0);
  ck_assert_double_eq(r.expiration_time, -1);
}
END_TEST

/* Acquire, replace, release; lines arrive in arbitrary chunks. */
START_TEST(test_table)
{
  struct filetimer *t = filetimer_new(0, on_fired, NULL);
  const char *s = REQ(10, "a", 100, 9) REQ(10, "b", 50, 9) REQ(11, "a", 70, 15);

  for (size_t i = 0; s[i]; i++)
    filetimer_feed(t, s + i, 1, 1.0);
  ck_assert_uint_eq(filetimer_count(t), 3);
  ck_assert_double_eq(filetimer_next(t), 50);
  /* The same (pid, scope) replaces; a negative time releases. */
  feed(t, REQ(10, "b", 80, 9) REQ(11, "a", -1, 0), 2.0);
  ck_assert_uint_eq(filetimer_count(t), 2);
  ck_assert_double_eq(filetimer_next(t), 80);
  feed(t, REQ(99, "none", -1, 0), 2.0);   /* releasing nothing is fine */
  ck_assert_uint_eq(filetimer_count(t), 2);
  filetimer_expire(t, 79.9);
  ck_assert_int_eq(nfired, 0);
  filetimer_clear(t, 10);
  ck_assert_uint_eq(filetimer_count(t), 0);
  ck_assert(filetimer_next(t) < 0);
  filetimer_close(t);
}
END_TEST

/* torch: per pid, the earliest expired timer that has a signal; every
 * timer of that pid is dropped. */
START_TEST(test_expire)
{
  struct filetimer *t = filetimer_new(0, on_fired, NULL);

  feed(t, REQ(10, "late", 30, 15) REQ(10, "early", 20, 9)
          REQ(10, "nosig", 10, 0) REQ(10, "future", 500, 9)
          REQ(11, "quiet", 10, 0) REQ(12, "later", 200, 9), 5.0);
  filetimer_expire(t, 40);
  ck_assert_int_eq(nfired, 1);
  ck_assert_int_eq(fired[0].pid, 10);
  ck_assert_str_eq(fired[0].scope_id, "early");
  ck_assert_int_eq(fired[0].signal, 9);
  ck_assert_double_eq(fired[0].received, 5.0);
  /* pid 10's and 11's timers are gone; 12's is not due. */
  ck_assert_uint_eq(filetimer_count(t), 1);
  ck_assert_double_eq(filetimer_next(t), 200);
  filetimer_expire(t, 200);
  ck_assert_int_eq(nfired, 2);
  ck_assert_int_eq(fired[1].pid, 12);
  ck_assert_uint_eq(filetimer_count(t), 0);
  filetimer_close(t);
}
END_TEST

/* Junk, overlong lines and too many timers are dropped; what follows
 * still works. */
START_TEST(test_bounded)
{
  struct filetimer *t = filetimer_new(3, on_fired, NULL);
  char *big = malloc(3 * FILETIMER_MAX_LINE);

  feed(t, "garbage\n{\"pid\": \n\n" REQ(1, "a", 5, 9), 0);
  ck_assert_uint_eq(filetimer_count(t), 1);
  /* An overlong line that looks like a request is still refused. */
  memset(big, ' ', 3 * FILETIMER_MAX_LINE);
  memcpy(big, REQ(2, "big", 5, 9), strlen(REQ(2, "big", 5, 9)) - 1);
  filetimer_feed(t, big, 3 * FILETIMER_MAX_LINE, 0);
  filetimer_feed(t, "\n", 1, 0);
  ck_assert_uint_eq(filetimer_count(t), 1);
  feed(t, REQ(2, "a", 5, 9) REQ(3, "a", 5, 9) REQ(4, "a", 5, 9), 0);
  ck_assert_uint_eq(filetimer_count(t), 3);
  /* Replacing one held is still possible at the limit. */
  feed(t, REQ(3, "a", 7, 9), 0);
  ck_assert_uint_eq(filetimer_count(t), 3);
  filetimer_expire(t, 6);
  ck_assert_int_eq(nfired, 2);
  free(big);
  filetimer_close(t);
}
END_TEST

static void on_fired_stop(void *ctx, const struct filetimer_request *tr)
{
  on_fired(ctx, tr);
  uv_stop(ctx);
}

/* The FIFO on a loop: a request written by a client process fires. */
START_TEST(test_listen)
{
  uv_loop_t loop;
  char dir[] = "/tmp/check_filetimer.XXXXXX", path[64];
  struct filetimer *t;
  struct stat st;
  int fd;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/fifo", dir);
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  /* Not a FIFO in the way: refused, left alone. */
  fd = open(path, O_WRONLY | O_CREAT, 0600);
  close(fd);
  t = filetimer_new(0, on_fired_stop, &loop);
  ck_assert_int_eq(filetimer_listen(t, &loop, path), -EEXIST);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert(S_ISREG(st.st_mode));
  filetimer_close(t);
  unlink(path);

  t = filetimer_new(0, on_fired_stop, &loop);
  ck_assert_int_eq(filetimer_listen(t, &loop, path), 0);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert(S_ISFIFO(st.st_mode));
  fd = open(path, O_WRONLY | O_NONBLOCK);
  ck_assert_int_ge(fd, 0);
  {
    const char *r = REQ(4194304, "due", 1, 9);

    ck_assert_int_eq(write(fd, r, strlen(r)), (int)strlen(r));
  }
  close(fd);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(nfired, 1);
  ck_assert_str_eq(fired[0].scope_id, "due");
  filetimer_close(t);
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  ck_assert_int_eq(access(path, F_OK), -1);   /* removed */
  rmdir(dir);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("filetimer");
  TCase *tc = tcase_create("filetimer");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, test_parse);
  tcase_add_test(tc, test_table);
  tcase_add_test(tc, test_expire);
  tcase_add_test(tc, test_bounded);
  tcase_add_test(tc, test_listen);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
