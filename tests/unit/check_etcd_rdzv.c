/* check_etcd_rdzv.c -- unit tests for the etcd back end's wire helpers
 * (launcher/etcd_client.c) and its job-state transitions
 * (launcher/etcd_rdzv_state.c).  The back end against a real etcd is
 * tested by tests/integ/t_etcd_*.sh. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_client.h"
#include "etcd_client_internal.h"
#include "etcd_rdzv_state.h"

/* ---- wire helpers ---- */

START_TEST(test_b64_vectors)
{
  static const char *const plain[] = { "", "f", "fo", "foo", "foob",
                                       "fooba", "foobar" };
  static const char *const enc[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==",
                                     "Zm9vYmE=", "Zm9vYmFy" };
  char out[64], back[64];
  size_t i;

  for (i = 0; i < sizeof plain / sizeof plain[0]; i++) {
    etcd_b64_encode(plain[i], strlen(plain[i]), out);
    ck_assert_str_eq(out, enc[i]);
    ck_assert_int_eq(etcd_b64_decode(out, strlen(out), back),
                     (int)strlen(plain[i]));
    ck_assert_str_eq(back, plain[i]);
  }
  /* The key layout's own keys, as etcd showed them. */
  etcd_b64_encode("/rdzv/x", 7, out);
  ck_assert_str_eq(out, "L3JkenYveA==");
}
END_TEST

START_TEST(test_b64_bad)
{
  char out[64];

  ck_assert_int_eq(etcd_b64_decode("Zm9", 3, out), -1);     /* length */
  ck_assert_int_eq(etcd_b64_decode("Zm9*", 4, out), -1);    /* alphabet */
  ck_assert_int_eq(etcd_b64_decode("Z===", 4, out), -1);    /* padding */
  ck_assert_int_eq(etcd_b64_decode("Zg==Zg==", 8, out), -1);
}
END_TEST

START_TEST(test_json_fields)
{
  cJSON *j = cJSON_Parse("{\"revision\":\"4111120159494236438\","
                         "\"n\":12,\"key\":\"Zm9v\",\"bad\":\"!!\"}");
  size_t len = 0;
  char *s;

  /* int64 as strings, never through a double (exceeds 2^53). */
  ck_assert(etcd_i64(j, "revision") == 4111120159494236438LL);
  ck_assert(etcd_i64(j, "n") == 12);
  ck_assert(etcd_i64(j, "missing") == 0);     /* zero values are omitted */
  s = etcd_get_b64(j, "key", &len);
  ck_assert_str_eq(s, "foo");
  ck_assert_uint_eq(len, 3);
  free(s);
  ck_assert_ptr_null(etcd_get_b64(j, "bad", &len));
  ck_assert_ptr_null(etcd_get_b64(j, "missing", &len));
  cJSON_Delete(j);
}
END_TEST

START_TEST(test_prefix_end)
{
  char out[32];

  etcd_prefix_end("/cdrun/rdzv/j/", out);
  ck_assert_str_eq(out, "/cdrun/rdzv/j0");
  etcd_prefix_end("a\xff", out);
  ck_assert_str_eq(out, "b");
}
END_TEST

/* Note [what an agent watches]: the watch's create_request, with etcd's
 * NOPUT filter spelt as etcd wants it (a field it does not know is
 * silently ignored). */
