/* check_pg_live.c -- unit tests for live recovery's pure parts and its
 * generation bookkeeping: the round file (live_round.c), entries and
 * decisions (live_member.c), forming generations over a real store in
 * this process (live_form.c), and pg_init's checks of the live
 * environment.  The scenarios with processes are t_pg_live*.sh. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "live.h"
#include "pg.h"

/* ---- round file ------------------------------------------------------- */

static int parse(const char *s, struct live_round *r)
{
  return pg__live_round_parse(s, strlen(s), "the round file", r);
}

START_TEST(test_round_parse)
{
  struct live_round r;
  int slot;

  ck_assert_int_eq(parse("round=3 world=8 rank_offset=4 local_world=4\n",
                         &r), 0);
  ck_assert_int_eq(r.round, 3);
  ck_assert_int_eq(r.world, 8);
  ck_assert_int_eq(r.rank_offset, 4);
  ck_assert_int_eq(r.local_world, 4);
  ck_assert_int_eq(pg__live_round_slot(&r, 2, &slot), 0);
  ck_assert_int_eq(slot, 6);
  ck_assert_int_eq(pg__live_round_slot(&r, 4, &slot), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "LOCAL_RANK 4"));
  /* Any order, no newline. */
  ck_assert_int_eq(parse("local_world=1 rank_offset=0 world=1 round=0", &r),
                   0);
  ck_assert_int_eq(r.world, 1);
}
END_TEST

START_TEST(test_round_parse_errors)
{
  static const struct { const char *text, *names; } bad[] = {
    { "round=1 world=2 rank_offset=0", "local_world= is missing" },
    { "round=1 round=1 world=2 rank_offset=0 local_world=1", "twice" },
    { "round=x world=2 rank_offset=0 local_world=1", "round is 'x'" },
    { "round=1 world=0 rank_offset=0 local_world=1", "world is '0'" },
    { "round=-1 world=2 rank_offset=0 local_world=1", "round is '-1'" },
    { "round=1 world=2 rank_offset=0 local_world=1 x=1", "'x=1'" },
    { "round=1 world=2 rank_offset=0 local_world", "'local_world'" },
    { "round=1 world=2 rank_offset=2 local_world=1", "more than" },
    { "round=1 world=2\nrank_offset=0 local_world=1\n", "one line" },
    { "", "round= is missing" },
  };
  struct live_round r;
  size_t i;

  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ck_assert_msg(parse(bad[i].text, &r) == -EINVAL, "'%s' accepted",
                  bad[i].text);
    ck_assert_msg(strstr(pg_last_error(), bad[i].names) != NULL,
                  "'%s': sentence '%s' lacks '%s'", bad[i].text,
                  pg_last_error(), bad[i].names);
  }
}
END_TEST

START_TEST(test_round_read)
{
  char path[] = "/tmp/check_pg_live.XXXXXX";
  struct live_round r;
  int fd = mkstemp(path);
  const char *line = "round=2 world=3 rank_offset=2 local_world=1\n";

  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, line, strlen(line)), (int)strlen(line));
  close(fd);
  ck_assert_int_eq(pg__live_round_read(path, &r), 0);
  ck_assert_int_eq(r.round, 2);
  unlink(path);
  ck_assert_int_eq(pg__live_round_read(path, &r), -ENOENT);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), path));
}
END_TEST

/* ---- entries and decisions ---------------------------------------------- */

static struct pg__live_member member(int slot, int world, int64_t round,
                                     uint64_t inc)
{
  struct pg__live_member m;

  memset(&m, 0, sizeof m);
  m.inc = inc;
  m.round = round;
  m.world = world;
  m.slot = slot;
  m.old_rank = slot;
  m.from = 4;
  m.pid = 1234 + slot;
  m.valid = true;
  snprintf(m.boot, sizeof m.boot, "boot-%d", slot);
  return m;
}

START_TEST(test_member_roundtrip)
{
  struct pg__live_member m = member(2, 3, 7, 0xfeedfacecafebeefull), back;
  char buf[PG__LIVE_MEMBER_MAX];

  m.fresh = true;
  m.old_rank = -1;
  m.from = -1;
  pg__live_member_format(&m, buf, sizeof buf);
  ck_assert_int_eq(pg__live_member_parse(buf, strlen(buf), &back), 0);
  ck_assert(back.inc == m.inc);
  ck_assert_int_eq(back.round, 7);
  ck_assert_int_eq(back.slot, 2);
  ck_assert_int_eq(back.old_rank, -1);
  ck_assert_int_eq(back.from, -1);
  ck_assert(back.fresh && back.valid && !back.comm);
  m.comm = true;
  pg__live_member_format(&m, buf, sizeof buf);
  ck_assert_int_eq(pg__live_member_parse(buf, strlen(buf), &back), 0);
  ck_assert(back.comm);
  ck_assert_str_eq(back.boot, "boot-2");
  m.boot[0] = '\0';
  pg__live_member_format(&m, buf, sizeof buf);
  ck_assert_int_eq(pg__live_member_parse(buf, strlen(buf), &back), 0);
  ck_assert_str_eq(back.boot, "");
  /* Malformed: truncated, trailing bytes, a slot outside the world. */
  ck_assert_int_eq(pg__live_member_parse(buf, 10, &back), -EPROTO);
  ck_assert_int_eq(pg__live_member_parse("inc=1 round=0 world=2 slot=2 "
                   "old=0 from=0 pid=1 fresh=0 valid=1 boot=-", 63, &back),
                   -EPROTO);
  strcat(buf, " x");
  ck_assert_int_eq(pg__live_member_parse(buf, strlen(buf), &back), -EPROTO);
}
END_TEST

