/* rdzv_state.h -- the rendezvous state machine: every job (rdzv_id) with
 * its rounds, participants, waiting list, barriers and key-value store.
 *
 * Pure: no sockets, no clocks, no allocation visible to the caller.  Time
 * is passed in (seconds, any monotonic origin); messages go out through the
 * injected sink.  rdzvd drives it from its libuv server, cdrun links it for
 * the embedded server, and tests drive it transition by transition.
 *
 * Nodes are identified by an opaque connection pointer chosen by the
 * caller (never dereferenced here).  One connection is one node of at most
 * one job.
 *
 * Files: rdzv_state.c (the registry: jobs, nodes, connections, timers,
 * the entry points), rdzv_round.c (rounds, barriers, lost nodes),
 * rdzv_join.c (JOIN), rdzv_failure.c (FAILURE and the closing wait),
 * rdzv_waiting.c (what gathering nodes hear), rdzv_tenant.c (a peer's
 * share), rdzv_resume.c (soft state: RESUME and rebuilt jobs), kv_store.c (each
 * job's key-value store), status_render.c (the status report),
 * rdzv_reply.c (the answers they send), on rdzv_rules.c (the rules both
 * back ends share), hashtab.c and timer_heap.c; their shared types are in
 * rdzv_state_int.h. */
#ifndef RDZV_STATE_H
#define RDZV_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "rdzv_proto.h"

struct cJSON;

/* How the machine talks back.  No callback may call back into the state
 * machine (rdzv_state_*), not even to report that a connection died while
 * being written to: such closes are deferred until the entry point
 * returns (server_conn.c, Note [deferred close]).  A re-entry aborts the
 * process. */
struct rdzv_state_sink {
  void *ctx;
  /* A message for one node's connection. */
  void (*send)(void *ctx, void *conn, const struct rdzv_proto_msg *m);
  /* Close this connection after the messages already sent to it: used
   * after an ERROR that ends the node's membership.  The machine has
   * already forgotten the node when drop is called. */
  void (*drop)(void *ctx, void *conn);
  /* One line saying what happened to a job ("job x: round 2 complete:
   * 4 nodes, world size 16").  May be NULL. */
  void (*log)(void *ctx, const char *line);
};

/* Limits, to bound memory under untrusted input.  A zero field takes
 * the default. */
struct rdzv_state_limits {
  int max_jobs;             /* default 10000; when full, the job that has
                               had no node for longest is forgotten to make
                               room, so empty jobs never lock others out */
  /* Note [tenant share]: one peer address's share.  Jobs it created that
   * hold a node, and its nodes on waiting lists; default 1000 each. */
  int max_jobs_per_peer;
  int max_waiting_per_peer;
  int max_keys_per_job;     /* default 4096 (and as many waiting GETs) */
  size_t max_kv_bytes;      /* per job, default 16 MiB */
  size_t max_kv_total;      /* every job together, default 256 MiB */
  /* Ceilings on the durations a JOIN chooses (seconds).  A job's
   * join_timeout, last_call_timeout and close_timeout above them are
   * lowered to them (and logged); a keepalive_interval above
   * max_keepalive is refused, and keepalive_misses is lowered so that
   * interval x misses fits.  KV waits are bounded by max_join_timeout. */
  double max_join_timeout;  /* default 86400 */
  double max_last_call;     /* default 3600 */
  double max_close_timeout; /* default 3600 */
  double max_keepalive;     /* default 300 */
  /* Note [soft state]: how long a job rebuilt from re-assertions waits
   * for the rest of its round's nodes (at least the job's keepalive
   * window).  Default 10 s: twice the agents' reconnect backoff cap. */
  double resume_grace;
};

/* Fills the zero fields of l with the defaults. */
void rdzv_state_limits_default(struct rdzv_state_limits *l);

struct rdzv_state;

/* Creates an empty registry.  limits may be NULL for defaults.  Returns
 * NULL when out of memory. */
struct rdzv_state *rdzv_state_create(const struct rdzv_state_sink *sink,
                                     const struct rdzv_state_limits *limits);
void rdzv_state_destroy(struct rdzv_state *r);