START_TEST(test_watch_request)
{
  char *txt = etcd_watch_request("YQ==", "Yg==", 42, ETCD_WATCH_NOPUT);
  cJSON *j, *cr, *f;

  ck_assert_ptr_nonnull(txt);
  j = cJSON_Parse(txt);
  ck_assert_ptr_nonnull(j);
  cr = cJSON_GetObjectItemCaseSensitive(j, "create_request");
  ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cr, "key")->valuestring,
                   "YQ==");
  ck_assert_str_eq(
      cJSON_GetObjectItemCaseSensitive(cr, "range_end")->valuestring, "Yg==");
  ck_assert_str_eq(
      cJSON_GetObjectItemCaseSensitive(cr, "start_revision")->valuestring,
      "42");
  f = cJSON_GetObjectItemCaseSensitive(cr, "filters");
  ck_assert(cJSON_IsArray(f));
  ck_assert_int_eq(cJSON_GetArraySize(f), 1);
  ck_assert_str_eq(cJSON_GetArrayItem(f, 0)->valuestring, "NOPUT");
  cJSON_Delete(j);
  free(txt);
  /* The key alone, from now, every event. */
  txt = etcd_watch_request("YQ==", NULL, 0, 0);
  j = cJSON_Parse(txt);
  cr = cJSON_GetObjectItemCaseSensitive(j, "create_request");
  ck_assert(!cJSON_HasObjectItem(cr, "range_end"));
  ck_assert(!cJSON_HasObjectItem(cr, "start_revision"));
  ck_assert(!cJSON_HasObjectItem(cr, "filters"));
  ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cr,
                                                           "progress_notify")));
  cJSON_Delete(j);
  free(txt);
}
END_TEST

/* ---- state transitions ---- */

static struct etcd_rdzv_conf conf(int min, int max, int restarts, double last_call)
{
  struct etcd_rdzv_conf c = { min, max, restarts, last_call };

  return c;
}

static struct etcd_rdzv_node node(const char *id, int nproc)
{
  struct etcd_rdzv_node n;

  memset(&n, 0, sizeof n);
  snprintf(n.id, sizeof n.id, "%s", id);
  snprintf(n.host, sizeof n.host, "host-%s", id);
  snprintf(n.addr, sizeof n.addr, "10.0.0.%d", (int)id[0]);
  n.nproc = nproc;
  n.port = 29500;
  return n;
}

static int join(struct etcd_rdzv_state *s, const char *id, int nproc,
                struct etcd_rdzv_conf c)
{
  struct etcd_rdzv_node n = node(id, nproc);
  char err[256];

  return etcd_rdzv_state_join(s, &n, &c, err, sizeof err);
}

static const struct etcd_rdzv_node *get(const struct etcd_rdzv_state *s, const char *id)
{
  int i = etcd_rdzv_state_find(s, id);

  ck_assert_int_ge(i, 0);
  return &s->nodes[i];
}

START_TEST(test_complete_at_max)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(2, 2, 0, 30);

  etcd_rdzv_state_init(&s);
  ck_assert_int_eq(join(&s, "a", 2, c), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);
  ck_assert_int_eq(join(&s, "a", 2, c), 0);       /* idempotent */
  ck_assert_int_eq(join(&s, "b", 1, c), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(get(&s, "a")->rank, 0);
  ck_assert_int_eq(get(&s, "b")->rank, 1);
  ck_assert_int_eq(s.round, 0);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_last_call)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(1, 3, 0, 30);

  etcd_rdzv_state_init(&s);
  ck_assert(!etcd_rdzv_state_last_call_due(&s));          /* no job yet */
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);        /* waits for more */
  ck_assert(etcd_rdzv_state_last_call_due(&s));           /* min is there */
  ck_assert_int_eq(etcd_rdzv_state_last_call(&s, 5), 0);       /* another round's */
  ck_assert_int_eq(etcd_rdzv_state_last_call(&s, 0), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(etcd_rdzv_state_last_call(&s, 0), 0);       /* twice: nothing */
  ck_assert(!etcd_rdzv_state_last_call_due(&s));          /* it runs */
  etcd_rdzv_state_free(&s);
  /* Below min_nodes (rdzv_rules_gather: wait): no last call. */
  etcd_rdzv_state_init(&s);
  c = conf(2, 3, 0, 30);
  join(&s, "a", 1, c);
  ck_assert(!etcd_rdzv_state_last_call_due(&s));
  ck_assert_int_eq(etcd_rdzv_state_last_call(&s, 0), 0);
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);
  join(&s, "b", 1, c);
  ck_assert(etcd_rdzv_state_last_call_due(&s));
  ck_assert_int_eq(etcd_rdzv_state_last_call(&s, 0), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  etcd_rdzv_state_free(&s);
  /* last_call_timeout 0: complete at min_nodes. */
  etcd_rdzv_state_init(&s);
  c = conf(1, 3, 0, 0);
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_failure_once_per_round)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(2, 2, 1, 30);

  etcd_rdzv_state_init(&s);
  join(&s, "a", 1, c);
  join(&s, "b", 1, c);
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "b", 0, false, "boom", NULL), 1);
  ck_assert_int_eq(s.restart_count, 1);
  ck_assert_int_eq(s.round, 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);
  ck_assert_ptr_nonnull(strstr(s.why, "workers failed: boom"));
  /* a's report of the same round: part of the same restart. */
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "a", 0, false, "boom too", NULL), 0);
  ck_assert_int_eq(s.restart_count, 1);
  /* Both come back: the round completes as soon as none is outstanding,
   * with the old ranks. */
  join(&s, "b", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(get(&s, "a")->rank, 0);
  ck_assert_int_eq(get(&s, "b")->rank, 1);
  /* a's report of round 0 arriving only now (after a retried
   * transaction, say) must not restart round 1. */
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "a", 0, false, "late", NULL), 0);
  ck_assert_int_eq(s.restart_count, 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  /* No restart left: the job closes. */
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "a", 1, false, "again", NULL), 1);
  /* Note [root cause]: closing until b reports or the wait runs out. */
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert(s.closing);
  ck_assert_int_eq(etcd_rdzv_state_close_wait_over(&s, 0), 0);
  ck_assert_int_eq(etcd_rdzv_state_close_wait_over(&s, 1), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_CLOSED);
  ck_assert_ptr_nonnull(strstr(s.why, "no restarts left (1 of 1 used)"));
  ck_assert_int_eq(join(&s, "c", 1, c), -ESHUTDOWN);
  etcd_rdzv_state_free(&s);
}
END_TEST