START_TEST(test_complete)
{
  struct pg__live_member m[3];
  bool present[3] = { true, true, true };
  int i;

  for (i = 0; i < 3; i++)
    m[i] = member(i, 3, 5, 100 + (uint64_t)i);
  ck_assert(pg__live_complete(m, present, 3, 5));
  ck_assert(!pg__live_complete(m, present, 3, 6));   /* older round */
  present[1] = false;
  ck_assert(!pg__live_complete(m, present, 3, 5));   /* a slot missing */
  present[1] = true;
  m[2].inc = m[0].inc;                               /* one process twice */
  ck_assert(!pg__live_complete(m, present, 3, 5));
  m[2].inc = 102;
  m[2].world = 4;                                    /* another world */
  ck_assert(!pg__live_complete(m, present, 3, 5));
}
END_TEST

START_TEST(test_decision)
{
  struct pg__live_member m[3], *back;
  int64_t round;
  int world, i;
  char *d;

  for (i = 0; i < 3; i++)
    m[i] = member(i, 3, 9, 500 + (uint64_t)i);
  m[0].valid = false;                    /* not a heal source */
  m[1].fresh = true;                     /* a newcomer: not one either */
  d = pg__live_decision_format(m, 3, 9);
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(pg__live_decision_parse(d, strlen(d), &back, &world,
                                           &round), 0);
  ck_assert_int_eq(world, 3);
  ck_assert_int_eq(round, 9);
  for (i = 0; i < 3; i++)
    ck_assert(back[i].inc == m[i].inc);
  ck_assert_int_eq(pg__live_heal_source(back, world), 2);
  back[2].valid = false;
  ck_assert_int_eq(pg__live_heal_source(back, world), -1);
  free(back);
  /* Truncated: a member short. */
  ck_assert_int_eq(pg__live_decision_parse(d, strlen(d) - 5, &back, &world,
                                           &round), -EPROTO);
  ck_assert_ptr_null(back);
  free(d);
  ck_assert_int_eq(pg__live_decision_parse(PG__LIVE_ABANDONED,
                                           strlen(PG__LIVE_ABANDONED),
                                           &back, &world, &round), 0);
  ck_assert_int_eq(world, 0);
  ck_assert_int_eq(pg__live_decision_parse("round=1 world=0\n", 16, &back,
                                           &world, &round), -EPROTO);
}
END_TEST

/* Note [shrink]: members only left, in order, every one holding the old
 * communicator: a shrink.  One without it (its shrink failed), a
 * newcomer, the same world or a reordering: a new communicator, decided
 * alike by every member from the decision. */
START_TEST(test_shrinks)
{
  struct pg__live_member m[3];
  int i;

  for (i = 0; i < 3; i++) {
    m[i] = member(i, 3, 2, 10 + (uint64_t)i);
    m[i].old_rank = i == 2 ? 3 : i;        /* old rank 2 left */
    m[i].comm = true;
  }
  ck_assert(pg__live_shrinks(m, 3, 4, 4));
  ck_assert(!pg__live_shrinks(m, 3, 4, 3));  /* nobody left */
  ck_assert(!pg__live_shrinks(m, 3, 5, 4));  /* from another generation */
  m[1].comm = false;                         /* its shrink failed */
  ck_assert(!pg__live_shrinks(m, 3, 4, 4));
  m[1].comm = true;
  m[1].fresh = true;                         /* a newcomer */
  ck_assert(!pg__live_shrinks(m, 3, 4, 4));
  m[1].fresh = false;
  m[1].old_rank = 5;                         /* order changed */
  ck_assert(!pg__live_shrinks(m, 3, 4, 4));
}
END_TEST

/* ---- forming generations over a store ---------------------------------- */

static pg_store_server *server;
static int port;

static pg_store *connect_store(void)
{
  pg_store *st;

  ck_assert_int_eq(pg_store_connect_auth("127.0.0.1", port, 10, "", &st),
                   0);
  return st;
}

static void serve(void)
{
  port = 0;
  ck_assert_int_eq(pg_store_server_start_auth("127.0.0.1", &port, "",
                                              &server), 0);
}

struct joiner {
  struct pg__live_join j;
  uint64_t gen;
  struct pg__live_formed f;
  int err;
  char why[512];        /* its pg_last_error (thread-local) */
  pthread_t t;
};

static void *join_main(void *arg)
{
  struct joiner *x = arg;

  x->err = pg__live_form(&x->j, x->gen, &x->f);
  snprintf(x->why, sizeof x->why, "%s", pg_last_error());
  return NULL;
}

