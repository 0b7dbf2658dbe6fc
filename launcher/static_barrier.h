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
 * job: a restart of one node's workers does not meet again.
 *
 * Note [static run nonce]: a job token derived from the run id and the
 * master endpoint (Note [job token], jobtoken.h) would be the same for
 * every run of the same command, so a former run's workers could open the
 * rerun's store.  Node 0 draws 16 random bytes when it starts to serve
 * the meeting and sends them with its answer, "ok watch <32 hex>"; every
 * node binds them into the job token, so all nodes of one run agree and
 * the next run differs.  The nonce is not a secret (anyone who reaches
 * the port while the nodes meet may read it): the secret, where there is
 * one, keeps the token unguessable; the nonce keeps it fresh.  A node 0
 * of an older cdrun answers without one: no nonce, the old token. */
#ifndef CDRUN_STATIC_BARRIER_H
#define CDRUN_STATIC_BARRIER_H

#include <stdbool.h>
#include <uv.h>

#include "rdzv_rules.h"

struct static_barrier_opts {
  const char *master_addr;      /* node 0's host */
  int port;                     /* MASTER_PORT */
  int node_rank;
  int nnodes;
  int nproc;
  double timeout_s;             /* give up after this long */
  /* Note [static keepalive]: seconds between keepalives and how many
   * may be missed (--rdzv_conf's); 0: none. */
  double keepalive_interval;
  int keepalive_misses;
};

/* err 0: every node met; else a negative errno and a one-line message.
 * Called once, from the loop, never from inside static_barrier_start. */
typedef void (*static_barrier_done)(void *ctx, int err, const char *message);

struct static_barrier;

/* Note [static watch]: once met, the nodes stay connected to node 0 for
 * the job's life (node 0 answers "ok watch"; a node that understands
 * says "watch"), so that a node that leaves is known at once.  A node
 * leaving says "done" (its workers succeeded: no loss) or "bye" (it
 * stops otherwise: it said goodbye); a connection that ends without
 * either is a node whose agent died.  Node 0 tells every other node
 * ("lost <rank> <bye|died|silent> <token>"), and node 0's own leaving
 * reaches every node directly.  Older nodes ("ok", no "watch") are not
 * watched, as before.
 *
 * Note [static keepalive]: a link that only goes silent (an agent
 * stopped, a machine cut off) closes nothing, so the watch carries
 * keepalives with the rule of the other back ends (rdzvd's, Note
 * [reconnect] in rdzv_client_conn.c): every other node sends "ka" to
 * node 0 each keepalive_interval, the first as "ka W" with its window W
 * (keepalive_interval x keepalive_misses, rdzv_rules_keepalive_window),
 * and node 0 answers each with "ka".  Node 0 judges a node by the node's own window, a node judges
 * node 0 by its own, as rdzvd and its agents do; silent that long, the
 * peer's link went silent (node 0 tells the others, "lost R silent").
 * Node 0 says it answers keepalives with a "ka" line after "ok watch"
 * (an older node reads only the first line), and a node starts judging
 * node 0 only once it heard one, node 0 a node only once it sent one:
 * an older peer is never taken for a silent one.
 *
 * lost: called from the loop when a node of the job left (its node
 * rank, its token or node 0's address, and how); it returns true when
 * the job ends on it (Note [a lost node]: then no more losses are
 * reported), false when it goes on (a silent link that may be back: a
 * later loss of the same node, its death, is reported again). */
typedef bool (*static_barrier_lost)(void *ctx, int rank, const char *who,
                                    enum rdzv_rules_leave how);

/* Starts meeting.  Returns 0, or a negative errno (nothing started; done
 * is never called).  lost may be NULL. */
int static_barrier_start(uv_loop_t *loop, const struct static_barrier_opts *o,
                         static_barrier_done done, static_barrier_lost lost,
                         void *ctx, struct static_barrier **out);

/* The run nonce node 0 sent (Note [static run nonce]): 32 hex digits,
 * or "" when it sent none; valid once done was called with 0. */
const char *static_barrier_run_nonce(const struct static_barrier *b);

/* This node leaves the job: done (its workers succeeded) or not; no loss
 * is reported afterwards.  NULL is a no-op. */
void static_barrier_leave(struct static_barrier *b, bool done);

/* Stops it: done and lost are not called afterwards; the memory goes
 * once the handles are closed.  NULL is a no-op. */
void static_barrier_close(struct static_barrier *b);

#endif