/* Note [round semantics]
 *
 * A job's first JOIN creates it and fixes its configuration (min/max
 * nodes, timeouts, max_restarts).  A later JOIN with different min_nodes
 * or max_nodes gets ERROR config_mismatch (naming both values) and drop.
 *
 * Phases of the current round: GATHERING -> (LAST_CALL) -> RUNNING.
 * - GATHERING: joiners become participants.  At min_nodes the last-call
 *   deadline (now + last_call_timeout) starts; at max_nodes, or when every
 *   node expected back (see restarts) has re-joined and there are at least
 *   min_nodes, the round completes at once; when the deadline passes with
 *   >= min_nodes, it completes.
 * - Completion: ranks are assigned (below), and every participant gets one
 *   ROUND message with its own group_rank, group_world_size, rank_offset
 *   (sum of nproc of lower ranks), world_size (sum of all nproc), round,
 *   restart_count, and the master address and port: the rank-0 node's addr
 *   (its JOIN's addr, or the connection's peer address set with
 *   rdzv_state_set_peer_addr when addr is "") and the master_port it offered.
 * - RUNNING: a JOIN from a new node: if participants < max_nodes, it goes
 *   to the waiting list and a new round starts (RESTART "node <host>
 *   joined" to every participant; no restart counted); if the round is
 *   full it just waits (WAITING) until a place frees up.
 * - A new round (round + 1) starts GATHERING with no participants; the
 *   nodes of the previous round that are still alive plus the waiting list
 *   are "expected"; each comes back with JOIN (reason membership/failure).
 *
 * Ranks: participants of the previous round keep their relative order
 * (so the rank-0 node keeps rank 0 while it lives), then the others in
 * join order.  At most max_nodes participate; the rest wait.
 *
 * Failures: only a participant of the current round (or of the round
 * that just ended, expected back: its report crossed our RESTART) may
 * report one; anyone else gets ERROR bad_request and nothing changes.
 * FAILURE (final = false) from a participant of the RUNNING
 * round counts one restart (restart_count + 1, once per round however many
 * nodes report) and starts a new round: RESTART "<host> workers failed" to
 * every other participant.  FAILURE with final = true, or a failure when
 * restart_count == max_restarts already, closes the job: CLOSED (success =
 * false, the message) to every node of the job, then drop; the CLOSED
 * waits for the other participants' reports (Note [root cause]).
 *
 * Note [root cause]: the root cause of a failed round is its failure
 * whose worker exited first, by the wall-clock exited_at of the report's
 * cause, whatever order the reports arrive in.  Every report of the round
 * counts: the one that restarts it, and those that cross the RESTART
 * (their workers failed before they heard); a report that exited later
 * than the one held is secondary.  A report without a time (an older
 * agent) holds its place against later ones and never displaces a timed
 * one.  RESTART carries the cause known when it is sent; CLOSED the
 * round's final one.  A failure that closes the job does not close it at
 * once: the job is "closing" until every participant of the round has
 * reported (or is gone, or detached), or one keepalive window
 * (keepalive_interval x keepalive_misses, at most 5 s) has passed, so
 * that a node whose worker failed first but whose report comes second (a
 * slow node, a busy link) still names the root cause; a closing job starts no
 * round and admits no one to it.  Times come from the nodes' clocks: a
 * skew larger than the gap between two failures can swap them. 
 *
 * Dead nodes: rdzv_state_conn_closed (connection lost) or silence longer
 * than the keepalive window (keepalive_interval x keepalive_misses,
 * rdzv_rules_keepalive_window; checked by rdzv_state_tick; any message
 * from the node counts as a sign of life).  A dead
 * participant of a RUNNING round starts a new round for the survivors
 * (RESTART "<host> lost"; no restart counted).  A dead node in GATHERING
 * is just removed (the last-call deadline is cancelled if the count drops
 * below min).
 *
 * Join timeout: a node that has been gathering (since its JOIN; on the
 * waiting list too) for join_timeout without its round completing gets
 * ERROR join_timeout ("waited 600 s: 1 of at least 2 nodes present") and
 * drop.
 *
 * Progress: while GATHERING, every node of the round gets WAITING after
 * its JOIN (once the job's JOINs pause: Note [settled waiting],
 * rdzv_waiting.c; none when the round completes first) and then at most
 * once per second when the count changes (both emitted from
 * rdzv_state_tick), so progress costs O(N) per second, not O(N^2).
 *
 * Barriers: BARRIER(name, round) from a participant of the RUNNING round;
 * when every participant of the round has entered the barrier, each gets
 * BARRIER_DONE.  A new round cancels pending barriers (the RESTART says
 * so).  A barrier for a stale round gets ERROR bad_request.
 *
 * Leaving: LEAVE from a node removes it without starting a round if the
 * job's round passed its "exit" barrier, or if the job is closed; when
 * every node has left (or died) after the exit barrier, the job is
 * finished: kept close_timeout seconds (a JOIN then gets ERROR closed),
 * then forgotten.  A LEAVE from a RUNNING participant before the exit
 * barrier counts as a lost node.
 *
  * KV: per job, keys <= RDZV_PROTO_MAX_KEY, values <= RDZV_PROTO_MAX_VALUE,
  * bounded by rdzv_state_limits; SET replaces; GET answers KV_VALUE (found =
  * false when absent and wait == 0, or waits up to wait seconds for the key:
  * answered when it is set, or ERROR timeout from rdzv_state_tick); ADD
  * treats the value as a decimal integer (absent = 0) and answers the new
  * value. */

