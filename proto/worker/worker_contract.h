/* worker_contract.h -- the contract between cdrun and the workers it
 * starts, in one place: the CDRUN_* environment names cdrun sets and
 * libpg reads, the values they take, and where the job's live store is.
 * The round file's grammar is round_file.h beside it.  cdrun's agent
 * (launcher/workerenv.c, jobtoken.h, live_handshake.c) and libpg
 * (knobs.c, auth.h, recover.c) both include this header, as rdzvd and
 * cdrun both compile proto/'s one codec of the wire protocol
 * (PROTOCOL.md); the user's side of it is man/cdrun.1 (WORKER
 * ENVIRONMENT, LIVE RECOVERY) and man/libpg.3 (ENVIRONMENT).
 *
 * torchrun's own variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
 * ...) are torchrun's contract (shared/reference/torchrun.md section 1.2),
 * spelled where cdrun sets them (launcher/workerenv.c) and where libpg
 * reads them (libpg/core/launch_env.c).
 *
 * Only names and rules live here: no code, nothing either side must link.
 * The live recovery names are cdrun's in either mode: an inherited value
 * (an outer live job's) never reaches a worker; the job token and the
 * heartbeat file replace an inherited value when cdrun sets them
 * (launcher/workerenv.c). */
#ifndef PROTO_WORKER_CONTRACT_H
#define PROTO_WORKER_CONTRACT_H

/* ---- every worker ---------------------------------------------------- */

/* The job's secret, a string of 16..1024 bytes: libpg's store and TCP
 * mesh serve only processes that prove they know it (proto/SECURITY.md).
 * Every worker of a round, on every node, gets the same one (Note [job
 * token], launcher/jobtoken.h); the operator may set it for the agent. */
#define WORKER_ENV_JOB_TOKEN "CDRUN_JOB_TOKEN"

/* A file the worker touches to say it is alive (pg_heartbeat), this
 * worker's own; set with --worker_heartbeat_timeout only. */
#define WORKER_ENV_HEARTBEAT_FILE "CDRUN_HEARTBEAT_FILE"

/* ---- live recovery (cdrun --recovery=live) ---------------------------- */

/* The recovery mode: WORKER_RECOVERY_LIVE when cdrun runs the job in
 * live recovery; unset (or WORKER_RECOVERY_RESTART) otherwise.  The other
 * names below are set only with it. */
#define WORKER_ENV_RECOVERY "CDRUN_RECOVERY"
#define WORKER_RECOVERY_LIVE "live"
#define WORKER_RECOVERY_RESTART "restart"

/* A path the worker creates (libpg writes its pid and "\n") to opt in:
 * cdrun replaces a failed worker alone only when every worker of its node
 * did (Note [opt in], libpg/live/recover.c). */
#define WORKER_ENV_LIVE_OPT_IN "CDRUN_LIVE_OPT_IN"

/* "host:port" or "[v6]:port" of the job's live store, a libpg store with
 * the job token that outlives every worker: the group's store in live
 * mode (no rank serves MASTER_PORT).  Where it is: Note [live store
 * port] below. */
#define WORKER_ENV_LIVE_STORE "CDRUN_LIVE_STORE"

/* The node's round file, rewritten by the agent at every round of the
 * node (round_file.h: its grammar, its one writer and its one parser). */
#define WORKER_ENV_LIVE_ROUND_FILE "CDRUN_LIVE_ROUND_FILE"

/* How many times this local rank was replaced in live mode: 0 at first. */
#define WORKER_ENV_WORKER_RESTARTS "CDRUN_WORKER_RESTARTS"

/* Note [live store port]: the live store is rdzvd's, on a port of the
 * kernel's that the round names (PROTOCOL.md, live_store_port; Note [live
 * store in rdzvd], rdzvd/live_stores.h).  With a back end that serves
 * none, node rank 0's agent serves it on MASTER_PORT + 2, not + 1.  Linux
 * gives bind(0) odd ports and connect() even ones, so the MASTER_PORT
 * cdrun reserves is odd and the port after it is in every outgoing
 * connection's pool: on a busy host each even port holds some
 * connection's TIME_WAIT, which keeps a listener off it for a minute (a
 * loaded test machine had none of 200 free).  + 2 is odd like
 * MASTER_PORT; cdrun reserves both from the start (launcher/main.c). */
#define LIVE_STORE_PORT_OFFSET 2

#endif
