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

#define RDZV_PROTO_VERSION 2               /* 2: the shared-secret handshake */
#define RDZV_PROTO_FRAME_HEADER 4
#define RDZV_PROTO_MAX_FRAME (1u << 20) /* body bytes; larger frames: error */
#define RDZV_PROTO_MAX_ID 128           /* rdzv_id, barrier names */
#define RDZV_PROTO_MAX_ADDR 255         /* addresses and host names */
#define RDZV_PROTO_MAX_KEY 512
#define RDZV_PROTO_MAX_VALUE 65536        /* kv value bytes */
#define RDZV_PROTO_MAX_TEXT 1024          /* reasons, error messages */
#define RDZV_PROTO_MAX_NODES 100000       /* min/max nodes upper bound */
#define RDZV_PROTO_AUTH_BYTES 32          /* nonces and HMAC-SHA256 tags */
#define RDZV_PROTO_MAX_STATUS_JOBS 100000 /* status: jobs asked for at most */
/* Bounds that leave room for the arithmetic done on the numbers: a round
 * number or restart count from the wire can still be incremented (and
 * rounds go up by one per round: 2^30 of them is decades of restarts). */
#define RDZV_PROTO_MAX_ROUND (1 << 30)
#define RDZV_PROTO_MAX_RESTARTS 1000000     /* max_restarts, restart_count */
/* Floors on the durations a JOIN chooses (seconds): none lets a member
 * be expelled before it could have spoken. */
#define RDZV_PROTO_MIN_JOIN_TIMEOUT 1.0
#define RDZV_PROTO_MIN_KEEPALIVE 0.05       /* keepalive_interval */
#define RDZV_PROTO_MIN_KEEPALIVE_WINDOW 0.5 /* keepalive_interval x misses */
#define RDZV_PROTO_TOKEN_BYTES 32 /* a node's credential (rdzv_token.h) */

enum rdzv_proto_op {
  RDZV_PROTO_OP_INVALID = 0,
  /* agent -> server */
  RDZV_PROTO_JOIN,      /* join (or re-join) a job's next round */
  RDZV_PROTO_KEEPALIVE, /* I am alive; answered by PONG */
  RDZV_PROTO_FAILURE,   /* my workers failed (final: no restart left) */
  RDZV_PROTO_BARRIER,   /* enter a named barrier of the current round */
  RDZV_PROTO_LEAVE,     /* I am done with this job, closing */
  RDZV_PROTO_KV_SET,
  RDZV_PROTO_KV_GET, /* answered by KV_VALUE, optionally waiting */
  RDZV_PROTO_KV_ADD, /* answered by KV_VALUE with the new number */
  RDZV_PROTO_STATUS, /* answered by STATUS_REPLY */
  /* server -> agent */
  RDZV_PROTO_WAITING, /* progress while a round gathers */
  RDZV_PROTO_ROUND,   /* the round completed: this node's assignment */
  RDZV_PROTO_RESTART, /* the job needs a new round: stop workers, re-join */
  RDZV_PROTO_BARRIER_DONE,
  RDZV_PROTO_CLOSED, /* the job ended (failed for good, or finished) */
  RDZV_PROTO_KV_VALUE,
  RDZV_PROTO_STATUS_REPLY,
  RDZV_PROTO_PONG,
  RDZV_PROTO_ERROR, /* the request was refused; see code */
  /* the shared-secret handshake (proto/rdzv_auth.h), both directions */
  RDZV_PROTO_HELLO,     /* A -> S: the client's nonce */
  RDZV_PROTO_CHALLENGE, /* S -> A: the server's nonce */
  RDZV_PROTO_AUTH,      /* A -> S: the client's proof */
  RDZV_PROTO_AUTH_OK,   /* S -> A: accepted, with the server's proof */
  /* soft state (Note [soft state] in rdzvd/rdzv_state.h) */
  RDZV_PROTO_RESUME,     /* A -> S: after a reconnect, what the agent knows */
  RDZV_PROTO_GOING_AWAY, /* S -> A: the server is stopping; reconnect now */
  RDZV_PROTO_OP_COUNT
};

enum rdzv_proto_join_reason {
  RDZV_PROTO_REASON_FIRST = 0,  /* "first" */
  RDZV_PROTO_REASON_FAILURE,    /* "failure": after a local worker failure */
  RDZV_PROTO_REASON_MEMBERSHIP, /* "membership": after a RESTART push */
};