static void joiner_init(struct joiner *x, int rank, int world, bool fresh,
                        uint64_t inc)
{
  memset(x, 0, sizeof *x);
  x->j.store = connect_store();
  x->j.env_rank = rank;
  x->j.env_world = world;
  x->j.inc = inc;
  x->j.boot = "";
  x->j.fresh = fresh;
  x->j.valid = !fresh;
  x->j.old_rank = fresh ? -1 : rank;
  x->j.from = fresh ? -1 : 0;
  x->j.timeout = 20;
}

/* Waits (an observable event, bounded) until key exists in st. */
static void wait_key(pg_store *st, const char *key)
{
  void *v = NULL;
  size_t len;

  ck_assert_msg(pg_store_get(st, key, 20, &v, &len) == 0, "no %s", key);
  free(v);
}

/* Frees what two joiners, the scenario's store and server hold. */
static void end_pair(struct joiner *a, struct joiner *b, pg_store *st)
{
  free(a->f.m);
  free(b->f.m);
  pg_store_close(a->j.store);
  pg_store_close(b->j.store);
  pg_store_close(st);
  pg_store_server_stop(server);
}

static void joiner_start(struct joiner *x, uint64_t gen)
{
  x->gen = gen;
  ck_assert_int_eq(pthread_create(&x->t, NULL, join_main, x), 0);
}

/* Three fresh processes form generation 0 together; a replacement
 * formed later skips it and meets the survivors in generation 1, where
 * the survivors are valid and it is fresh. */
START_TEST(test_form_first_and_replacement)
{
  struct joiner x[3];
  int i;

  serve();
  for (i = 0; i < 3; i++) {
    joiner_init(&x[i], i, 3, true, 10 + (uint64_t)i);
    joiner_start(&x[i], 0);
  }
  for (i = 0; i < 3; i++) {
    pthread_join(x[i].t, NULL);
    ck_assert_msg(x[i].err == 0, "%s", x[i].why);
    ck_assert_int_eq(x[i].f.gen, 0);
    ck_assert_int_eq(x[i].f.slot, i);
    ck_assert_int_eq(x[i].f.world, 3);
    ck_assert_int_eq(pg__live_heal_source(x[i].f.m, 3), -1);
    free(x[i].f.m);
    x[i].f.m = NULL;
  }
  /* Rank 1 is replaced: a fresh process asked for generation 0. */
  x[1].j.inc = 99;
  joiner_start(&x[1], 0);
  for (i = 0; i < 3; i += 2) {
    x[i].j.fresh = false;
    x[i].j.valid = true;
    x[i].j.old_rank = i;
    x[i].j.from = 0;
    joiner_start(&x[i], 1);
  }
  for (i = 0; i < 3; i++) {
    pthread_join(x[i].t, NULL);
    ck_assert_msg(x[i].err == 0, "%s", x[i].why);
    ck_assert_int_eq(x[i].f.gen, 1);
    ck_assert_int_eq(x[i].f.slot, i);
    ck_assert(x[i].f.m[1].fresh && x[i].f.m[1].inc == 99);
    ck_assert_int_eq(pg__live_heal_source(x[i].f.m, 3), 0);
    free(x[i].f.m);
    x[i].f.m = NULL;
    pg_store_close(x[i].j.store);
  }
  pg_store_server_stop(server);
}
END_TEST

/* A member waiting in generation 1 (whose other member never comes)
 * moves to generation 2 once it starts, abandoning 1; nobody can decide
 * generation 1 afterwards. */
START_TEST(test_form_moves_to_later)
{
  struct joiner a, b;
  pg_store *st;
  void *v;
  size_t len;

  serve();
  joiner_init(&a, 0, 2, false, 1);
  joiner_init(&b, 1, 2, false, 2);
  joiner_start(&a, 1);
  st = connect_store();
  wait_key(st, "live/g1/m0");     /* a is in generation 1 */
  joiner_start(&b, 2);
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
  ck_assert_msg(a.err == 0 && b.err == 0, "%s / %s", a.why, b.why);
  ck_assert_int_eq(a.f.gen, 2);
  ck_assert_int_eq(b.f.gen, 2);
  ck_assert_int_eq(pg_store_get(st, "live/g1/done", 0, &v, &len), 0);
  ck_assert_int_eq(len, strlen(PG__LIVE_ABANDONED));
  ck_assert(memcmp(v, PG__LIVE_ABANDONED, len) == 0);
  free(v);
  end_pair(&a, &b, st);
}
END_TEST

/* Note [check in]: generation 0 is decided with a member that died on
 * another machine (its entry is all that is left of it); its replacement
 * finds 0 decided and starts 1, so the verdict on 0 is "abort" and the
 * survivor meets the replacement in 1 instead of waiting for the dead. */