/* Note [root cause]: a's report comes first, b's worker exited first:
 * the closed state names b's, through a serialize/parse round trip; a
 * report that exited later is secondary, and a lost node ends the wait. */
START_TEST(test_root_cause_earliest)
{
  struct etcd_rdzv_state s, t;
  struct etcd_rdzv_conf c = conf(3, 3, 0, 30);
  struct rdzv_proto_cause ca = { .exited_at = 200.5, .rank = 0, .exitcode = 104,
                         .pid = 10 };
  struct rdzv_proto_cause cb = { .exited_at = 199.25, .rank = 2, .exitcode = 28,
                         .pid = 20 };
  char *json;

  etcd_rdzv_state_init(&s);
  etcd_rdzv_state_init(&t);
  join(&s, "a", 2, c);
  join(&s, "b", 2, c);
  join(&s, "x", 2, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "a", 0, true, "rank 0: reset", &ca), 1);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert(s.closing);
  /* The same report again (a retried transaction): no change. */
  ck_assert_int_eq(etcd_rdzv_state_failure(&s, "a", 0, true, "rank 0: reset", &ca), 0);
  json = etcd_rdzv_state_serialize(&s);
  ck_assert_int_eq(etcd_rdzv_state_parse(json, strlen(json), &t), 0);
  free(json);
  ck_assert_int_eq(etcd_rdzv_state_failure(&t, "b", 0, true, "rank 2: disk full", &cb),
                   1);
  ck_assert_int_eq(t.phase, ETCD_RDZV_RUNNING);    /* x has not reported */
  ck_assert_int_eq(etcd_rdzv_state_remove(&t, "x", "lost"), 1);
  ck_assert_int_eq(t.phase, ETCD_RDZV_CLOSED);
  json = etcd_rdzv_state_serialize(&t);
  ck_assert_int_eq(etcd_rdzv_state_parse(json, strlen(json), &s), 0);
  free(json);
  ck_assert(s.cause_held);
  ck_assert_double_eq(s.cause.exited_at, 199.25);
  ck_assert_int_eq(s.cause.rank, 2);
  ck_assert_int_eq(s.cause.exitcode, 28);
  ck_assert_int_eq(s.cause.pid, 20);
  ck_assert_str_eq(s.cause.host, "host-b");
  ck_assert_ptr_nonnull(strstr(s.why, "rank 2: disk full"));
  etcd_rdzv_state_free(&s);
  etcd_rdzv_state_free(&t);
}
END_TEST

