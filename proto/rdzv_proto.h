/* rdzv_proto.h -- the rendezvous wire protocol between cdrun agents and
 * rdzvd: message structs and the one codec both sides use.  The format is
 * specified in proto/PROTOCOL.md.
 *
 * A frame is a 4-byte big-endian length followed by that many bytes of a
 * UTF-8 JSON object: {"v": 2, "op": "<name>", ...fields}.  Every field is
 * validated on decode: type, range, length; unknown ops and versions are
 * errors.  Unknown extra fields are ignored (forward compatibility). */
#ifndef RDZV_PROTO_H
#define RDZV_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RP_VERSION 2               /* 2: the shared-secret handshake */
#define RP_FRAME_HEADER 4
#define RP_MAX_FRAME (1u << 20)     /* body bytes; larger frames: error */
#define RP_MAX_ID 128               /* rdzv_id, barrier names */
#define RP_MAX_ADDR 255             /* addresses and host names */
#define RP_MAX_KEY 512
#define RP_MAX_VALUE 65536          /* kv value bytes */
#define RP_MAX_TEXT 1024            /* reasons, error messages */
#define RP_MAX_NODES 100000         /* min/max nodes upper bound */
#define RP_AUTH_BYTES 32            /* nonces and HMAC-SHA256 tags */
#define RP_MAX_STATUS_JOBS 100000   /* status: jobs asked for at most */
/* Bounds that leave room for the arithmetic done on the numbers: a round
 * number or restart count from the wire can still be incremented (and
 * rounds go up by one per round: 2^30 of them is decades of restarts). */
#define RP_MAX_ROUND (1 << 30)
#define RP_MAX_RESTARTS 1000000     /* max_restarts, restart_count */
/* Floors on the durations a JOIN chooses (seconds): none lets a member
 * be expelled before it could have spoken. */
#define RP_MIN_JOIN_TIMEOUT 1.0
#define RP_MIN_KEEPALIVE 0.05       /* keepalive_interval */
#define RP_MIN_KEEPALIVE_WINDOW 0.5 /* keepalive_interval x misses */
#define RP_TOKEN_BYTES 32           /* a node's credential (rdzv_token.h) */

enum rp_op {
  RP_OP_INVALID = 0,
  /* agent -> server */
  RP_JOIN,          /* join (or re-join) a job's next round */
  RP_KEEPALIVE,     /* I am alive; answered by PONG */
  RP_FAILURE,       /* my workers failed (final: no restart left) */
  RP_BARRIER,       /* enter a named barrier of the current round */
  RP_LEAVE,         /* I am done with this job, closing */
  RP_KV_SET,
  RP_KV_GET,        /* answered by KV_VALUE, optionally waiting */
  RP_KV_ADD,        /* answered by KV_VALUE with the new number */
  RP_STATUS,        /* answered by STATUS_REPLY */
  /* server -> agent */
  RP_WAITING,       /* progress while a round gathers */
  RP_ROUND,         /* the round completed: this node's assignment */
  RP_RESTART,       /* the job needs a new round: stop workers, re-join */
  RP_BARRIER_DONE,
  RP_CLOSED,        /* the job ended (failed for good, or finished) */
  RP_KV_VALUE,
  RP_STATUS_REPLY,
  RP_PONG,
  RP_ERROR,         /* the request was refused; see code */
  /* the shared-secret handshake (proto/rdzv_auth.h), both directions */
  RP_HELLO,         /* A -> S: the client's nonce */
  RP_CHALLENGE,     /* S -> A: the server's nonce */
  RP_AUTH,          /* A -> S: the client's proof */
  RP_AUTH_OK,       /* S -> A: accepted, with the server's proof */
  /* soft state (Note [soft state] in rdzvd/rdzv_state.h) */
  RP_RESUME,        /* A -> S: after a reconnect, what the agent knows */
  RP_GOING_AWAY,    /* S -> A: the server is stopping; reconnect now */
  RP_OP_COUNT
};

enum rp_join_reason {
  RP_REASON_FIRST = 0,        /* "first" */
  RP_REASON_FAILURE,          /* "failure": after a local worker failure */
  RP_REASON_MEMBERSHIP,       /* "membership": after a RESTART push */
};

