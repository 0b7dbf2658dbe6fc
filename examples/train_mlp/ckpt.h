/* ckpt.h -- train_mlp's checkpoints: dir/latest.ckpt holds the
 * parameters, the optimizer state and the step, with the flags that shape
 * them; rank 0 writes it (ckpt_save: a crash leaves the old or the new
 * file, whole) and reads it at start, every rank applies it (ckpt_load),
 * whatever the world size now is.  The format is at the top of ckpt.c. */
#ifndef MLP_CKPT_H
#define MLP_CKPT_H

#include <stddef.h>

#include "mlp.h"

/* n's parameters and optimizer state after step steps, written by a world
 * of world, as bytes (malloc'd, *len). */
unsigned char *ckpt_encode(const struct net *n, const struct opts *o,
                           int world, long step, size_t *len);
/* Writes b as dir/latest.ckpt (temporary file, fsync, rename, fsync of
 * dir).  0, or -1 after a message. */
int ckpt_save(const char *dir, const unsigned char *b, size_t len);
/* Collective: rank 0 reads o->ckpt_dir/latest.ckpt and broadcasts it,
 * every rank checks it against o and applies it to n.  Returns the step
 * to start at (0: none), or -1 (exit 1) / -2 (exit 2: written for other
 * flags) on every rank alike, after a message. */
long ckpt_load(pg_group *g, const struct opts *o, struct net *n);
/* --params-out: n's parameters as a checkpoint holds them (little-endian
 * f32, forward order) in path.  0, or -1 after a message. */
int ckpt_write_params(const char *path, const struct net *n);

#endif
