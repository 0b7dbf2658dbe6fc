/* rdzv_resume.c -- the registry as soft state (rdzv_state.h, Note [soft
 * state]): RESUME after a reconnect, and a job rebuilt from the nodes'
 * re-assertions after the daemon restarted, with its grace period.  The
 * state machine's other files (rdzv_state.c, rdzv_round.c, rdzv_join.c)
 * hold the jobs, rounds and nodes this acts on. */
#include "rdzv_state_int.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "rdzv_reply.h"
#include "rdzv_rules.h"

/* ---- a rebuilding job's ranks (rdzv_state__rank_hash) ---- */

static bool rank_eq(const void *item, const void *key)
{
  return ((const struct node *)item)->rank == *(const int *)key;
}

static struct node *rank_holder(const struct rdzv_state *r,
                                const struct job *job, int rank)
{
  return hashtab_find(&job->ranks, rdzv_state__rank_hash(r, rank), &rank, rank_eq);
}


/* True when t is a credential the server gave n (its latest or the one
 * before: the latest may still have been on its way). */
static bool token_held(const struct node *n, const unsigned char *t)
{
  return rdzv_token_equal(t, n->token) || rdzv_token_equal(t, n->prev_token);
}

/* Note [fresh tokens]: a token proves an assignment, and a node keeps
 * the last one it got; but an assignment of an earlier round proved
 * itself forever, across server lives, so a stale token presented first
 * after a restart rebuilt the job from the past: the replayer became rank
 * 0 with its own master address, the real node was the "impostor", and a
 * new round started.  So a server with a token key file keeps, per job,
 * its incarnation and the last round and restart count it issued (Note
 * [job ledger], rdzv_state.h), and a claim is proved only by:
 *   - a running token of exactly that round and restart count, under that
 *     incarnation; anything older is refused with `error auth` that says
 *     why ("stale token"), and never starts or joins a round;
 *   - a gathering token for a later round (and no lower restart count),
 *     under that incarnation; an older one is not proof, so its claim is
 *     a plain join (it changes no count), as any unproven claim.
 * A job no record names (none kept: it was forgotten, or ran under no key
 * file) proves nothing. */
struct proof {
  bool ok;
  char why[160];
};

/* Whether a's token proves what it claims without the server having
 * issued it in this life: only a lasting key (a key file) can; a random
 * key died with the server life that issued the token.  job: a's job if
 * this life knows it. */
static struct proof token_proves(const struct rdzv_state *r,
                                 const struct job *job,
                                 const struct rdzv_proto_resume *a)
{
  const struct rdzv_proto_round *as = &a->round;
  unsigned char t[RDZV_PROTO_TOKEN_BYTES];
  struct rdzv_ledger_rec rec;
  struct proof p = { false, "" };

  if (!rdzv_token_key_lasting(r->tokens)) {
    snprintf(p.why, sizeof p.why, "no token key file: a restarted "
             "rendezvous cannot check a token");
    return p;
  }
  if (job) {
    rec.incarnation = job->incarnation;
    rec.round = job->issued_round;
    rec.restart_count = job->issued_restarts;
  } else if (!r->ledger.get ||
             r->ledger.get(r->ledger.ctx, a->join.id, &rec) != 0) {
    snprintf(p.why, sizeof p.why, "the rendezvous keeps no record of the "
             "job (it was forgotten)");
    return p;
  }
  if (a->phase == RDZV_PROTO_PHASE_GATHERING) {
    if (!rdzv_token_gathering_ok(r->tokens, a->join.id, rec.incarnation,
                                 a->join.host, a->join.pid, as->round,
                                 as->restart_count, as->token)) {
      snprintf(p.why, sizeof p.why, "the token does not prove it");
      return p;
    }
    if (as->round <= rec.round || as->restart_count < rec.restart_count) {
      snprintf(p.why, sizeof p.why, "stale token: it gathered for round %d "
               "(restart count %d), the job reached round %d (restart "
               "count %d)", as->round, as->restart_count, rec.round,
               rec.restart_count);
      return p;
    }
    p.ok = true;
    return p;
  }
  if (rdzv_token_running(r->tokens, a->join.id, rec.incarnation,
                         a->join.host, a->join.pid, as, t) != 0 ||
      !rdzv_token_equal(as->token, t)) {
    snprintf(p.why, sizeof p.why, "its token does not prove rank %d of "
             "round %d", as->group_rank, as->round);
    return p;
  }
  if (as->round != rec.round || as->restart_count != rec.restart_count) {
    snprintf(p.why, sizeof p.why, "stale token: it proves round %d "
             "(restart count %d), the job's latest is round %d (restart "
             "count %d)", as->round, as->restart_count, rec.round,
             rec.restart_count);
    return p;
  }
  p.ok = true;
  return p;
}