START_TEST(test_form_check_in_abort)
{
  struct pg__live_member dead = member(1, 2, 0, 777);
  char entry[PG__LIVE_MEMBER_MAX];
  struct joiner a, b;
  pg_store *st;
  void *v;
  size_t len;

  serve();
  st = connect_store();
  snprintf(dead.boot, sizeof dead.boot, "another-machine");
  dead.fresh = true;
  pg__live_member_format(&dead, entry, sizeof entry);
  ck_assert_int_eq(pg_store_set(st, "live/g0/m1", entry, strlen(entry)), 0);
  joiner_init(&a, 0, 2, true, 1);
  joiner_start(&a, 0);
  wait_key(st, "live/g0/in0");    /* a checked in to generation 0 */
  joiner_init(&b, 1, 2, true, 2);
  joiner_start(&b, 0);
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
  ck_assert_msg(a.err == 0 && b.err == 0, "%s / %s", a.why, b.why);
  ck_assert_int_eq(a.f.gen, 1);
  ck_assert_int_eq(b.f.gen, 1);
  ck_assert(a.f.m[1].inc == 2);
  ck_assert_int_eq(pg_store_get(st, "live/g0/verdict", 0, &v, &len), 0);
  ck_assert(len == 5 && memcmp(v, "abort", 5) == 0);
  free(v);
  end_pair(&a, &b, st);
}
END_TEST

/* Note [bounded store]: 30 successive generations of two survivors,
 * each with keys of its own under pg/gen<G>/ (a communicator's), leave
 * the store's key count bounded; a fresh process that comes afterwards
 * starts at live/next, not in a generation whose keys are gone. */
START_TEST(test_form_bounded_store)
{
  struct joiner a, b, c;
  pg_store *st;
  char key[64];
  int64_t n, most = 0;
  int gen;

  serve();
  st = connect_store();
  joiner_init(&a, 0, 2, false, 1);
  joiner_init(&b, 1, 2, false, 2);
  for (gen = 1; gen <= 30; gen++) {
    joiner_start(&a, (uint64_t)gen);
    joiner_start(&b, (uint64_t)gen);
    pthread_join(a.t, NULL);
    pthread_join(b.t, NULL);
    ck_assert_msg(a.err == 0 && b.err == 0, "%s / %s", a.why, b.why);
    ck_assert_int_eq(a.f.gen, gen);
    ck_assert_int_eq(b.f.gen, gen);
    free(a.f.m);
    free(b.f.m);
    a.f.m = b.f.m = NULL;
    snprintf(key, sizeof key, "pg/gen%d/tcp/addr0", gen);
    ck_assert_int_eq(pg_store_set(st, key, "x", 1), 0);
    snprintf(key, sizeof key, "pg/gen%d/tcp/addr1", gen);
    ck_assert_int_eq(pg_store_set(st, key, "x", 1), 0);
    ck_assert_int_eq(pg_store_num_keys(st, &n), 0);
    most = n > most ? n : most;
  }
  /* Three generations' keys at most (11 each: two entries, started,
   * the round's count, done, two check-ins, their count, the verdict,
   * two of pg/) and live/next, live/kept. */
  ck_assert_msg(most <= 3 * 11 + 2, "%lld keys after 30 generations",
                (long long)most);
  /* Rank 1 replaced: its fresh process, asked for generation 0, meets
   * the survivor in 31. */
  joiner_init(&c, 1, 2, true, 3);
  joiner_start(&c, 0);
  joiner_start(&a, 31);
  pthread_join(a.t, NULL);
  pthread_join(c.t, NULL);
  ck_assert_msg(a.err == 0 && c.err == 0, "%s / %s", a.why, c.why);
  ck_assert_int_eq(c.f.gen, 31);
  ck_assert(c.f.m[1].fresh);
  free(c.f.m);
  pg_store_close(c.j.store);
  end_pair(&a, &b, st);
}
END_TEST

/* Note [generations]: forming a generation of N members costs O(N) store
 * requests (about 11 each), not a read of every slot per member and poll
 * (over 100 each at 64 members).  The bound leaves each member 20
 * requests of slack, plus two per WAIT_SLICE (0.05 s) that the formation
 * took: a member waits in slices, so a slow machine costs requests in
 * proportion to the time, never to the members. */
static void *form_main(void *arg)
{
  struct joiner *x = arg;

  x->err = pg__live_form(&x->j, 0, &x->f);
  return NULL;
}

START_TEST(test_form_linear_requests)
{
  enum { N = 64 };
  struct joiner *x = calloc(N, sizeof *x);
  uint64_t r0, used, bound;
  double t0;
  int i;

  ck_assert_ptr_nonnull(x);
  serve();
  for (i = 0; i < N; i++) {
    joiner_init(&x[i], i, N, true, 1000 + (uint64_t)i);
    x[i].j.timeout = 50;
  }
  r0 = pg__store_server_requests(server);
  t0 = pg__now();
  for (i = 0; i < N; i++)
    ck_assert_int_eq(pthread_create(&x[i].t, NULL, form_main, &x[i]), 0);
  for (i = 0; i < N; i++)
    pthread_join(x[i].t, NULL);
  used = pg__store_server_requests(server) - r0;
  bound = (uint64_t)N * (31 + 2 * (uint64_t)((pg__now() - t0) / 0.05));
  for (i = 0; i < N; i++) {
    ck_assert_int_eq(x[i].err, 0);
    ck_assert_int_eq(x[i].f.slot, i);
    free(x[i].f.m);
    pg_store_close(x[i].j.store);
  }
  ck_assert_msg(used <= bound, "%llu store requests for %d members "
                "(at most %llu)", (unsigned long long)used, N,
                (unsigned long long)bound);
  pg_store_server_stop(server);
  free(x);
}
END_TEST

