/* bucket.c -- pg_bucket_assign: parameters to gradient buckets (pure). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "pg_internal.h"

/* Note [bucket assignment]: PyTorch's compute_bucket_assignment_by_size.
 * Parameters are taken in the given order (the order their gradients are
 * expected to become ready); each dtype has its own open bucket and its
 * own position in the cap list [first_cap, cap, cap, ...].  A parameter
 * joins its dtype's open bucket; once the bucket's size reaches its cap
 * (>=) the bucket is closed, so the parameter that crosses the cap stays
 * and a bucket may exceed the cap by one parameter (one larger than the
 * cap closes whichever bucket it lands in).  Buckets are numbered when
 * they are opened, i.e. by the position of their first parameter in the
 * order: the order in which they fill up during the backward pass, which
 * is the order the reducer launches them in (DDP's initial build sorts
 * by smallest parameter index, the same rule for its walk).
 *
 * One difference from DDP: DDP's initial build walks registration order
 * and reverses the result, so its small first_cap bucket holds the first
 * layers and is reduced last; here the walk itself is reversed (pg.h), so
 * the small bucket holds the last layers and is reduced first, as DDP's
 * own rebuilt buckets are. */

struct open_bucket {
  bool open;
  size_t id;
  size_t bytes;
  size_t closed;      /* buckets of this dtype closed so far */
};

static int check_order(const size_t *order, size_t n)
{
  unsigned char *seen;
  size_t k;
  int err = 0;

  seen = calloc(n, 1);
  if (!seen)
    return pg__fail(-ENOMEM, "out of memory checking a bucket order");
  for (k = 0; k < n && !err; k++) {
    if (order[k] >= n)
      err = pg__fail(-EINVAL, "order[%zu] is %zu, not a parameter index "
                     "(n = %zu)", k, order[k], n);
    else if (seen[order[k]]++)
      err = pg__fail(-EINVAL, "order[%zu]: parameter %zu appears twice", k,
                     order[k]);
  }
  free(seen);
  return err;
}

int pg_bucket_assign(const struct pg_param_spec *p, size_t n,
                     const size_t *order, size_t first_cap, size_t cap,
                     size_t *bucket_of, size_t *nbuckets)
{
  struct open_bucket ob[PG_DTYPE_COUNT] = { { false, 0, 0, 0 } };
  struct open_bucket *b;
  size_t k, i, es, add, nb = 0, limit;
  int err;

  if (!nbuckets || (n && (!p || !bucket_of)))
    return pg__fail(-EINVAL, "pg_bucket_assign: NULL argument");
  for (i = 0; i < n; i++) {
    if ((unsigned)p[i].dtype >= PG_DTYPE_COUNT)
      return pg__fail(-EINVAL, "parameter %zu: invalid dtype %d", i,
                      (int)p[i].dtype);
    if (p[i].numel > SIZE_MAX / pg_dtype_size(p[i].dtype))
      return pg__fail(-EINVAL, "parameter %zu: %zu elements is too large",
                      i, p[i].numel);
  }
  if (order && (err = check_order(order, n)) != 0)
    return err;
  for (k = 0; k < n; k++) {
    i = order ? order[k] : n - 1 - k;
    b = &ob[p[i].dtype];
    es = pg_dtype_size(p[i].dtype);
    if (!b->open) {
      b->open = true;
      b->id = nb++;
      b->bytes = 0;
    }
    bucket_of[i] = b->id;
    /* Saturating: a sum past SIZE_MAX is past every cap anyway. */
    add = p[i].numel * es;
    b->bytes = add > SIZE_MAX - b->bytes ? SIZE_MAX : b->bytes + add;
    limit = b->closed == 0 ? first_cap : cap;
    if (b->bytes >= limit) {
      b->open = false;
      b->closed++;
    }
  }
  *nbuckets = nb;
  return 0;
}
