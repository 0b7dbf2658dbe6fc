/* check_list.c -- unit tests for proto/util/list.h, the intrusive list. */
#include <check.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "list.h"

struct item {
  int value;
  struct list_node node;
};

/* The values of head's list, first to last, into out; returns the count. */
static int values(struct list_node *head, int *out, int max)
{
  struct list_node *pos, *next;
  int n = 0;

  list_for_each_safe(pos, next, head)
    if (n < max)
      out[n++] = list_entry(pos, struct item, node)->value;
  return n;
}

START_TEST(test_order)
{
  struct list_node head;
  struct item it[3] = { { .value = 1 }, { .value = 2 }, { .value = 3 } };
  int v[4];

  list_init(&head);
  ck_assert(list_empty(&head));
  list_insert_head(&head, &it[0].node);
  list_insert_head(&head, &it[1].node);
  list_insert_tail(&head, &it[2].node);
  ck_assert(!list_empty(&head));
  ck_assert_int_eq(values(&head, v, 4), 3);
  ck_assert_int_eq(v[0], 2);
  ck_assert_int_eq(v[1], 1);
  ck_assert_int_eq(v[2], 3);
  ck_assert_ptr_eq(list_first(&head, struct item, node), &it[1]);
}
END_TEST

START_TEST(test_remove)
{
  struct list_node head, *pos, *next;
  struct item it[4];
  int v[4], i;

  list_init(&head);
  for (i = 0; i < 4; i++) {
    it[i].value = i;
    list_insert_tail(&head, &it[i].node);
  }
  /* Removing the current node while walking. */
  list_for_each_safe(pos, next, &head)
    if (list_entry(pos, struct item, node)->value % 2)
      list_remove(pos);
  ck_assert_int_eq(values(&head, v, 4), 2);
  ck_assert_int_eq(v[0], 0);
  ck_assert_int_eq(v[1], 2);
  /* A removed node is in no list: removing it again changes nothing. */
  list_remove(&it[1].node);
  ck_assert_int_eq(values(&head, v, 4), 2);
  /* Emptying by the first element, as a close does. */
  while (!list_empty(&head))
    list_remove(&list_first(&head, struct item, node)->node);
  ck_assert_int_eq(values(&head, v, 4), 0);
  ck_assert_ptr_eq(head.next, &head);
  ck_assert_ptr_eq(head.prev, &head);
}
END_TEST

/* The last body may free the list's owner, head included: nothing is
 * read after it (etcd_client's walk of its calls, when a call's callback
 * closes the client).  The owner sits on a page of its own that the last
 * body makes unreadable: a read of the head after it faults. */
START_TEST(test_last_body_frees_owner)
{
  long page = sysconf(_SC_PAGESIZE);
  struct list_node *head = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  struct item items[2] = { { .value = 1 }, { .value = 2 } };
  struct list_node *pos, *next;
  int seen = 0;

  ck_assert_ptr_ne(head, MAP_FAILED);
  list_init(head);
  list_insert_tail(head, &items[0].node);
  list_insert_tail(head, &items[1].node);
  list_for_each_safe(pos, next, head) {
    seen += list_entry(pos, struct item, node)->value;
    if (pos == &items[1].node)
      ck_assert_int_eq(mprotect(head, (size_t)page, PROT_NONE), 0);
  }
  ck_assert_int_eq(seen, 3);
  munmap(head, (size_t)page);
}
END_TEST

static Suite *list_suite(void)
{
  Suite *s = suite_create("list");
  TCase *tc = tcase_create("list");

  tcase_add_test(tc, test_order);
  tcase_add_test(tc, test_remove);
  tcase_add_test(tc, test_last_body_frees_owner);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(list_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
