/* model.h -- train_mlp's network (struct net, mlp.h): an MLP of NIN
 * inputs, hidden layers of ReLU units and NCLS logits, its forward and
 * backward passes in plain C (Note [vectorizing] in model.c) and its
 * optimizers. */
#ifndef MLP_MODEL_H
#define MLP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

/* layers hidden layers of hid units, activations for cap rows, weights
 * drawn from seed. */
void model_init(struct net *n, size_t hid, int layers, size_t cap,
                uint64_t seed);
void model_free(struct net *n);
/* Room for the activations of rows rows (a live recovery's smaller world
 * gives each rank more rows of the global batch). */
void model_reserve(struct net *n, size_t rows);
/* Forward pass of the first rows rows of n->x: logits in n->z. */
void model_forward(struct net *n, size_t rows);
/* Softmax cross-entropy of one row's logits z; *pred gets the argmax;
 * when d is not NULL it receives dloss/dz scaled by scale. */
double model_xent(const float *z, unsigned label, float scale, float *d,
                  unsigned *pred);
/* Backward pass, last layer first, each layer's gradients marked ready
 * in red (NULL: none) as soon as they are written; late: all after the
 * last layer (--no-overlap).  0 or the reducer's error; n->op_t0 says
 * when the reducer call that returned it started. */
int model_backward(struct net *n, size_t rows, pg_reducer *red, bool late);
/* One optimizer step (o->optimizer) at step t. */
void model_optimize(struct net *n, const struct opts *o, long t);
/* Backward stage k's mean time in ms over the steps it was computed. */
double model_stage_ms(const struct net *n, int k);

#endif