/* Error codes carried by RDZV_PROTO_ERROR (as strings on the wire). */
enum rdzv_proto_error_code {
  RDZV_PROTO_ERR_BAD_REQUEST = 1, /* "bad_request": malformed frame/field */
  RDZV_PROTO_ERR_CONFIG_MISMATCH, /* "config_mismatch" */
  RDZV_PROTO_ERR_JOIN_TIMEOUT,    /* "join_timeout" */
  RDZV_PROTO_ERR_CLOSED,          /* "closed": the job already ended */
  RDZV_PROTO_ERR_NOT_JOINED,      /* "not_joined": op needs a prior JOIN */
  RDZV_PROTO_ERR_LIMIT,           /* "limit": too many keys/bytes/jobs */
  RDZV_PROTO_ERR_TIMEOUT,         /* "timeout": a KV wait timed out */
  RDZV_PROTO_ERR_AUTH,                /* "auth": the shared-secret handshake
                                 failed or was required */
};

/* The job's configuration, fixed by its first joiner. */
struct rdzv_proto_conf {
  int min_nodes;             /* 1..max_nodes */
  int max_nodes;             /* min_nodes..RDZV_PROTO_MAX_NODES */
  int max_restarts;          /* >= 0 */
  double join_timeout;       /* seconds, > 0 */
  double last_call_timeout;  /* seconds, >= 0 */
  double close_timeout;      /* seconds, >= 0 */
  double keepalive_interval; /* seconds, > 0 */
  int keepalive_misses;      /* >= 1 */
  /* The job asks for live recovery: a server that can serves its live
   * store (Note [live store in rdzvd], rdzvd/live_stores.h). */
  bool live;
};

struct rdzv_proto_join {
  char id[RDZV_PROTO_MAX_ID + 1];     /* rdzv_id, non-empty */
  char addr[RDZV_PROTO_MAX_ADDR + 1]; /* --local_addr, or "" */
  char host[RDZV_PROTO_MAX_ADDR + 1]; /* hostname, for logs */
  int64_t pid;
  int nproc;                      /* 1..65536 */
  int master_port;                /* 1..65535: offered as MASTER_PORT */
  enum rdzv_proto_join_reason reason;
  struct rdzv_proto_conf conf;
};

/* Note [root cause]: a failed worker, as a failure report names it (the
 * reporting node's earliest) and as RESTART and CLOSED name the job's root
 * cause.  exited_at 0: none (the "cause" object is absent on the wire, as
 * from a peer older than it). */
struct rdzv_proto_cause {
  double exited_at;               /* wall-clock epoch seconds it exited */
  int rank;                       /* global rank */
  int local_rank;
  int exitcode;                   /* > 0 exit status, < 0 -signal */
  int64_t pid;
  char host[RDZV_PROTO_MAX_ADDR + 1];     /* its node's host name */
};

struct rdzv_proto_failure {
  bool final;                     /* no restart left: close the job */
  char message[RDZV_PROTO_MAX_TEXT + 1];
  struct rdzv_proto_cause cause;          /* optional */
};

struct rdzv_proto_barrier {
  char name[RDZV_PROTO_MAX_ID + 1];
  int round;
};

struct rdzv_proto_kv {                    /* KV_SET, KV_GET, KV_ADD, KV_VALUE */
  char key[RDZV_PROTO_MAX_KEY + 1];
  char *value;                    /* heap, NUL-terminated; SET/VALUE */
  size_t value_len;
  int64_t delta;                  /* ADD */
  double wait;                    /* GET: seconds to wait, 0 = no wait */
  bool found;                     /* VALUE */
};

struct rdzv_proto_waiting {
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
  unsigned char token[RDZV_PROTO_TOKEN_BYTES];
};

struct rdzv_proto_round {
  int round;
  int restart_count;              /* per job */
  int group_rank;
  int group_world_size;
  int rank_offset;
  int world_size;
  char master_addr[RDZV_PROTO_MAX_ADDR + 1];
  int master_port;
  /* The server is embedded in the agent of node host_rank (optional on
   * the wire: absent = false). */
  bool embedded;
  int host_rank;
  /* The credential that proves this assignment (rdzv_token.h); all zero:
   * none (absent on the wire).  RESUME presents it. */
  unsigned char token[RDZV_PROTO_TOKEN_BYTES];
  /* The round's job token, the same for every participant: the key of
   * libpg's store and mesh for the workers (launcher/jobtoken.h); all
   * zero: none. */
  unsigned char job_token[RDZV_PROTO_TOKEN_BYTES];
  /* The port of the job's live store on the server's host, served with
   * job_token (Note [live store in rdzvd]); 0: none (absent on the
   * wire). */
  int live_store_port;
};

/* What a reconnecting agent was doing when it lost the server. */
enum rdzv_proto_resume_phase {
  RDZV_PROTO_PHASE_GATHERING = 0, /* "gathering": waiting for a round */
  RDZV_PROTO_PHASE_RUNNING,       /* "running": its workers run a round */
  RDZV_PROTO_PHASE_EXIT,          /* "exit": at the round's exit barrier */
};

