/* static_barrier.h -- where the nodes of a static job meet once, at the
 * start, so that two nodes holding one node rank are caught.
 *
 * Note [static barrier]: the static back end assigns nothing: each node
 * takes its rank from --node_rank (0 by default).  Two nodes started
 * without it both become node 0, and their workers would share RANK 0.
 * So before the first start node 0 listens on MASTER_ADDR's MASTER_PORT
 * (where its rank-0 worker's store goes next), and every node, node 0
 * included, connects there and says who it is: one line, "cdrun-static 1
 * <node_rank> <nnodes> <nproc> <token>", the token naming the agent (host,
 * pid, a random number).  Once every rank 0..nnodes-1 has arrived, node 0
 * closes the port and answers "ok" to all; a rank claimed by two tokens,
 * or another --nnodes or --nproc_per_node, is answered "error <why>" to
 * all, and every node stops.  A node 0 that cannot bind the port (another
 * node 0 on this host has it) only connects.  The meeting happens once per
 * job: a restart of one node's workers does not meet again. */
#ifndef CDRUN_STATIC_BARRIER_H
#define CDRUN_STATIC_BARRIER_H

#include <uv.h>

struct static_barrier_opts {
  const char *master_addr;      /* node 0's host */
  int port;                     /* MASTER_PORT */
  int node_rank;
  int nnodes;
  int nproc;
  double timeout_s;             /* give up after this long */
};

/* err 0: every node met; else a negative errno and a one-line message.
 * Called once, from the loop, never from inside static_barrier_start. */
typedef void (*static_barrier_done)(void *ctx, int err, const char *message);

struct static_barrier;

/* Starts meeting.  Returns 0, or a negative errno (nothing started; done
 * is never called). */
int static_barrier_start(uv_loop_t *loop, const struct static_barrier_opts *o,
                         static_barrier_done done, void *ctx,
                         struct static_barrier **out);

/* Stops it: done is not called afterwards; the memory goes once the
 * handles are closed.  NULL is a no-op. */
void static_barrier_close(struct static_barrier *b);

#endif