/* rdzvd's rule (zero_last_call_waits_for_restarting_nodes): with
 * last_call_timeout 0, a round of restarting nodes waits for them, at
 * most a keepalive window, instead of completing without them. */
START_TEST(test_zero_last_call_waits_for_restarting)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(1, 2, 3, 0);

  etcd_rdzv_state_init(&s);
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(join(&s, "b", 1, c), 1);       /* a new round */
  ck_assert_int_eq(s.phase, ETCD_RDZV_GATHERING);        /* waits for a */
  ck_assert(etcd_rdzv_state_last_call_wait(&s, 5) == 5);
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(get(&s, "a")->rank, 0);
  ck_assert_int_eq(get(&s, "b")->rank, 1);
  ck_assert(etcd_rdzv_state_last_call_wait(&s, 5) == 0);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_scale_up_and_lost)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(1, 3, 0, 30);

  etcd_rdzv_state_init(&s);
  join(&s, "a", 2, c);
  etcd_rdzv_state_last_call(&s, 0);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  /* A newcomer while running: a new round, no restart counted. */
  ck_assert_int_eq(join(&s, "b", 1, c), 1);
  ck_assert_int_eq(s.round, 1);
  ck_assert_int_eq(s.restart_count, 0);
  ck_assert_ptr_nonnull(strstr(s.why, "joined"));
  join(&s, "a", 2, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(get(&s, "a")->rank, 0);        /* keeps rank 0 */
  ck_assert_int_eq(get(&s, "b")->rank, 1);
  /* b's lease expired: a new round for a. */
  ck_assert_int_eq(etcd_rdzv_state_remove(&s, "b", "lost"), 1);
  ck_assert_int_eq(s.round, 2);
  ck_assert_ptr_nonnull(strstr(s.why, "lost"));
  ck_assert_int_eq(etcd_rdzv_state_remove(&s, "b", "lost"), 0);
  join(&s, "a", 2, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_full_round_waits)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(2, 2, 0, 30);

  etcd_rdzv_state_init(&s);
  join(&s, "a", 1, c);
  join(&s, "b", 1, c);
  ck_assert_int_eq(join(&s, "c", 1, c), 1);
  ck_assert_int_eq(get(&s, "c")->st, ETCD_RDZV_SPARE);
  ck_assert_int_eq(s.round, 0);                   /* no new round */
  /* b dies: c takes its place in the new round. */
  etcd_rdzv_state_remove(&s, "b", "lost");
  join(&s, "a", 1, c);
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(get(&s, "c")->st, ETCD_RDZV_PART);
  ck_assert_int_eq(get(&s, "c")->rank, 1);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_barrier_and_leave)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_conf c = conf(2, 2, 0, 30);

  etcd_rdzv_state_init(&s);
  join(&s, "a", 1, c);
  join(&s, "b", 1, c);
  ck_assert_int_eq(etcd_rdzv_state_barrier(&s, "a", 3), 0);     /* stale round */
  ck_assert_int_eq(etcd_rdzv_state_barrier(&s, "a", 0), 1);
  ck_assert(!s.exit_passed);
  ck_assert_int_eq(etcd_rdzv_state_barrier(&s, "a", 0), 0);
  ck_assert_int_eq(etcd_rdzv_state_barrier(&s, "b", 0), 1);
  ck_assert(s.exit_passed);
  /* Leaving after the barrier starts no round; the last one finishes. */
  etcd_rdzv_state_remove(&s, "a", "left");
  ck_assert_int_eq(s.phase, ETCD_RDZV_RUNNING);
  ck_assert_int_eq(s.round, 0);
  etcd_rdzv_state_remove(&s, "b", "left");
  ck_assert_int_eq(s.n, 0);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_config_mismatch)
{
  struct etcd_rdzv_state s;
  struct etcd_rdzv_node n = node("b", 1);
  struct etcd_rdzv_conf c = conf(2, 2, 3, 30), other = conf(1, 3, 3, 30);
  char err[256];

  etcd_rdzv_state_init(&s);
  join(&s, "a", 1, c);
  ck_assert_int_eq(etcd_rdzv_state_join(&s, &n, &other, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "1..3 differs from the job's 2..2"));
  other = conf(2, 2, 1, 30);
  ck_assert_int_eq(etcd_rdzv_state_join(&s, &n, &other, err, sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "max_restarts 1 differs"));
  ck_assert_int_eq(s.n, 1);
  etcd_rdzv_state_free(&s);
}
END_TEST