/* A generation whose member never comes: -ETIMEDOUT, with a sentence. */
START_TEST(test_form_timeout)
{
  struct joiner a;

  serve();
  joiner_init(&a, 0, 2, true, 1);
  a.j.timeout = 0.3;
  ck_assert_int_eq(pg__live_form(&a.j, 0, &a.f), -ETIMEDOUT);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "1 of 2 members"));
  pg_store_close(a.j.store);
  pg_store_server_stop(server);
}
END_TEST

/* Note [store values]: a value in the live store that libpg did not
 * write is refused with -EPROTO naming the key, at once, never a wait. */
static void hostile_next(const char *v, size_t len)
{
  struct joiner a;
  pg_store *st;

  serve();
  st = connect_store();
  ck_assert_int_eq(pg_store_set(st, "live/next", v, len), 0);
  joiner_init(&a, 0, 2, true, 1);
  a.j.timeout = 30;
  ck_assert_int_eq(pg__live_form(&a.j, 0, &a.f), -EPROTO);
  ck_assert_msg(strstr(pg_last_error(), "live/next holds '"), "%s",
                pg_last_error());
  pg_store_close(a.j.store);
  pg_store_close(st);
  pg_store_server_stop(server);
}

START_TEST(test_form_hostile_values)
{
  static const char junk[] = "12\0\x01\xff and then a long tail of text";
  struct joiner a;
  pg_store *st;

  hostile_next("9223372036854775807", 19);
  hostile_next("1099511627777", 13);   /* GEN_MAX + 1 */
  hostile_next("-3", 2);
  hostile_next("12abc", 5);
  hostile_next(junk, sizeof junk - 1);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "..."));
  /* A decision that claims a million members in a few bytes. */
  serve();
  st = connect_store();
  ck_assert_int_eq(pg_store_set(st, "live/g0/done",
                                "round=0 world=1000000\n", 22), 0);
  joiner_init(&a, 0, 2, false, 1);
  ck_assert_int_eq(pg__live_form(&a.j, 0, &a.f), -EPROTO);
  ck_assert_msg(strstr(pg_last_error(), "live/g0/done"), "%s",
                pg_last_error());
  pg_store_close(a.j.store);
  pg_store_close(st);
  pg_store_server_stop(server);
}
END_TEST

/* A live/next far ahead (within bounds) is followed, and the cleaner of
 * the generation formed there deletes DROP_MAX (16) generations, not a
 * million: both members return. */
START_TEST(test_form_far_next)
{
  struct joiner a, b;
  pg_store *st;
  void *v = NULL;
  size_t len;

  serve();
  st = connect_store();
  ck_assert_int_eq(pg_store_set(st, "live/next", "1000000", 7), 0);
  joiner_init(&a, 0, 2, false, 1);
  joiner_init(&b, 1, 2, false, 2);
  joiner_start(&a, 5);
  joiner_start(&b, 5);
  pthread_join(a.t, NULL);
  pthread_join(b.t, NULL);
  ck_assert_msg(a.err == 0 && b.err == 0, "%s / %s", a.why, b.why);
  ck_assert_int_eq(a.f.gen, 1000000);
  ck_assert_int_eq(pg_store_get(st, "live/kept", 0, &v, &len), 0);
  ck_assert_int_eq(len, 2);
  ck_assert(memcmp(v, "16", 2) == 0);
  free(v);
  end_pair(&a, &b, st);
}
END_TEST

/* Keys deleted from outside (a DEL_PREFIX "" of a process with the job
 * token) while a member waits for the others: -EPROTO naming its entry,
 * not a wait for the timeout. */
START_TEST(test_form_entry_deleted)
{
  struct joiner a;
  pg_store *st;

  serve();
  st = connect_store();
  joiner_init(&a, 0, 2, true, 1);
  a.j.timeout = 600;
  joiner_start(&a, 0);
  wait_key(st, "live/g0/m0");
  ck_assert_int_eq(pg__store_delete_prefix(st, "", NULL), 0);
  pthread_join(a.t, NULL);
  ck_assert_int_eq(a.err, -EPROTO);
  ck_assert_msg(strstr(a.why, "live/g0/m0 (this process's entry"), "%s",
                a.why);
  pg_store_close(a.j.store);
  pg_store_close(st);
  pg_store_server_stop(server);
}
END_TEST

/* ---- pg_init's checks ------------------------------------------------- */

static void env_group(void)
{
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "1", 1);
  setenv("PG_TIMEOUT", "2", 1);
}

