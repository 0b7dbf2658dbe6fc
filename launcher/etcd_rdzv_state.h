/* etcd_rdzv_state.h -- the etcd back end's job state: one JSON document
 * per job (stored under <prefix>/<rdzv_id>/state) and the pure
 * transitions every agent applies to it before a compare-and-swap.
 *
 * The transitions are rdzvd's (rdzvd/rdzv_state.h, Note [round
 * semantics]) over a value instead of a server's memory: the same phases,
 * spares and expected nodes, and the same rules (rdzvd/rdzv_rules.h: rank
 * order, admission, the config check, the restart budget and the final
 * failure), asked of the one module both back ends share.  Two
 * things the server does with clocks are left to the agents: the last
 * call (each agent arms its own timer when it sees a round reach
 * min_nodes; the first to fire completes the round with etcd_rdzv_state_last_call)
 * and the join timeout (local).  Each transition is idempotent: applied
 * twice, or to a state where it already happened, it changes nothing,
 * which is what makes retrying a compare-and-swap safe (proto/ETCD.md). */
#ifndef CDRUN_ETCD_RDZV_STATE_H
#define CDRUN_ETCD_RDZV_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdzv_proto.h"

#define ETCD_RDZV_MAX_NODES 4096       /* one etcd value must hold the job */
#define ETCD_RDZV_ID_MAX 32

enum etcd_rdzv_phase { ETCD_RDZV_GATHERING, ETCD_RDZV_RUNNING, ETCD_RDZV_CLOSED, ETCD_RDZV_FINISHED };
enum etcd_rdzv_node_state { ETCD_RDZV_IDLE, ETCD_RDZV_PART, ETCD_RDZV_SPARE };

struct etcd_rdzv_node {
  char id[ETCD_RDZV_ID_MAX + 1];       /* the agent's lease id, hex */
  char host[RDZV_PROTO_MAX_ADDR + 1];
  char addr[RDZV_PROTO_MAX_ADDR + 1];
  int64_t pid;
  int nproc;
  int port;                     /* offered MASTER_PORT */
  int64_t seq;                  /* join order */
  enum etcd_rdzv_node_state st;
  bool expected;                /* idle, with a place in the new round */
  int rank, prev_rank;          /* -1: none */
  bool in_exit;                 /* entered the exit barrier */
  bool reported;                /* closing: its failure report is in */
};

struct etcd_rdzv_conf {
  int min_nodes, max_nodes, max_restarts;
  double last_call_timeout;
};

struct etcd_rdzv_state {
  bool exists;
  struct etcd_rdzv_conf conf;
  enum etcd_rdzv_phase phase;
  int round, restart_count;
  bool restarting;              /* the round started with nodes expected */
  bool exit_passed;
  int64_t seq;
  char why[RDZV_PROTO_MAX_TEXT + 1];    /* why the current round started, or why
                                   the job ended */
  /* Note [root cause] (rdzvd/rdzv_state.h), as rdzvd keeps it: the
   * round's earliest-exited failure, and the close that waits for the
   * other participants' reports (each agent's timer ends the wait:
   * etcd_rdzv_state_close_wait_over). */
  bool cause_held;
  struct rdzv_proto_cause cause;        /* exited_at 0: untimed */
  char cause_why[RDZV_PROTO_MAX_TEXT + 1];
  bool closing, closing_exhausted;
  /* Note [the job's lease] (rdzv_etcd.c): the lease the document is
   * stored under, kept alive by every node listed; "": none yet. */
  char lease[24];
  /* Note [the job token on etcd] (rdzv_etcd.c): the workers' token, drawn
   * at random by the agent that completes a round whose restart count or
   * master differs from the ones it was drawn for; "": none. */
  char token[65];
  int token_restart;
  char token_master[RDZV_PROTO_MAX_ADDR + 16];
  bool ended_lost;              /* closed on a lost node: Note [a lost
                                   node] (rdzvd/rdzv_rules.h) */
  struct etcd_rdzv_node *nodes;
  int n, cap;
};

void etcd_rdzv_state_init(struct etcd_rdzv_state *s);
void etcd_rdzv_state_free(struct etcd_rdzv_state *s);
int etcd_rdzv_state_copy(struct etcd_rdzv_state *dst, const struct etcd_rdzv_state *src);

/* Parses a stored value.  Returns 0 or -EINVAL. */
int etcd_rdzv_state_parse(const char *json, size_t len, struct etcd_rdzv_state *out);
/* The value to store (malloc'd), or NULL when out of memory. */
char *etcd_rdzv_state_serialize(const struct etcd_rdzv_state *s);

int etcd_rdzv_state_find(const struct etcd_rdzv_state *s, const char *id);
void etcd_rdzv_state_counts(const struct etcd_rdzv_state *s, int *part, int *outstanding,
               int *spares);

/* Each returns 1 when s changed, 0 when not, or a negative errno with a
 * message in err (join only). */

/* me joins (or rejoins) the job; a fresh job takes conf.  Refused with
 * -ESHUTDOWN (job closed or finished) or -EINVAL (conf out of range, or
 * it differs from the job's: rdzv_rules_conf_check). */
int etcd_rdzv_state_join(struct etcd_rdzv_state *s, const struct etcd_rdzv_node *me,
            const struct etcd_rdzv_conf *conf, char *err, size_t errlen);
/* id's workers failed in round (cause: its earliest failed worker, or
 * NULL): a restart (once per round), or the end of the job when final or
 * none is left: closing until every participant reported (or is gone),
 * then closed naming the earliest-exited failure. */
int etcd_rdzv_state_failure(struct etcd_rdzv_state *s, const char *id, int round, bool final,
               const char *message, const struct rdzv_proto_cause *cause);
/* A failure of the current round's workers ends the job: no restart is
 * left (rdzv_rules_failure_final).  What the agent is told with its
 * assignment. */
bool etcd_rdzv_state_failure_final(const struct etcd_rdzv_state *s);
/* The wait of a closing round ran out: close it. */
int etcd_rdzv_state_close_wait_over(struct etcd_rdzv_state *s, int round);
/* id enters the exit barrier of round. */
int etcd_rdzv_state_barrier(struct etcd_rdzv_state *s, const char *id, int round);
/* id is gone: why is "lost" (its lease expired) or "left". */
int etcd_rdzv_state_remove(struct etcd_rdzv_state *s, const char *id, const char *why);
/* The last call of round ran out: complete it if it still gathers with
 * at least min_nodes. */
int etcd_rdzv_state_last_call(struct etcd_rdzv_state *s, int round);

/* Whether the round gathers with its last call due: rdzv_rules_gather
 * (rdzvd/rdzv_rules.h) says it starts its last call or completes (at
 * least min_nodes are there), not that it waits.  The agent arms its
 * last-call timer then; etcd_rdzv_state_last_call completes only then. */
bool etcd_rdzv_state_last_call_due(const struct etcd_rdzv_state *s);

/* How long the gathering round's last call lasts (seconds): the job's
 * last_call_timeout, but at least rejoin_window (the agent's keepalive
 * window) while nodes told to restart are still on their way back
 * (rdzvd's rule: a round without them sends them in as newcomers,
 * restarting the others again). */
double etcd_rdzv_state_last_call_wait(const struct etcd_rdzv_state *s, double rejoin_window);

/* "node HOST (ADDR, pid PID)" */
void etcd_rdzv_state_describe(const struct etcd_rdzv_node *n, char *buf, size_t size);

#endif