/* Error codes carried by RP_ERROR (as strings on the wire). */
enum rp_error_code {
  RP_ERR_BAD_REQUEST = 1,     /* "bad_request": malformed frame/field */
  RP_ERR_CONFIG_MISMATCH,     /* "config_mismatch" */
  RP_ERR_JOIN_TIMEOUT,        /* "join_timeout" */
  RP_ERR_CLOSED,              /* "closed": the job already ended */
  RP_ERR_NOT_JOINED,          /* "not_joined": op needs a prior JOIN */
  RP_ERR_LIMIT,               /* "limit": too many keys/bytes/jobs */
  RP_ERR_TIMEOUT,             /* "timeout": a KV wait timed out */
  RP_ERR_AUTH,                /* "auth": the shared-secret handshake
                                 failed or was required */
};

/* The job's configuration, fixed by its first joiner. */
struct rp_conf {
  int min_nodes;              /* 1..max_nodes */
  int max_nodes;              /* min_nodes..RP_MAX_NODES */
  int max_restarts;           /* >= 0 */
  double join_timeout;        /* seconds, > 0 */
  double last_call_timeout;   /* seconds, >= 0 */
  double close_timeout;       /* seconds, >= 0 */
  double keepalive_interval;  /* seconds, > 0 */
  int keepalive_misses;       /* >= 1 */
};

struct rp_join {
  char id[RP_MAX_ID + 1];         /* rdzv_id, non-empty */
  char addr[RP_MAX_ADDR + 1];     /* --local_addr, or "" */
  char host[RP_MAX_ADDR + 1];     /* hostname, for logs */
  int64_t pid;
  int nproc;                      /* 1..65536 */
  int master_port;                /* 1..65535: offered as MASTER_PORT */
  enum rp_join_reason reason;
  struct rp_conf conf;
};

/* Note [root cause]: a failed worker, as a failure report names it (the
 * reporting node's earliest) and as RESTART and CLOSED name the job's root
 * cause.  exited_at 0: none (the "cause" object is absent on the wire, as
 * from a peer older than it). */
struct rp_cause {
  double exited_at;               /* wall-clock epoch seconds it exited */
  int rank;                       /* global rank */
  int local_rank;
  int exitcode;                   /* > 0 exit status, < 0 -signal */
  int64_t pid;
  char host[RP_MAX_ADDR + 1];     /* its node's host name */
};

struct rp_failure {
  bool final;                     /* no restart left: close the job */
  char message[RP_MAX_TEXT + 1];
  struct rp_cause cause;          /* optional */
};

struct rp_barrier {
  char name[RP_MAX_ID + 1];
  int round;
};

struct rp_kv {                    /* KV_SET, KV_GET, KV_ADD, KV_VALUE */
  char key[RP_MAX_KEY + 1];
  char *value;                    /* heap, NUL-terminated; SET/VALUE */
  size_t value_len;
  int64_t delta;                  /* ADD */
  double wait;                    /* GET: seconds to wait, 0 = no wait */
  bool found;                     /* VALUE */
};

struct rp_waiting {
  int round;
  int present;                    /* nodes gathered for the round */
  int min_nodes;
  int max_nodes;
  double deadline;                /* seconds left of this node's join
                                     timeout */
  double last_call;               /* seconds until completion, or -1 */
  int restart_count;              /* the job's, as the token binds it */
  /* This node's credential for the round it gathers for (rdzv_token.h);
   * all zero: none (absent on the wire). */
  unsigned char token[RP_TOKEN_BYTES];
};

struct rp_round {
  int round;
  int restart_count;              /* per job */
  int group_rank;
  int group_world_size;
  int rank_offset;
  int world_size;
  char master_addr[RP_MAX_ADDR + 1];
  int master_port;
  /* The server is embedded in the agent of node host_rank (optional on
   * the wire: absent = false). */
  bool embedded;
  int host_rank;
  /* The credential that proves this assignment (rdzv_token.h); all zero:
   * none (absent on the wire).  RESUME presents it. */
  unsigned char token[RP_TOKEN_BYTES];
  /* The round's job token, the same for every participant: the key of
   * libpg's store and mesh for the workers (launcher/jobtoken.h); all
   * zero: none. */
  unsigned char job_token[RP_TOKEN_BYTES];
};