/* ---- RESUME ---- */

/* The rebuilt round is whole again: barriers may pass.  Note [live store
 * in rdzvd]: a live job's store went with the server's last life, and its
 * workers cannot recover without it: a new round (no restart counted)
 * serves a new one, and the agents restart their workers in it, unless
 * they are at the exit barrier (their workers are done). */
static void rebuild_done(struct rdzv_state *r, struct job *job, double now)
{
  struct barrier *b;

  rdzv_state__ranks_clear(job);
  timer_heap_clear(&r->heap, &job->t_last_call);
  /* Every real node vouched for itself: from now on an unproven claim is
   * a plain join (it changes no round or restart count). */
  job->resumed = false;
  rdzv_state__log(r, "job %s: round %d rebuilt: all %d nodes re-asserted it",
                  job->id, job->round, job->rebuild_size);
  for (b = job->barriers; b; b = b->next)
    rdzv_round_barrier_check(r, job, b);
  if (job->conf.live && r->live.serve && !job->rebuilt_exit &&
      job->phase == PH_RUNNING && !job->closing) {
    rdzv_state__log(r, "job %s: its live store went with the rendezvous' "
                    "restart: a new round, with a new one", job->id);
    rdzv_round_start(r, job, now, "the rendezvous restarted: the "
                     "job's live store is gone", NULL);
  }
}

/* The grace period ended with ranks missing: they are lost. */
void rdzv_resume_expired(struct rdzv_state *r, struct job *job, double now)
{
  char text[RDZV_PROTO_MAX_TEXT + 1];

  snprintf(text, sizeof text, "%d of %d nodes did not come back within %g s "
           "after the rendezvous restarted", job->rebuild_size - job->n_part,
           job->rebuild_size,
           fmax(r->lim.resume_grace,
                rdzv_rules_keepalive_window(job->conf.keepalive_interval,
                                            job->conf.keepalive_misses)));
  rdzv_state__log(r, "job %s: round %d: %s", job->id, job->round, text);
  job->resumed = false;        /* a new round: its nodes get new tokens */
  rdzv_round_start(r, job, now, text, NULL);
}

/* The node of job that a's agent is, or NULL: same host and pid, and it
 * holds a token the server gave that node (Note [node tokens]).  The node
 * may be detached (its connection was reset, rdzv_state_conn_reset) or
 * still on a connection the server has not seen die (a cut the agent
 * noticed first).
 * A RESUME that names a node's host and pid without its token is not that
 * node: *impostor says so, and the node is left alone.  O(nodes of the
 * job): only a RESUME to a live job pays it. */
static struct node *claimed_node(const struct job *job,
                                 const struct rdzv_proto_resume *a,
                                 bool *impostor)
{
  struct list_node *pos, *next;
  struct node *n;

  *impostor = false;
  if (!job)
    return NULL;
  list_for_each_safe(pos, next, &job->nodes) {
    n = list_entry(pos, struct node, in_job);
    if (n->pid != a->join.pid ||
        strncmp(n->host, a->join.host, sizeof n->host) != 0)
      continue;
    if (token_held(n, a->round.token))
      return n;
    *impostor = true;
  }
  return NULL;
}

static void log_impostor(const struct rdzv_state *r, const struct job *job,
                         const struct rdzv_proto_resume *a)
{
  rdzv_state__log(r, "job %s: a resume names node %.*s (pid %" PRId64 ") but "
                  "does not hold its token: the node is left alone", job->id,
                  RDZV_PROTO_MAX_ADDR, a->join.host, a->join.pid);
}

/* A gathering node re-asserts: a JOIN, keeping round numbers and the
 * restart count from going back when the claim is vouched for (a token
 * of the node's, or one the lasting key proves; without a lasting key,
 * any claim on a job this server life rebuilt from claims). */