/* RESUME: the JOIN it would send (id, conf, nproc, offered port, reason)
 * plus what it knows.  running/exit: round is the ROUND it runs (every
 * field; master_port travels as "job_master_port").  gathering: only
 * round.round (the round it waits for) and round.restart_count (the count
 * it knows) mean something.  round.token: the last credential the node
 * was given (ROUND's when running, WAITING's when gathering). */
struct rdzv_proto_resume {
  struct rdzv_proto_join join;
  enum rdzv_proto_resume_phase phase;
  struct rdzv_proto_round round;
};

struct rdzv_proto_text {           /* RESTART, CLOSED, ERROR, GOING_AWAY */
  enum rdzv_proto_error_code code; /* ERROR only */
  bool success;                    /* CLOSED: the job finished well */
  char message[RDZV_PROTO_MAX_TEXT + 1];
  struct rdzv_proto_cause cause;          /* RESTART, CLOSED: the job's root
                                     cause, optional */
  /* RESTART after a participant was lost: its host name and how ("its
   * agent exited", "no keepalive for 5.2 s"); "": not a loss. */
  char lost_host[RDZV_PROTO_MAX_ADDR + 1];
  char lost_why[RDZV_PROTO_MAX_ID + 1];
};

struct rdzv_proto_auth { /* HELLO, CHALLENGE: nonce; AUTH, AUTH_OK:
                                     mac.  Hex on the wire. */
  unsigned char nonce[RDZV_PROTO_AUTH_BYTES];
  unsigned char mac[RDZV_PROTO_AUTH_BYTES];
};

struct rdzv_proto_status_req {     /* STATUS */
  char job[RDZV_PROTO_MAX_ID + 1]; /* "" = a summary of every job */
  int limit;                       /* jobs in the summary; 0 = default */
};

struct rdzv_proto_msg {
  enum rdzv_proto_op op;
  union {
    struct rdzv_proto_status_req status;
    struct rdzv_proto_join join;
    struct rdzv_proto_resume resume;
    struct rdzv_proto_failure failure;
    struct rdzv_proto_barrier barrier;
    struct rdzv_proto_kv kv;
    struct rdzv_proto_waiting waiting;
    struct rdzv_proto_round round;
    struct rdzv_proto_text text;
    struct rdzv_proto_auth auth;
    char *status_json;            /* STATUS_REPLY: heap, a JSON object */
  } u;
};

/* The op's wire name ("join", ...), or NULL for an invalid op. */
const char *rdzv_proto_op_name(enum rdzv_proto_op op);
const char *rdzv_proto_error_name(enum rdzv_proto_error_code code);

/* Looks at the first avail bytes of a stream.  Returns 0 when more bytes are
 * needed; 1 with *frame_len (header + body) when a whole frame is there;
 * -EMSGSIZE when the announced body exceeds RDZV_PROTO_MAX_FRAME; -EBADMSG
 * for a zero-length body. */
int rdzv_proto_frame_peek(const void *buf, size_t avail, size_t *frame_len);

/* Decodes one body (without the 4-byte header).  Returns 0 and fills *m
 * (free with rdzv_proto_msg_free), or a negative errno (-EBADMSG, -EPROTO
 * for a bad version, -ENOTSUP for an unknown op, -EINVAL for a bad field,
 * -EMSGSIZE) with a one-line reason naming the field in err.  On error *m
 * needs no freeing. */
int rdzv_proto_decode(const void *body, size_t len, struct rdzv_proto_msg *m,
                      char *err, size_t errlen);

/* Encodes m as a whole frame (header + body) in a heap buffer *out of *len
 * bytes (free with free()).  Returns 0, -EINVAL if m is not a valid message
 * (the same checks as decode), -EMSGSIZE, or -ENOMEM. */
int rdzv_proto_encode(const struct rdzv_proto_msg *m, char **out, size_t *len);

/* The same, into buf[0..cap) when the frame fits there: *out is then buf;
 * otherwise into a heap buffer as above (*out != buf: the caller frees
 * it).  For replies sent at once from the stack: no allocation. */
int rdzv_proto_encode_into(const struct rdzv_proto_msg *m, char *buf,
                           size_t cap, char **out, size_t *len);

/* Frees the heap parts of m (kv value, status json); m itself is the
 * caller's. */
void rdzv_proto_msg_free(struct rdzv_proto_msg *m);

/* True when t holds no token (all zero: the field was absent). */
bool rdzv_proto_token_none(const unsigned char t[RDZV_PROTO_TOKEN_BYTES]);

/* Default configuration values (join 600 s, last call 30 s, close 30 s,
 * keepalive 1 s x 5, min = max = 1, max_restarts 0). */
void rdzv_proto_conf_default(struct rdzv_proto_conf *c);

#endif