/* What a reconnecting agent was doing when it lost the server. */
enum rp_resume_phase {
  RP_PHASE_GATHERING = 0,     /* "gathering": waiting for a round */
  RP_PHASE_RUNNING,           /* "running": its workers run a round */
  RP_PHASE_EXIT,              /* "exit": at the round's exit barrier */
};

/* RESUME: the JOIN it would send (id, conf, nproc, offered port, reason)
 * plus what it knows.  running/exit: round is the ROUND it runs (every
 * field; master_port travels as "job_master_port").  gathering: only
 * round.round (the round it waits for) and round.restart_count (the count
 * it knows) mean something.  round.token: the last credential the node
 * was given (ROUND's when running, WAITING's when gathering). */
struct rp_resume {
  struct rp_join join;
  enum rp_resume_phase phase;
  struct rp_round round;
};

struct rp_text {                  /* RESTART, CLOSED, ERROR, GOING_AWAY */
  enum rp_error_code code;        /* ERROR only */
  bool success;                   /* CLOSED: the job finished well */
  char message[RP_MAX_TEXT + 1];
  struct rp_cause cause;          /* RESTART, CLOSED: the job's root
                                     cause, optional */
  /* RESTART after a participant was lost: its host name and how ("its
   * agent exited", "no keepalive for 5.2 s"); "": not a loss. */
  char lost_host[RP_MAX_ADDR + 1];
  char lost_why[RP_MAX_ID + 1];
};

struct rp_auth {                  /* HELLO, CHALLENGE: nonce; AUTH, AUTH_OK:
                                     mac.  Hex on the wire. */
  unsigned char nonce[RP_AUTH_BYTES];
  unsigned char mac[RP_AUTH_BYTES];
};

struct rp_status_req {            /* STATUS */
  char job[RP_MAX_ID + 1];        /* "" = a summary of every job */
  int limit;                      /* jobs in the summary; 0 = default */
};

struct rp_msg {
  enum rp_op op;
  union {
    struct rp_status_req status;
    struct rp_join join;
    struct rp_resume resume;
    struct rp_failure failure;
    struct rp_barrier barrier;
    struct rp_kv kv;
    struct rp_waiting waiting;
    struct rp_round round;
    struct rp_text text;
    struct rp_auth auth;
    char *status_json;            /* STATUS_REPLY: heap, a JSON object */
  } u;
};

/* The op's wire name ("join", ...), or NULL for an invalid op. */
const char *rp_op_name(enum rp_op op);
const char *rp_error_name(enum rp_error_code code);

/* Looks at the first avail bytes of a stream.  Returns 0 when more bytes
 * are needed; 1 with *frame_len (header + body) when a whole frame is
 * there; -EMSGSIZE when the announced body exceeds RP_MAX_FRAME; -EBADMSG
 * for a zero-length body. */
int rp_frame_peek(const void *buf, size_t avail, size_t *frame_len);

/* Decodes one body (without the 4-byte header).  Returns 0 and fills *m
 * (free with rp_msg_free), or a negative errno (-EBADMSG, -EPROTO for a bad
 * version, -ENOTSUP for an unknown op, -EINVAL for a bad field, -EMSGSIZE)
 * with a one-line reason naming the field in err.  On error *m needs no
 * freeing. */
int rp_decode(const void *body, size_t len, struct rp_msg *m, char *err,
              size_t errlen);

/* Encodes m as a whole frame (header + body) in a heap buffer *out of *len
 * bytes (free with free()).  Returns 0, -EINVAL if m is not a valid message
 * (the same checks as decode), -EMSGSIZE, or -ENOMEM. */
int rp_encode(const struct rp_msg *m, char **out, size_t *len);

/* Frees the heap parts of m (kv value, status json); m itself is the
 * caller's. */
void rp_msg_free(struct rp_msg *m);

/* True when t holds no token (all zero: the field was absent). */
bool rp_token_none(const unsigned char t[RP_TOKEN_BYTES]);

/* Default configuration values (join 600 s, last call 30 s, close 30 s,
 * keepalive 1 s x 5, min = max = 1, max_restarts 0). */
void rp_conf_default(struct rp_conf *c);

#endif
