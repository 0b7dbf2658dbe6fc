/* list.h -- an intrusive, circular, doubly-linked list (the pattern of
 * libuv's queue.h and Linux's list_head).
 *
 * A list is a struct list_node head; an element embeds a struct list_node
 * and is found back from it with list_entry.  A head (and a removed node)
 * points to itself, so insertion and removal never test for NULL or for
 * the first element.  Nothing here allocates; the caller owns every node.
 * Initialise a head with list_init before any other use. */
#ifndef CDRUN_LIST_H
#define CDRUN_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
  struct list_node *prev, *next;
};

/* An empty list (or a node that is in none). */
static inline void list_init(struct list_node *head)
{
  head->prev = head->next = head;
}

static inline bool list_empty(const struct list_node *head)
{
  return head->next == head;
}

/* Inserts n first in head's list. */
static inline void list_insert_head(struct list_node *head,
                                    struct list_node *n)
{
  n->next = head->next;
  n->prev = head;
  head->next->prev = n;
  head->next = n;
}

/* Inserts n last in head's list. */
static inline void list_insert_tail(struct list_node *head,
                                    struct list_node *n)
{
  n->prev = head->prev;
  n->next = head;
  head->prev->next = n;
  head->prev = n;
}

/* Takes n out of its list; n is then in none (removing it again is
 * harmless). */
static inline void list_remove(struct list_node *n)
{
  n->prev->next = n->next;
  n->next->prev = n->prev;
  list_init(n);
}

/* The element of type `type` whose member `member` is node. */
#define list_entry(node, type, member) \
  ((type *)(void *)((char *)(node) - offsetof(type, member)))

/* The first element of a non-empty list. */
#define list_first(head, type, member) list_entry((head)->next, type, member)

/* Walks head's list from first to last; the current node may be removed
 * (next is read before the body runs), no other one.  Nothing is read
 * after the last body: it may free the list's owner, head included (as
 * a NULL-terminated list's walk allows).  A body that frees the owner
 * earlier must break out. */
#define list_for_each_safe(pos, next_node, head)                        \
  for ((pos) = (head)->next, (next_node) = (pos)->next; (pos) != (head); \
       (pos) = (next_node),                                             \
       (next_node) = (pos) != (head) ? (pos)->next : (pos))

#endif