/* Note [soft state]
 *
 * The registry is soft state: agents hold the truth of their running job
 * and re-assert it with RESUME after a reconnect (a restarted daemon, a
 * reset connection, a successor after GOING_AWAY).
 *
 * - RESUME phase gathering is a JOIN, with one addition: a job it creates
 *   starts at the asserted round and restart count (so the round numbers
 *   and TORCHELASTIC_RESTART_COUNT never go back), and a running job at a
 *   lower round than the one asserted is superseded: a new round (highest
 *   round wins).
 * - RESUME phase running/exit for an unknown job rebuilds it: RUNNING at
 *   the asserted round, restart count and world size, the node at its
 *   asserted rank; its workers go on (nothing is sent).  Until every rank
 *   of the round is back (group_world_size), the job is "rebuilding":
 *   barriers wait.  If ranks are still missing after the grace period
 *   (rdzv_state_limits.resume_grace, at least the keepalive window), the
 *   missing nodes are lost: a new round for the survivors (RESTART), as
 *   if they had died; no restart is counted.
 * - Conflicts are resolved in arrival order, deterministically, and
 *   logged: a rank already re-asserted by another node, a different
 *   group or world size, or a higher round than the rebuilt one start a
 *   new round for every node of the job (the earlier one keeps its rank
 *   order; the later one ranks after); a higher restart count of the
 *   same round is adopted.  A RESUME of a round older than the job's, or
 *   of a job that went on without the node (the daemon stayed up and had
 *   already declared it lost), gets RESTART: its workers stop and it
 *   joins again like a newcomer.
 * - The daemon stayed up: a connection closed cleanly (EOF: the agent
 *   died, or left) is a lost node at once; a reset one (rdzv_state_conn_reset)
 *   leaves a running participant detached until its keepalive window
 *   (keepalive_interval x keepalive_misses after it was last heard)
 *   ends.  A RESUME from the same agent (host, pid) before then takes it
 *   back and the job goes on untouched; after it, the node was lost (a
 *   new round for the survivors) and the RESUME gets RESTART.  The same
 *   holds for a node whose old connection the server still thinks alive
 *   (a cut the agent noticed first): the RESUME supersedes it, and the
 *   old connection is closed.
 * - A FAILURE, LEAVE or BARRIER after a RESUME acts on the rebuilt round
 *   as on any running round.
 * Every accepted RESUME bumps metrics_reconnect. */

/* A message from conn, decoded.  now in seconds.  Returns 0, or a negative
 * errno when the message was refused (an ERROR has been sent then; the
 * caller need not do anything else). */
int rdzv_state_handle(struct rdzv_state *r, void *conn,
                      const struct rdzv_proto_msg *m, double now);

/* The connection's peer address as the server saw it ("10.0.0.5"), used
 * as the node's address when its JOIN gave none. */
void rdzv_state_set_peer_addr(struct rdzv_state *r, void *conn,
                              const char *addr);

/* The connection is gone (closed, reset).  Safe for unknown conns.  Call
 * it for dropped connections too: until then their messages are
 * ignored. */
void rdzv_state_conn_closed(struct rdzv_state *r, void *conn, double now);

/* The connection was reset (or failed) rather than closed: a running
 * participant stays a member, detached, until its keepalive window ends,
 * so that its agent can reconnect and RESUME with nothing lost (Note
 * [soft state]); anyone else is gone as with rdzv_state_conn_closed. */
void rdzv_state_conn_reset(struct rdzv_state *r, void *conn, double now);

/* Runs every deadline due at now (last call, join timeouts, keepalive
 * deaths, KV wait timeouts, progress messages, forgetting finished jobs).
 * Returns the absolute time of the next deadline, or a negative value if
 * none is pending. */
double rdzv_state_tick(struct rdzv_state *r, double now);

/* This registry runs inside the agent with pid on host (cdrun's
 * embedded rendezvous): ROUND messages then say which rank hosts it. */
void rdzv_state_set_embedded(struct rdzv_state *r, int64_t pid,
                             const char *host);

/* Node tokens (Note [node tokens], proto/rdzv_token.h) come from the
 * token key file's bytes (rdzv_token_key_file) instead of a random key,
 * so that a restarted server with the same file verifies the tokens an
 * earlier one issued.  Call before any node joins.  0 or -ENOMEM. */