static int resume_gathering(struct rdzv_state *r, struct conn *c,
                            void *conn, const struct rdzv_proto_resume *a,
                            double now)
{
  struct job *job = rdzv_state__job_find(r, a->join.id);
  char text[RDZV_PROTO_MAX_TEXT + 1], d[DESC_MAX];
  struct node *prev;
  struct proof proof = { false, "" };
  bool impostor, vouched;
  int rc;

  prev = claimed_node(job, a, &impostor);
  if (impostor)
    log_impostor(r, job, a);
  if (!prev)
    proof = token_proves(r, job, a);
  vouched = prev || proof.ok ||
            (!rdzv_token_key_lasting(r->tokens) && (!job || job->resumed));
  if (!vouched && rdzv_token_key_lasting(r->tokens))
    rdzv_state__log(r, "job %s: a gathering resume from %.*s (pid %" PRId64
                    ") is a plain join: %s", a->join.id, RDZV_PROTO_MAX_ADDR,
                    a->join.host, a->join.pid, proof.why);
  if (job && vouched &&
      !(job->phase == PH_CLOSED || job->phase == PH_FINISHED)) {
    if (a->round.restart_count > job->restart_count) {
      rdzv_state__log(r, "job %s: adopts restart count %d re-asserted by %.*s "
                      "(pid %" PRId64 ") (it had %d)", job->id,
                      a->round.restart_count, RDZV_PROTO_MAX_ADDR, a->join.host,
                      a->join.pid, job->restart_count);
      job->restart_count = a->round.restart_count;
    }
    if (rdzv_state__gathering(job) && a->round.round > job->round) {
      rdzv_state__log(r,
                      "job %s: gathering round %d becomes round %d, "
                      "re-asserted by %.*s (pid %" PRId64 ")",
                      job->id, job->round, a->round.round, RDZV_PROTO_MAX_ADDR,
                      a->join.host, a->join.pid);
      job->round = a->round.round;
    } else if (job->phase == PH_RUNNING && a->round.round > job->round) {
      snprintf(text, sizeof text, "conflicting re-assertions: %.*s (pid %"
               PRId64 ") waits for round %d, the job runs round %d",
               RDZV_PROTO_MAX_ADDR, a->join.host, a->join.pid, a->round.round,
               job->round);
      rdzv_state__log(r, "job %s: %s: highest round wins", job->id, text);
      job->round = a->round.round - 1;
      rdzv_round_start(r, job, now, text, NULL);
    }
  }
  if (prev) {
    void *old = prev->c->conn;

    /* Its old self (detached, or on a connection not known dead yet)
     * makes way: the same agent cannot be two nodes. */
    rdzv_state__describe(prev, d, sizeof d);
    rdzv_state__log(r, "job %s: %s reconnected while gathering: its old "
                    "connection is superseded", job->id, d);
    rdzv_round_node_remove(r, prev, now, "superseded by its reconnection");
    rdzv_state__conn_drop(r, old);
  }
  r->resume_hint = vouched ? a : NULL;
  r->resuming = vouched;        /* unproven: a plain join, a new run */
  rc = rdzv_join_node(r, c, conn, &a->join, now, NULL);
  r->resume_hint = NULL;
  if (rc == 0)
    metrics_reconnect(r->metrics);
  return rc;
}

/* A node of the job is back on a new connection within its keepalive
 * window, holding its token: it takes the connection, and an old one is
 * closed.  If it still runs the job's round at its rank, nothing happens;
 * else the job went on without it (it hears RESTART and is expected back
 * if the job is gathering). */
static int reattach(struct rdzv_state *r, struct conn *c, void *conn,
                    struct node *n, const struct rdzv_proto_resume *a,
                    double now)
{
  struct job *job = n->job;
  char d[DESC_MAX], text[RDZV_PROTO_MAX_TEXT + 1];

  c = c ? c : rdzv_state__conn_get(r, conn, true);
  if (!c)
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                            "out of memory");
  if (n->c->conn) {             /* superseded: closed, node kept */
    struct conn *old = n->c;

    old->node = NULL;
    rdzv_state__conn_drop(r, old->conn);
  } else {
    free(n->c);
  }
  n->c = c;
  c->node = n;
  n->last_seen = now;
  metrics_reconnect(r->metrics);
  rdzv_state__describe(n, d, sizeof d);
  if (job->phase == PH_RUNNING && n->state == NS_PART &&
      a->round.round == job->round && a->round.group_rank == n->rank) {
    rdzv_state__log(r, "job %s: %s reconnected and re-asserted rank %d of "
                    "round %d: the job goes on", job->id, d, n->rank,
                    job->round);
    return 0;
  }
  snprintf(text, sizeof text, "the job went on without this node: it "
           "re-asserted round %d, the job is %s round %d", a->round.round,
           rdzv_state__gathering(job) ? "gathering" : "at", job->round);
  rdzv_state__log(r, "job %s: %s reconnected: %s", job->id, d, text);
  rdzv_state__send_text(r, conn, RDZV_PROTO_RESTART, 0, false, text);
  return 0;
}