START_TEST(test_init_bad_mode)
{
  pg_group *g = NULL;

  env_group();
  setenv("CDRUN_RECOVERY", "sometimes", 1);
  ck_assert_int_eq(pg_init(NULL, &g), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "CDRUN_RECOVERY is "
                               "'sometimes'"));
}
END_TEST

START_TEST(test_init_live_needs_store)
{
  pg_group *g = NULL;

  env_group();
  setenv("CDRUN_RECOVERY", "live", 1);
  ck_assert_int_eq(pg_init(NULL, &g), -EINVAL);
  ck_assert_ptr_nonnull(strstr(pg_last_error(), "CDRUN_LIVE_STORE"));
}
END_TEST

/* Opting in: the file holds the pid, then "joined" once pg_init has set
 * up its generation; a world of one forms alone. */
static char ep_env[64] = "CDRUN_LIVE_STORE=127.0.0.1:65535";

START_TEST(test_init_opt_in)
{
  char dir[] = "/tmp/check_pg_live.XXXXXX", path[256], buf[64];
  struct pg_recover_info info;
  pg_group *g = NULL;
  FILE *f;
  bool pending = true;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/optin", dir);
  /* The server reads the knobs (once) before its port is known: the
   * variable is this buffer (putenv), its port written in afterwards. */
  env_group();
  setenv("WORLD_SIZE", "1", 1);
  setenv("CDRUN_RECOVERY", "live", 1);
  putenv(ep_env);
  setenv("CDRUN_LIVE_OPT_IN", path, 1);
  setenv("CDRUN_JOB_TOKEN", "", 1);
  serve();
  snprintf(ep_env, sizeof ep_env, "CDRUN_LIVE_STORE=127.0.0.1:%d", port);
  ck_assert_msg(pg_init(NULL, &g) == 0, "%s", pg_last_error());
  ck_assert(pg_live(g));
  ck_assert(!pg_joined_running(g));
  f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
  ck_assert_int_eq(atoi(buf), (int)getpid());
  /* Note [opt in]: pg_init has set its generation up. */
  ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
  ck_assert_str_eq(buf, "joined\n");
  fclose(f);
  ck_assert_int_eq(pg_membership_poll(g, &pending), 0);
  ck_assert(!pending);
  /* Recovering alone: generation 1, the same world of one. */
  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  ck_assert_int_eq(info.generation, 1);
  ck_assert_int_eq(info.world, 1);
  pg_destroy(g);
  pg_store_server_stop(server);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Note [reducer after recovery]: whatever phase pg_recover interrupts,
 * every reducer's gradients are zero afterwards, on the heal's source
 * too (here the only member, which heals from itself): gradients added
 * with += and zeroed after the optimizer (libpg(3)'s EXAMPLE) and an
 * averaged step not yet applied must not leak into the redone step. */
static void grads_zero(pg_reducer *r, size_t n, const size_t *numel)
{
  size_t i, k;
  double *d;

  for (i = 0; i < n; i++) {
    d = pg_reducer_grad(r, i);
    ck_assert_ptr_nonnull(d);
    for (k = 0; k < numel[i]; k++)
      ck_assert_msg(d[k] == 0.0, "parameter %zu element %zu is %g", i, k,
                    d[k]);
  }
}

static void grads_add(pg_reducer *r, size_t i, size_t numel, double v)
{
  double *d = pg_reducer_grad(r, i);
  size_t k;

  for (k = 0; k < numel; k++)
    d[k] += v;
}

START_TEST(test_recover_zeroes_reducer)
{
  char dir[] = "/tmp/check_pg_live.XXXXXX", path[256];
  const size_t numel[3] = { 1000, 3000, 20 };
  struct pg_reducer_options ro = PG_REDUCER_OPTIONS_INIT;
  struct pg_param_spec p[3];
  struct pg_recover_info info;
  double x[8] = { 1, 2, 3 };
  struct pg_state_buf b = { x, sizeof x };
  pg_reducer *r = NULL;
  pg_group *g = NULL;
  size_t i;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/optin", dir);
  env_group();
  setenv("WORLD_SIZE", "1", 1);
  setenv("CDRUN_RECOVERY", "live", 1);
  putenv(ep_env);
  setenv("CDRUN_LIVE_OPT_IN", path, 1);
  setenv("CDRUN_JOB_TOKEN", "", 1);
  serve();
  snprintf(ep_env, sizeof ep_env, "CDRUN_LIVE_STORE=127.0.0.1:%d", port);
  ck_assert_msg(pg_init(NULL, &g) == 0, "%s", pg_last_error());
  for (i = 0; i < 3; i++) {
    p[i].numel = numel[i];
    p[i].dtype = PG_F64;
  }
  ro.first_bucket_cap = 4096;
  ro.bucket_cap = 8192;
  ck_assert_msg(pg_reducer_create(g, p, 3, &ro, &r) == 0, "%s",
                pg_last_error());
  ck_assert_int_eq(pg_state_register(g, &b, 1), 0);

  /* A step interrupted in the backward pass: two of three marked. */
  ck_assert_int_eq(pg_reducer_prepare(r, true), 0);
  grads_add(r, 2, numel[2], 1.5);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 2), 0);
  grads_add(r, 1, numel[1], 2.5);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 1), 0);
  grads_add(r, 0, numel[0], 3.5);
  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  ck_assert_int_eq(info.heal_source, 0);
  grads_zero(r, 3, numel);

  /* A step interrupted after its finish (a later collective failed):
   * the averaged gradients, not yet applied, are not kept either.  The
   * first finish recorded the order: this recovery also comes with a
   * rebuild pending. */
  ck_assert_int_eq(pg_reducer_prepare(r, true), 0);
  for (i = 0; i < 3; i++) {
    grads_add(r, i, numel[i], 4.0);
    ck_assert_int_eq(pg_reducer_mark_ready(r, i), 0);
  }
  ck_assert_int_eq(pg_reducer_finish(r), 0);
  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  grads_zero(r, 3, numel);

  /* Accumulated under no_sync, then recovered. */
  ck_assert_int_eq(pg_reducer_prepare(r, false), 0);
  grads_add(r, 0, numel[0], 1.0);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 0), 0);
  ck_assert_int_eq(pg_reducer_finish(r), 0);
  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  grads_zero(r, 3, numel);
  /* ... and the redone step sees only its own gradients. */
  ck_assert_int_eq(pg_reducer_prepare(r, true), 0);
  grads_add(r, 1, numel[1], 6.0);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 1), 0);
  ck_assert_int_eq(pg_reducer_finish(r), 0);
  ck_assert(((double *)pg_reducer_grad(r, 0))[0] == 0.0);
  ck_assert(((double *)pg_reducer_grad(r, 1))[7] == 6.0);
  ck_assert(x[2] == 3.0);

  pg_reducer_destroy(r);
  pg_destroy(g);
  pg_store_server_stop(server);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Note [reducer heal]: the heal sends a reducer's "rebuilt" with its
 * order, and a member whose layout is that already keeps it.  A rebuild
 * that failed (its broadcast from rank 0 cut by a death, issue 30) left
 * the old layout: saying "rebuilt" there made the survivors keep the
 * registration-order buckets while a newcomer built the recorded order's,
 * and their all-reduces paired different parameters.  Here the only
 * member's rebuild fails (its group is lost), and after pg_recover the
 * next prepare must still rebuild. */
