/* check_pg_exchange.c -- unit tests for the setup exchanges over the
 * store (exchange.c): pg__store_allgather, with and without a setup
 * watch (Note [setup watch] in recover.c), over a real store served in
 * this process. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pg.h"
#include "pg_internal.h"

static pg_store_server *server;
static int port;

static void serve(void)
{
  port = 0;
  ck_assert_int_eq(pg_store_server_start_auth("127.0.0.1", &port, "",
                                              &server), 0);
}

static int watch_never(void *arg)
{
  (void)arg;
  return 0;
}

static int watch_says_lost(void *arg)
{
  int *calls = arg;

  ++*calls;
  return pg__fail(PG_ERR_PEER_LOST, "a member is gone");
}

/* Without a watch: the others' values, in rank order. */
START_TEST(test_allgather)
{
  pg_store *st = NULL;
  void *vals[2];
  size_t lens[2];

  serve();
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 5, &st), 0);
  ck_assert_int_eq(pg_store_set(st, "x/k/1", "one", 3), 0);
  ck_assert_int_eq(pg__store_allgather(st, "x/", "k/", 0, 2, "zero", 4, 5,
                                       vals, lens), 0);
  ck_assert_int_eq(lens[0], 4);
  ck_assert(memcmp(vals[0], "zero", 4) == 0);
  ck_assert_int_eq(lens[1], 3);
  ck_assert(memcmp(vals[1], "one", 3) == 0);
  pg__free_vals(vals, 2);
  pg_store_close(st);
  pg_store_server_stop(server);
}
END_TEST

/* A watch that says no ends the wait with its error and sentence. */
START_TEST(test_watch_ends_wait)
{
  pg_store *st = NULL;
  void *vals[2];
  size_t lens[2];
  int calls = 0;

  serve();
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 5, &st), 0);
  pg__setup_watch(watch_says_lost, &calls);
  ck_assert_int_eq(pg__store_allgather(st, "x/", "k/", 0, 2, "v", 1, 30,
                                       vals, lens), PG_ERR_PEER_LOST);
  pg__setup_watch(NULL, NULL);
  ck_assert_int_eq(calls, 1);
  ck_assert_str_eq(pg_last_error(), "a member is gone");
  pg_store_close(st);
  pg_store_server_stop(server);
}
END_TEST

struct deleter {
  pg_store *st;
  volatile bool stop;
};

static void *delete_loop(void *arg)
{
  struct deleter *d = arg;

  while (!d->stop) {
    pg__store_delete_prefix(d->st, "x/", NULL);
    usleep(10000);
  }
  return NULL;
}

/* A client that deletes the keys every 10 ms (issue 30, defect 4): a
 * watched exchange ends with -EPROTO naming this rank's vanished key,
 * not after its timeout (-ETIMEDOUT). */
START_TEST(test_key_vanished)
{
  struct deleter d = { NULL, false };
  pg_store *st = NULL;
  pthread_t t;
  void *vals[2];
  size_t lens[2];

  serve();
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 5, &st), 0);
  ck_assert_int_eq(pg_store_connect("127.0.0.1", port, 5, &d.st), 0);
  ck_assert_int_eq(pthread_create(&t, NULL, delete_loop, &d), 0);
  pg__setup_watch(watch_never, NULL);
  ck_assert_int_eq(pg__store_allgather(st, "x/", "k/", 0, 2, "v", 1, 10,
                                       vals, lens), -EPROTO);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "'x/k/0' vanished"));
  pg__setup_watch(NULL, NULL);
  d.stop = true;
  pthread_join(t, NULL);
  pg_store_close(d.st);
  pg_store_close(st);
  pg_store_server_stop(server);
}
END_TEST

static Suite *exchange_suite(void)
{
  Suite *s = suite_create("pg_exchange");
  TCase *tc = tcase_create("allgather");

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_allgather);
  tcase_add_test(tc, test_watch_ends_wait);
  tcase_add_test(tc, test_key_vanished);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(exchange_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
