/* rdzv_reply.h -- how the rendezvous state machine's files (rdzv_state.c,
 * rdzv_round.c, rdzv_join.c, rdzv_failure.c, rdzv_resume.c, kv_store.c)
 * answer a connection: one message, a text
 * message (RESTART, CLOSED, ERROR), or an ERROR that refuses a request.
 *
 * Pure: every message goes to the injected sink (rdzv_state.h, struct
 * rdzv_state_sink), which copies what it needs during the call; a NULL
 * connection (a detached node: Note [soft state]) gets nothing.  Nothing
 * here knows jobs or nodes, so the machine's files call it and it calls
 * none of them. */
#ifndef RDZV_REPLY_H
#define RDZV_REPLY_H

#include <stdbool.h>

#include "rdzv_proto.h"
#include "rdzv_state.h"

/* m to conn. */
void rdzv_reply_send(const struct rdzv_state_sink *sink, void *conn,
                     const struct rdzv_proto_msg *m);

/* A text message (op RDZV_PROTO_RESTART, RDZV_PROTO_CLOSED or
 * RDZV_PROTO_ERROR) to conn.  cause: the job's root cause (Note [root
 * cause]), or NULL; lost_host and lost_why: the participant whose loss
 * starts the round (a RESTART's), or NULL. */
void rdzv_reply_text(const struct rdzv_state_sink *sink, void *conn,
                     enum rdzv_proto_op op, enum rdzv_proto_error_code code,
                     bool success, const char *text,
                     const struct rdzv_proto_cause *cause,
                     const char *lost_host, const char *lost_why);

/* Sends ERROR code with the formatted text to conn and returns err (a
 * negative errno), so that `return rdzv_reply_refuse(...)` refuses a
 * request in one line. */
__attribute__((format(printf, 5, 6))) int rdzv_reply_refuse(
    const struct rdzv_state_sink *sink, void *conn,
    enum rdzv_proto_error_code code, int err, const char *f, ...);

#endif