/* A job this server does not know is rebuilt from a running claim: the
 * table of ranks starts empty and grows with the nodes that come back. */
static void rebuild_start(struct rdzv_state *r, struct job *job,
                          const struct rdzv_proto_round *as, double now)
{
  double grace = fmax(r->lim.resume_grace,
                      rdzv_rules_keepalive_window(job->conf.keepalive_interval,
                                                  job->conf.keepalive_misses));

  job->round = as->round;
  job->restart_count = as->restart_count;
  job->world_size = as->world_size;
  job->phase = PH_RUNNING;
  job->exit_passed = false;
  job->rebuilding = true;
  job->rebuilt_exit = false;
  job->resumed = true;
  job->rebuild_size = as->group_world_size;
  job->deadline = now + grace;
  timer_heap_clear(&r->heap, &job->t_progress);
  timer_heap_set(&r->heap, &job->t_last_call, job->deadline);
  rdzv_state__log(r, "job %s: rebuilding running round %d (restart_count %d) "
                  "from re-assertions: %d nodes, world size %d, master %s:%d; "
                  "%g s for them to come back", job->id, job->round,
                  job->restart_count, as->group_world_size, as->world_size,
                  as->master_addr, as->master_port, grace);
}

/* n re-asserted a rank of the round being rebuilt, which nobody holds. */
static int rebuild_take(struct rdzv_state *r, struct job *job,
                        struct node *n, const struct rdzv_proto_resume *a,
                        const char *d, double now)
{
  const struct rdzv_proto_round *as = &a->round;

  if (hashtab_insert(&job->ranks, rdzv_state__rank_hash(r, as->group_rank), n)) {
    void *conn = n->c->conn;

    rdzv_state__node_free(r, n);
    return rdzv_join_refuse(r, conn, NULL, now, NULL,
                            RDZV_PROTO_ERR_LIMIT, -ENOMEM,
                            "out of memory");
  }
  if (as->restart_count > job->restart_count) {
    rdzv_state__log(r, "job %s: adopts restart count %d re-asserted by %s (it "
                    "had %d)", job->id, as->restart_count, d,
                    job->restart_count);
    job->restart_count = as->restart_count;
  }
  rdzv_state__node_set_state(job, n, NS_PART, false);
  n->rank = as->group_rank;
  memcpy(n->token, as->token, RDZV_PROTO_TOKEN_BYTES);
  n->token_gathering = false;
  rdzv_state__log(r, "job %s: %s re-asserted rank %d of round %d (%s; %d of "
                  "%d back)", job->id, d, n->rank, job->round,
                  a->phase == RDZV_PROTO_PHASE_EXIT ? "at the exit barrier"
                                            : "running",
                  job->n_part, job->rebuild_size);
  if (a->phase == RDZV_PROTO_PHASE_EXIT)
    job->rebuilt_exit = true;
  if (job->n_part == job->rebuild_size)
    rebuild_done(r, job, now);
  return 0;
}

static int resume_handle(struct rdzv_state *r, struct conn *c, void *conn,
                         const struct rdzv_proto_resume *a, double now);

/* A job a RESUME creates is the same run going on: it takes the
 * ledger's incarnation (job_incarnate); a gathering claim that is not
 * vouched for is a plain join, and so a new run. */
int rdzv_resume_handle(struct rdzv_state *r, struct conn *c, void *conn,
                       const struct rdzv_proto_resume *a, double now)
{
  int rc;

  r->resuming = true;
  rc = resume_handle(r, c, conn, a, now);
  r->resuming = false;
  return rc;
}