START_TEST(test_serialize_round_trip)
{
  struct etcd_rdzv_state s, t;
  struct etcd_rdzv_conf c = conf(1, 4, 2, 1.5);
  char *text, *again;

  etcd_rdzv_state_init(&s);
  etcd_rdzv_state_init(&t);
  join(&s, "a", 3, c);
  join(&s, "b", 1, c);
  etcd_rdzv_state_last_call(&s, 0);
  etcd_rdzv_state_barrier(&s, "b", 0);
  /* Note [the job's lease], Note [the job token on etcd]: kept. */
  snprintf(s.lease, sizeof s.lease, "7587869512368412345");
  memset(s.token, 'a', 64);
  s.token[64] = '\0';
  s.token_restart = 0;
  snprintf(s.token_master, sizeof s.token_master, "10.0.0.97:29500");
  text = etcd_rdzv_state_serialize(&s);
  ck_assert_ptr_nonnull(text);
  ck_assert_int_eq(etcd_rdzv_state_parse(text, strlen(text), &t), 0);
  again = etcd_rdzv_state_serialize(&t);
  ck_assert_str_eq(text, again);
  ck_assert_int_eq(t.n, 2);
  ck_assert_int_eq(get(&t, "a")->nproc, 3);
  ck_assert(get(&t, "b")->in_exit);
  ck_assert(t.conf.last_call_timeout == 1.5);
  ck_assert_str_eq(t.lease, "7587869512368412345");
  ck_assert_str_eq(t.token, s.token);
  ck_assert_int_eq(t.token_restart, 0);
  ck_assert_str_eq(t.token_master, "10.0.0.97:29500");
  /* A transition keeps them: the agent, not the state, replaces them. */
  ck_assert_int_eq(etcd_rdzv_state_failure(&t, "a", 0, false, "x", NULL), 1);
  ck_assert_int_eq(t.restart_count, 1);
  ck_assert_str_eq(t.lease, "7587869512368412345");
  ck_assert_str_eq(t.token, s.token);
  free(text);
  free(again);
  ck_assert_int_eq(etcd_rdzv_state_parse("{\"phase\":\"nope\",\"nodes\":[]}", 26, &t),
                   -EINVAL);
  ck_assert_int_eq(etcd_rdzv_state_parse("[1]", 3, &t), -EINVAL);
  etcd_rdzv_state_free(&s);
  etcd_rdzv_state_free(&t);
}
END_TEST

static Suite *etcd_suite(void)
{
  Suite *s = suite_create("etcd_rdzv");
  TCase *tc = tcase_create("core");

  tcase_add_test(tc, test_b64_vectors);
  tcase_add_test(tc, test_b64_bad);
  tcase_add_test(tc, test_json_fields);
  tcase_add_test(tc, test_prefix_end);
  tcase_add_test(tc, test_watch_request);
  tcase_add_test(tc, test_complete_at_max);
  tcase_add_test(tc, test_last_call);
  tcase_add_test(tc, test_failure_once_per_round);
  tcase_add_test(tc, test_root_cause_earliest);
  tcase_add_test(tc, test_zero_last_call_waits_for_restarting);
  tcase_add_test(tc, test_scale_up_and_lost);
  tcase_add_test(tc, test_full_round_waits);
  tcase_add_test(tc, test_barrier_and_leave);
  tcase_add_test(tc, test_config_mismatch);
  tcase_add_test(tc, test_serialize_round_trip);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(etcd_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