START_TEST(test_recover_after_failed_rebuild)
{
  char dir[] = "/tmp/check_pg_live.XXXXXX", path[256];
  struct pg_reducer_options ro = PG_REDUCER_OPTIONS_INIT;
  struct pg_param_spec p[3];
  struct pg_recover_info info;
  double x[2] = { 1, 2 };
  struct pg_state_buf b = { x, sizeof x };
  pg_reducer *r = NULL;
  pg_group *g = NULL;
  size_t i;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/optin", dir);
  env_group();
  setenv("WORLD_SIZE", "1", 1);
  setenv("CDRUN_RECOVERY", "live", 1);
  putenv(ep_env);
  setenv("CDRUN_LIVE_OPT_IN", path, 1);
  setenv("CDRUN_JOB_TOKEN", "", 1);
  serve();
  snprintf(ep_env, sizeof ep_env, "CDRUN_LIVE_STORE=127.0.0.1:%d", port);
  ck_assert_msg(pg_init(NULL, &g) == 0, "%s", pg_last_error());
  for (i = 0; i < 3; i++) {
    p[i].numel = 512;
    p[i].dtype = PG_F64;
  }
  /* One parameter (4 KiB) per bucket. */
  ro.first_bucket_cap = 4096;
  ro.bucket_cap = 4096;
  ck_assert_msg(pg_reducer_create(g, p, 3, &ro, &r) == 0, "%s",
                pg_last_error());
  ck_assert_int_eq(pg_state_register(g, &b, 1), 0);
  /* Registration order reversed: parameter 0 in the last bucket. */
  ck_assert_int_eq(pg_reducer_bucket_of(r, 0), 2);

  /* The first iteration records the order 0 1 2. */
  ck_assert_int_eq(pg_reducer_prepare(r, true), 0);
  for (i = 0; i < 3; i++)
    ck_assert_int_eq(pg_reducer_mark_ready(r, i), 0);
  ck_assert_int_eq(pg_reducer_finish(r), 0);
  /* The next prepare's rebuild broadcast fails: a peer died. */
  pg__live_lost(g);
  ck_assert_int_ne(pg_reducer_prepare(r, true), 0);
  ck_assert_int_eq(pg_reducer_bucket_of(r, 0), 2);

  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  ck_assert_int_eq(info.heal_source, 0);
  /* The redone step rebuilds, in the recorded order. */
  ck_assert_msg(pg_reducer_prepare(r, true) == 0, "%s", pg_last_error());
  ck_assert_int_eq(pg_reducer_bucket_of(r, 0), 0);
  ck_assert_int_eq(pg_reducer_bucket_of(r, 2), 2);
  for (i = 0; i < 3; i++)
    ck_assert_int_eq(pg_reducer_mark_ready(r, i), 0);
  ck_assert_int_eq(pg_reducer_finish(r), 0);

  pg_reducer_destroy(r);
  pg_destroy(g);
  pg_store_server_stop(server);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Note [reducer made during a death]: a member dead while the reducers
 * are made (before pg_state_register) fails their check's all_gather;
 * the reducer is made anyway, the group stays failed, and the recipe's
 * loop sees PG_ERR_PEER_LOST at its first collective and recovers (here
 * the only member's group is marked lost by hand). */
START_TEST(test_create_during_death)
{
  char dir[] = "/tmp/check_pg_live.XXXXXX", path[256];
  struct pg_param_spec p[2] = { { 64, PG_F64 }, { 32, PG_F32 } };
  struct pg_recover_info info;
  double x[2] = { 1, 2 }, y = 1;
  struct pg_state_buf b = { x, sizeof x };
  pg_reducer *r = NULL, *r2 = NULL;
  pg_group *g = NULL;

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/optin", dir);
  env_group();
  setenv("WORLD_SIZE", "1", 1);
  setenv("CDRUN_RECOVERY", "live", 1);
  putenv(ep_env);
  setenv("CDRUN_LIVE_OPT_IN", path, 1);
  setenv("CDRUN_JOB_TOKEN", "", 1);
  serve();
  snprintf(ep_env, sizeof ep_env, "CDRUN_LIVE_STORE=127.0.0.1:%d", port);
  ck_assert_msg(pg_init(NULL, &g) == 0, "%s", pg_last_error());
  pg__live_lost(g);
  ck_assert_msg(pg_reducer_create(g, p, 2, NULL, &r) == 0, "%s",
                pg_last_error());
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(pg_state_register(g, &b, 1), 0);
  ck_assert_int_eq(pg_all_reduce(g, &y, &y, 1, PG_F64, PG_SUM),
                   PG_ERR_PEER_LOST);
  ck_assert_msg(pg_recover(g, &info) == 0, "%s", pg_last_error());
  ck_assert_int_eq(info.heal_source, 0);
  ck_assert_int_eq(pg_reducer_prepare(r, true), 0);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 0), 0);
  ck_assert_int_eq(pg_reducer_mark_ready(r, 1), 0);
  ck_assert_int_eq(pg_reducer_finish(r), 0);
  /* Once the state is registered, a reducer's check fails as any
   * collective does. */
  pg__live_lost(g);
  ck_assert_int_eq(pg_reducer_create(g, p, 2, NULL, &r2), PG_ERR_PEER_LOST);
  ck_assert_ptr_null(r2);

  pg_reducer_destroy(r);
  pg_destroy(g);
  pg_store_server_stop(server);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Restart mode: live calls cost nothing and pg_recover says so. */
START_TEST(test_restart_mode)
{
  pg_group *g = NULL;
  bool pending = true;
  struct pg_state_buf b = { &pending, sizeof pending };

  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  ck_assert_int_eq(pg_init(NULL, &g), 0);
  ck_assert(!pg_live(g));
  ck_assert_int_eq(pg_membership_poll(g, &pending), 0);
  ck_assert(!pending);
  ck_assert_int_eq(pg_state_register(g, &b, 1), 0);
  ck_assert_int_eq(pg_recover(g, NULL), -ENOTSUP);
  ck_assert_str_eq(pg_err_name(PG_ERR_PEER_LOST), "ERR_PEER_LOST");
  ck_assert_str_eq(pg_err_name(PG_ESTALE_GROUP), "ESTALE_GROUP");
  ck_assert_str_eq(pg_err_name(-ENODATA), "ENODATA");
  pg_destroy(g);
}
END_TEST

static Suite *live_suite(void)
{
  Suite *s = suite_create("pg_live");
  TCase *tc = tcase_create("pure");

  tcase_add_test(tc, test_round_parse);
  tcase_add_test(tc, test_round_parse_errors);
  tcase_add_test(tc, test_round_read);
  tcase_add_test(tc, test_member_roundtrip);
  tcase_add_test(tc, test_complete);
  tcase_add_test(tc, test_decision);
  tcase_add_test(tc, test_shrinks);
  suite_add_tcase(s, tc);
  tc = tcase_create("form");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_form_first_and_replacement);
  tcase_add_test(tc, test_form_moves_to_later);
  tcase_add_test(tc, test_form_check_in_abort);
  tcase_add_test(tc, test_form_bounded_store);
  tcase_add_test(tc, test_form_linear_requests);
  tcase_add_test(tc, test_form_timeout);
  tcase_add_test(tc, test_form_hostile_values);
  tcase_add_test(tc, test_form_far_next);
  tcase_add_test(tc, test_form_entry_deleted);
  suite_add_tcase(s, tc);
  /* Knobs are read once per process: each runs in its own (Check forks
   * each test). */
  tc = tcase_create("init");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_init_bad_mode);
  tcase_add_test(tc, test_init_live_needs_store);
  tcase_add_test(tc, test_init_opt_in);
  tcase_add_test(tc, test_recover_zeroes_reducer);
  tcase_add_test(tc, test_recover_after_failed_rebuild);
  tcase_add_test(tc, test_create_during_death);
  tcase_add_test(tc, test_restart_mode);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(live_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