struct rdzv_auth_secret;
int rdzv_state_set_token_key(struct rdzv_state *r,
                             const struct rdzv_auth_secret *file);

/* Note [job ledger]: what a server with a token key file keeps of each
 * job across its lives, beside the file (rdzvd/job_ledger.h): the job's
 * incarnation (bound into every token of the job, the job token
 * included) and the last round and restart count it issued, so that a
 * restarted server takes a running claim only from the latest assignment
 * (Note [fresh tokens], rdzv_resume.c).  The state machine does no I/O:
 * the daemon passes these calls.  get: 0, or -ENOENT (no record) or
 * another negative errno; put and drop report their own failures. */
struct rdzv_ledger_rec {
  uint64_t incarnation;
  int round;            /* the last round issued; -1: none yet */
  int restart_count;
};

struct rdzv_ledger {
  void *ctx;
  int (*get)(void *ctx, const char *job, struct rdzv_ledger_rec *out);
  void (*put)(void *ctx, const char *job, const struct rdzv_ledger_rec *rec);
  void (*drop)(void *ctx, const char *job);
};

/* Uses l (copied; NULL: none) from now on.  Call before any node joins. */
void rdzv_state_set_ledger(struct rdzv_state *r, const struct rdzv_ledger *l);

/* Note [live store in rdzvd] (live_stores.h): the daemon serves the
 * live store of each job that asks for live recovery (conf.live), so
 * that losing any node, node 0 included, leaves the job's live membership
 * where it was.  The state machine does no I/O: serve starts (or keeps,
 * for the same token) job's store with token (the round's job token, 64
 * hex digits) and gives its port, or a negative errno (reported by serve
 * itself; the round then goes out without a live store, and the agents
 * fall back to node 0's: Note [no live store], launcher/live_agent.c);
 * drop stops it when the job is forgotten.  Without these calls (cdrun's
 * embedded server, tests) a live job is served as any other. */
struct rdzv_live_host {
  void *ctx;
  int (*serve)(void *ctx, const char *job, const char *token, int *port);
  void (*drop)(void *ctx, const char *job);
};

/* Uses h (copied; NULL: none) from now on.  Call before any node joins. */
void rdzv_state_set_live_host(struct rdzv_state *r,
                              const struct rdzv_live_host *h);

/* The number of jobs known, and of nodes connected to any job. */
int rdzv_state_job_count(const struct rdzv_state *r);

/* Note [tenant share]: the peer addresses holding a job or a node, and
 * the JOINs refused at a tenant's share (jobs, waiting nodes). */
void rdzv_state_peer_counts(const struct rdzv_state *r, int *peers,
                            uint64_t *refused_jobs, uint64_t *refused_waiting);
int rdzv_state_node_count(const struct rdzv_state *r);

/* The status report (status_render.c): a JSON object with "nodes" (the
 * count), "jobs_total", "jobs_shown", "truncated" and "jobs", each job
 * with id, phase, round, restart_count, conf, world_size, participants,
 * waiting, barrier counts, kv key count and its nodes (addr, host, pid,
 * nproc, rank, state: "participant", "waiting" (the waiting list) or
 * "left" (not back since RESTART)).
 *
 * Its work and size are proportional to what it shows, never to what the
 * daemon holds: q NULL or q->job "" is a summary of the first q->limit
 * jobs (default 100) in creation order, node lists only for jobs of at
 * most 64 nodes ("nodes_omitted" otherwise), and "truncated" when jobs
 * were left out; q->job names one job, with as many of its nodes as fit
 * ("nodes_truncated" otherwise).  Either always fits one frame.  Returns
 * NULL with *err -ENOENT for an unknown job, -ENOMEM.  Caller frees with
 * cJSON_Delete. */
struct cJSON *rdzv_state_status_query(const struct rdzv_state *r,
                                      const struct rdzv_proto_status_req *q,
                                      double now, int *err);

/* rdzv_state_status_query(r, NULL, now, &ignored). */
struct cJSON *rdzv_state_status(const struct rdzv_state *r, double now);

/* ---- metrics (rdzvd --metrics) ---- */

struct rdzvd_metrics;

/* Counters the machine bumps as rounds complete and restarts are
 * counted (metrics.h); NULL, the default, keeps none. */
void rdzv_state_set_metrics(struct rdzv_state *r, struct rdzvd_metrics *m);

/* Jobs per phase: counts[i] jobs are in the phase named names[i]
 * ("gathering", "last_call", "running", "closed", "finished").  O(jobs). */
#define RDZV_STATE_PHASES 5
void rdzv_state_jobs_by_phase(const struct rdzv_state *r,
                              int counts[RDZV_STATE_PHASES],
                              const char *names[RDZV_STATE_PHASES]);

#endif
