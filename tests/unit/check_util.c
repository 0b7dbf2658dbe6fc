/* check_util.c -- unit tests for proto/util/ (but num.c: check_num.c, list.h:
 * check_list.c): the error convention, the clock, the timer heap and the
 * hash table. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "err.h"
#include "hashtab.h"
#include "monotime.h"
#include "timer_heap.h"

/* ---- err ---------------------------------------------------------------- */

START_TEST(test_err_set)
{
  char buf[16];

  memset(buf, 'x', sizeof buf);
  ck_assert_int_eq(err_set(buf, sizeof buf, -ENOENT, "no %s", "file"),
                   -ENOENT);
  ck_assert_str_eq(buf, "no file");
  /* Cut to the buffer, always terminated. */
  ck_assert_int_eq(err_invalid(buf, 4, "%d", 123456), -EINVAL);
  ck_assert_str_eq(buf, "123");
  /* No buffer: the code alone. */
  ck_assert_int_eq(err_set(NULL, 0, -EIO, "unseen"), -EIO);
  ck_assert_int_eq(err_set(buf, 0, -EIO, "unseen"), -EIO);
  ck_assert_str_eq(buf, "123");
}
END_TEST

START_TEST(test_err_str)
{
  ck_assert_str_eq(err_str(-ENOENT), strerror(ENOENT));
  ck_assert_str_eq(err_str(ENOENT), strerror(ENOENT));
  /* libuv's own codes, which strerror does not know. */
  ck_assert_str_eq(err_str(UV_EOF), uv_strerror(UV_EOF));
  ck_assert_str_eq(err_str(UV_EAI_NONAME), uv_strerror(UV_EAI_NONAME));
  /* libuv's errno codes are the same numbers. */
  ck_assert_str_eq(err_str(UV_ECONNREFUSED), strerror(ECONNREFUSED));
}
END_TEST

/* ---- monotime ----------------------------------------------------------- */

START_TEST(test_monotime)
{
  double a = monotime_now(), b = monotime_now();
  double hr = (double)uv_hrtime() / 1e9, c = monotime_now();

  ck_assert(a > 0);
  ck_assert(b >= a);
  /* The same clock as libuv's (both CLOCK_MONOTONIC): read in order. */
  ck_assert(hr >= b);
  ck_assert(c >= hr);
}
END_TEST

/* ---- timer_heap --------------------------------------------------------- */

#define NT 200

START_TEST(test_heap_order)
{
  struct timer_heap h = { 0 };
  struct timer_heap_node t[NT];
  double last = -1e9;
  int i, n = 0;

  ck_assert_int_eq(timer_heap_reserve(&h, NT), 0);
  ck_assert_ptr_null(timer_heap_top(&h));
  for (i = 0; i < NT; i++) {
    timer_heap_node_init(&t[i], i);
    ck_assert(!timer_heap_armed(&t[i]));
    timer_heap_set(&h, &t[i], (double)((i * 7919) % NT));
    ck_assert(timer_heap_armed(&t[i]));
  }
  /* Move some later, some earlier, cancel some. */
  for (i = 0; i < NT; i += 3)
    timer_heap_set(&h, &t[i], t[i].at + 50.5);
  for (i = 1; i < NT; i += 5)
    timer_heap_set(&h, &t[i], t[i].at - 20.25);
  for (i = 2; i < NT; i += 7)
    timer_heap_clear(&h, &t[i]);
  timer_heap_clear(&h, &t[2]);          /* twice: a no-op */
  while (timer_heap_top(&h)) {
    struct timer_heap_node *top = timer_heap_top(&h);

    ck_assert(top->at >= last);
    ck_assert_int_eq(top->kind % 7 == 2, 0);
    last = top->at;
    timer_heap_clear(&h, top);
    ck_assert(!timer_heap_armed(top));
    n++;
  }
  ck_assert_int_eq(n, NT - (NT + 4) / 7);
  timer_heap_unreserve(&h, NT);
  ck_assert_uint_eq(h.reserved, 0);
  timer_heap_free(&h);
}
END_TEST

START_TEST(test_heap_reserve)
{
  struct timer_heap h = { 0 };

  ck_assert_int_eq(timer_heap_reserve(&h, 3), 0);
  ck_assert_uint_ge(h.cap, 3);
  ck_assert_int_eq(timer_heap_reserve(&h, 1000), 0);
  ck_assert_uint_ge(h.cap, 1003);
  timer_heap_unreserve(&h, 1003);
  timer_heap_free(&h);
  ck_assert_ptr_null(h.a);
  ck_assert_uint_eq(h.cap, 0);
}
END_TEST

/* ---- hashtab ------------------------------------------------------------ */

struct item {
  int key;
};

static bool item_eq(const void *item, const void *key)
{
  return ((const struct item *)item)->key == *(const int *)key;
}

/* A poor hash on purpose: long probe runs, so removal must shift. */
static uint64_t poor_hash(int key)
{
  return (uint64_t)(key % 13);
}

START_TEST(test_hashtab)
{
  struct hashtab t = { 0 };
  static struct item it[1000];
  int i, k = 0;

  ck_assert_ptr_null(hashtab_find(&t, 0, &k, item_eq));
  for (i = 0; i < 1000; i++) {
    it[i].key = i;
    ck_assert_int_eq(hashtab_insert(&t, poor_hash(i), &it[i]), 0);
  }
  ck_assert_uint_eq(t.n, 1000);
  ck_assert_uint_ge(t.cap * 3, t.n * 4);
  for (i = 0; i < 1000; i += 2)
    hashtab_remove(&t, poor_hash(i), &it[i]);
  hashtab_remove(&t, poor_hash(0), &it[0]);      /* absent: ignored */
  ck_assert_uint_eq(t.n, 500);
  for (k = 0; k < 1000; k++) {
    struct item *found = hashtab_find(&t, poor_hash(k), &k, item_eq);

    if (k % 2)
      ck_assert_ptr_eq(found, &it[k]);
    else
      ck_assert_ptr_null(found);
  }
  free(t.s);
}
END_TEST

START_TEST(test_hashtab_hashes)
{
  int a, b;

  /* Seeded: the same key lands elsewhere under another seed. */
  ck_assert(hashtab_hash_str(1, "job") == hashtab_hash_str(1, "job"));
  ck_assert(hashtab_hash_str(1, "job") != hashtab_hash_str(2, "job"));
  ck_assert(hashtab_hash_str(1, "job") != hashtab_hash_str(1, "jOb"));
  ck_assert(hashtab_hash_ptr(1, &a) != hashtab_hash_ptr(1, &b));
  ck_assert(hashtab_hash_ptr(1, &a) != hashtab_hash_ptr(2, &a));
  ck_assert(hashtab_mix64(1) != hashtab_mix64(2));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("util");
  TCase *tc;
  SRunner *sr;
  int failed;

  tc = tcase_create("err");
  tcase_add_test(tc, test_err_set);
  tcase_add_test(tc, test_err_str);
  suite_add_tcase(s, tc);
  tc = tcase_create("monotime");
  tcase_add_test(tc, test_monotime);
  suite_add_tcase(s, tc);
  tc = tcase_create("timer_heap");
  tcase_add_test(tc, test_heap_order);
  tcase_add_test(tc, test_heap_reserve);
  suite_add_tcase(s, tc);
  tc = tcase_create("hashtab");
  tcase_add_test(tc, test_hashtab);
  tcase_add_test(tc, test_hashtab_hashes);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