static int resume_handle(struct rdzv_state *r, struct conn *c, void *conn,
                         const struct rdzv_proto_resume *a, double now)
{
  const struct rdzv_proto_round *as = &a->round;
  struct job *job;
  struct node *n;
  char d[DESC_MAX], text[RDZV_PROTO_MAX_TEXT + 1];
  bool fresh, impostor;
  int rc;

  if (c && c->node)
    return rdzv_reply_refuse(&r->sink, conn, RDZV_PROTO_ERR_BAD_REQUEST,
                             -EINVAL, "resume: already a node of job %s",
                             c->node->job->id);
  if (a->phase == RDZV_PROTO_PHASE_GATHERING)
    return resume_gathering(r, c, conn, a, now);
  /* A round no JOIN of this configuration could have made: rebuilt, it
   * would hold more participants than max_nodes. */
  if (as->group_world_size > a->join.conf.max_nodes)
    return rdzv_join_refuse(
        r, conn, NULL, now, NULL, RDZV_PROTO_ERR_BAD_REQUEST, -EINVAL,
        "bad resume: "
        "a round of %d nodes, but max_nodes is %d",
        as->group_world_size, a->join.conf.max_nodes);
  job = rdzv_state__job_find(r, a->join.id);
  n = claimed_node(job, a, &impostor);
  if (n)
    return reattach(r, c, conn, n, a, now);
  if (impostor)
    log_impostor(r, job, a);
  /* With a lasting token key a running claim must be proved: the rank of
   * a round is claimed only by the node it was given to, with its latest
   * assignment (Note [fresh tokens]). */
  if (rdzv_token_key_lasting(r->tokens)) {
    struct proof p = token_proves(r, job, a);

    if (!p.ok) {
      rdzv_state__log(r,
                      "job %s: refused a resume from %.*s (pid %" PRId64 "): "
                      "%s", a->join.id, RDZV_PROTO_MAX_ADDR, a->join.host,
                      a->join.pid, p.why);
      return rdzv_join_refuse(r, conn, NULL, now, NULL,
                              RDZV_PROTO_ERR_AUTH, -EACCES,
                              "resume refused: %s of job %s", p.why,
                              a->join.id);
    }
  }
  fresh = !job;
  n = NULL;
  rc = rdzv_join_node(r, c, conn, &a->join, now, &n);
  if (rc || !n)
    return rc;
  job = n->job;
  metrics_reconnect(r->metrics);
  rdzv_state__describe(n, d, sizeof d);
  n->seq = ++job->seq;
  if (fresh)
    rebuild_start(r, job, as, now);
  if (job->rebuilding && as->round == job->round &&
      as->group_world_size == job->rebuild_size &&
      as->world_size == job->world_size &&
      !rank_holder(r, job, as->group_rank))
    return rebuild_take(r, job, n, a, d, now);
  /* A closing job starts no round (rdzv_round_start), so a
   * conflicting claim could not restart it and would leave its sender a
   * participant with no rank: the job went on without it. */
  if (job->rebuilding && !job->closing && as->round >= job->round) {
    const struct node *holder = as->round == job->round &&
                                as->group_world_size == job->rebuild_size
                                ? rank_holder(r, job, as->group_rank)
                                : NULL;
    char hd[DESC_MAX] = "";

    if (holder)
      rdzv_state__describe(holder, hd, sizeof hd);
    snprintf(text, sizeof text, "conflicting re-assertions: %s claims rank %d "
             "of %d in round %d (world size %d); the job has round %d of %d "
             "nodes (world size %d)%s%s", d, as->group_rank,
             as->group_world_size, as->round, as->world_size, job->round,
             job->rebuild_size, job->world_size,
             holder ? ", rank held by " : "", hd);
    rdzv_state__log(r, "job %s: %s: a new round for every node", job->id,
                    text);
    if (as->restart_count > job->restart_count)
      job->restart_count = as->restart_count;
    if (as->round > job->round)
      job->round = as->round;
    rdzv_state__node_set_state(job, n, NS_PART, false);
    rdzv_round_start(r, job, now, text, NULL);
    return 0;
  }
  /* The job went on without this node: its workers stop, and it joins
   * again as a newcomer. */
  snprintf(text, sizeof text, "the job went on without this node: it "
           "re-asserted round %d, the job is %s round %d", as->round,
           rdzv_state__gathering(job) ? "gathering" : "at", job->round);
  rdzv_state__log(r, "job %s: %s: %s", job->id, d, text);
  rdzv_state__node_set_state(job, n, NS_IDLE, rdzv_state__gathering(job));
  rdzv_state__send_text(r, conn, RDZV_PROTO_RESTART, 0, false, text);
  return 0;
}
