/* pg.h -- libpg: the process-group library for workers started by cdrun.
 *
 * A process group is WORLD_SIZE processes that exchange data: a key-value
 * store (rank 0 serves it on MASTER_PORT) and collectives on CPU memory
 * (shared memory within a host, TCP across hosts) or on GPU memory (NCCL).
 *
 * Usage:
 *
 *   pg_group *g;
 *   struct pg_options o = PG_OPTIONS_INIT;      // everything from the env
 *   int err = pg_init(&o, &g);
 *   if (err) { fprintf(stderr, "pg_init: %s\n", pg_strerror(err)); ... }
 *   pg_all_reduce(g, grad, grad, n, PG_F32, PG_AVG);   // in place
 *   pg_destroy(g);
 *
 * Conventions: every function returns 0 or a negative error code (a
 * negative errno, or one of the PG_E* codes below); nothing is printed and
 * nothing exits.  A call that fails synchronously has no other effect; an
 * async call that fails synchronously returns no work handle.
 *
 * Threads: a group may be used from one thread at a time (calls are issued
 * in order; the library's progress thread runs them in that order).  The
 * store may be used from any thread.
 *
 * NCCL: calls return once the work is enqueued on the GPU; see "streams"
 * below for what that means for the caller. */
#ifndef PG_H
#define PG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PG_EXTERN __attribute__((visibility("default")))
#else
#define PG_EXTERN
#endif

#define PG_VERSION_MAJOR 0
#define PG_VERSION_MINOR 1

typedef struct pg_group pg_group;
typedef struct pg_store pg_store;
typedef struct pg_work pg_work;

/* Element types. */
typedef enum {
  PG_F32 = 0,
  PG_F64,
  PG_F16,     /* IEEE half; accumulated in f32 (see pg_op) */
  PG_BF16,    /* bfloat16; accumulated in f32 (see pg_op) */
  PG_I32,
  PG_I64,
  PG_U8,
  PG_DTYPE_COUNT
} pg_dtype;

/* Reductions.  AVG is SUM divided by the world size (integer types:
 * truncating division).
 *
 * Half precision (f16, bf16): SUM, AVG and PROD accumulate in f32 and
 * round once, AVG dividing before that rounding, so a result that the
 * dtype can hold is never inf (an f16 AVG of 65504 over 3 ranks is
 * 65504).  The CPU backends widen the data to f32 for the transport (a
 * temporary and twice the bytes, for these dtypes only).  NCCL reduces
 * half precision with its own kernels: AVG is ncclAvg, which scales each
 * contribution by 1/n before summing (no overflow, rounding may differ
 * from the CPU backends in the last bit). */
typedef enum {
  PG_SUM = 0,
  PG_AVG,
  PG_MIN,
  PG_MAX,
  PG_PROD,
  PG_OP_COUNT
} pg_op;

typedef enum {
  PG_BACKEND_AUTO = 0,  /* $PG_BACKEND, else CPU */
  PG_BACKEND_CPU,
  PG_BACKEND_NCCL,
} pg_backend;

/* Error codes beyond errno.  Errno values used: -EINVAL (bad argument or
 * environment), -ETIMEDOUT (an operation or a store wait timed out),
 * -ECONNRESET / -EPIPE (a peer went away), -ECONNREFUSED (the store is not
 * there), -ENOMEM, -EPROTO (a peer sent garbage or ranks disagree on an
 * operation), -ENOENT (store key missing), -ENODEV (NCCL requested, no
 * GPU), -ENOTSUP (backend lacks it), -EMSGSIZE (message or value too
 * large), -ERANGE (store counter overflow), -EALREADY (reducer: marked
 * twice), -EBUSY (reducer: operations in flight), -EACCES (the store or a
 * mesh peer refused the job token, or could not prove it), -ENOSPC (over
 * the store's memory budget), -ENODATA (live recovery: the state is
 * lost).  pg_strerror and
 * pg_err_name know them all. */
#define PG_EBACKEND_BASE  (-20000)  /* -20000 - ncclResult_t / cudaError */
#define PG_ENCCL(r)       (PG_EBACKEND_BASE - (int)(r))
#define PG_ECUDA(r)       (PG_EBACKEND_BASE - 1000 - (int)(r))
#define PG_EPEERFAIL      (-19999)  /* an earlier collective failed: the
                                       group is unusable, destroy it */
#define PG_ERR_PEER_LOST  (-19998)  /* live recovery: a member of the group
                                       died; every pending and later
                                       operation fails with this until
                                       pg_recover (see "live recovery") */
#define PG_ESTALE_GROUP   (-19997)  /* live recovery: a sub-group of an
                                       earlier generation; destroy it and
                                       make it again */

/* How to create a group.  Zero / -1 / NULL fields take the value from the
 * environment cdrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT) or the documented default. */
struct pg_options {
  int rank;                 /* -1: $RANK */
  int world_size;           /* -1: $WORLD_SIZE */
  int local_rank;           /* -1: $LOCAL_RANK (0 if unset) */
  int local_world_size;     /* -1: $LOCAL_WORLD_SIZE (1 if unset) */
  const char *master_addr;  /* NULL: $MASTER_ADDR */
  int master_port;          /* 0: $MASTER_PORT */
  pg_backend backend;       /* AUTO: $PG_BACKEND (cpu|nccl), else cpu:
                               buffers are host memory unless NCCL is
                               asked for */
  double timeout;           /* seconds for every operation; 0:
                               $PG_TIMEOUT, else 300 */
  /* Ranks with equal host ids share memory (shared-memory transport);
   * NULL: $PG_HOST_ID, else this machine's hostname and boot id.  Tests
   * give every rank its own id to force the TCP path on one machine. */
  const char *host_id;
  /* CUDA device for NCCL; -1: the device rule -- a process that sees
   * one device (CUDA_VISIBLE_DEVICES) uses device 0, one that sees
   * several uses local_rank modulo their number. */
  int device;
  /* The job's secret, the same for every rank: the store and the TCP
   * mesh serve only those who prove they know it.  NULL:
   * $CDRUN_JOB_TOKEN (cdrun sets it); "": none (a warning, once). */
  const char *job_token;
};

/* Every field "from the environment".  Designated initializers (C99,
 * C++20); older C++ gets the same values by position. */
#if !defined(__cplusplus) || __cplusplus >= 202002L
#define PG_OPTIONS_INIT                                                     \
  { .rank = -1, .world_size = -1, .local_rank = -1,                         \
    .local_world_size = -1, .master_addr = NULL, .master_port = 0,          \
    .backend = PG_BACKEND_AUTO, .timeout = 0, .host_id = NULL,              \
    .device = -1, .job_token = NULL }
#else
#define PG_OPTIONS_INIT { -1, -1, -1, -1, NULL, 0, PG_BACKEND_AUTO, 0, NULL, \
                          -1, NULL }
#endif

/* Creates the group: connects to (rank 0: serves) the store, exchanges
 * endpoints, sets up the backend.  Collective: every rank must call it.
 * Returns 0 and *out, or an error (a missing or malformed variable is
 * -EINVAL; see pg_last_error for the sentence naming it). */
PG_EXTERN int pg_init(const struct pg_options *o, pg_group **out);

/* Frees the group (waits for work in flight).  NULL is fine.  Free every
 * work handle first. */
PG_EXTERN void pg_destroy(pg_group *g);

/* ---- sub-groups ------------------------------------------------------
 *
 * Groups over a subset of a group's ranks, for tensor and pipeline
 * parallelism: each has its own ranks (0..n-1), backend, store key
 * namespace and progress thread, so collectives of several groups run
 * at once -- from different threads (one thread per group at a time) or
 * interleaved as async work.  Both calls are collective over the parent:
 * every rank of the parent calls them, in the same order, even the ranks
 * that are not members, which get *out = NULL and 0 (as torch's
 * new_group gives non-members a non-member marker).  Members' calls also
 * wait for each other (the new communicator's setup).  Ranks, roots and
 * peers of a sub-group's operations are its own ranks.  A sub-group's
 * backend is chosen by where its members live (shared memory when they
 * share a host, TCP when none does, hierarchical otherwise; NCCL: split
 * from the parent's communicator with ncclCommSplit, with NCCL >= 2.18).
 * pg_group_store gives a view of the
 * store whose keys are the group's own (pg_store_prefix).  Destroy
 * sub-groups before their parent.
 *
 * Live mode (libpg(3), LIVE RECOVERY, "Sub-groups in live mode"): a
 * member's death fails the operations of every group it was in with
 * PG_ERR_PEER_LOST, and pg_recover closes every sub-group first, so that
 * peers waiting in one learn of it at once.  The recovery does not
 * rebuild them: after pg_recover, destroy them and make them again;
 * making them returns PG_ERR_PEER_LOST when a member dies meanwhile or
 * has already moved on to the next generation: destroy what was made,
 * pg_recover again, make them again.
 *
 * pg_new_group: the parent's ranks[0..n-1] (distinct, any order); the
 * sub-group's rank i is the i-th smallest of them (as torch). */
PG_EXTERN int pg_new_group(pg_group *parent, const int *ranks, int n,
                           pg_group **out);
/* pg_split (as MPI_Comm_split and ncclCommSplit): ranks that pass the
 * same color >= 0 form a group, ordered by key, then by parent rank; a
 * negative color makes no group (*out = NULL). */
PG_EXTERN int pg_split(pg_group *parent, int color, int key,
                       pg_group **out);

PG_EXTERN int pg_rank(const pg_group *g);
PG_EXTERN int pg_size(const pg_group *g);
/* "self" (a group of one), "cpu-shm", "cpu-tcp", "cpu-hier" or "nccl". */
PG_EXTERN const char *pg_backend_name(const pg_group *g);
/* The group's store (owned by the group); a sub-group's is a view with
 * the group's own keys. */
PG_EXTERN pg_store *pg_group_store(pg_group *g);

/* A sentence about the last error of this thread's last failing libpg
 * call ("MASTER_PORT is 'abc', expected an integer 1..65535"), or "".
 * For async work, pg_work_wait/pg_work_test set it when they return the
 * work's error. */
PG_EXTERN const char *pg_last_error(void);
/* The meaning of an error code, and its name ("ETIMEDOUT"). */
PG_EXTERN const char *pg_strerror(int err);
PG_EXTERN const char *pg_err_name(int err);
PG_EXTERN size_t pg_dtype_size(pg_dtype t);

/* ---- store ---------------------------------------------------------- */

/* Serves a store on addr:port (port 0: any; addr NULL: every address).
 * Returns the server's port via *port.  The server runs on its own thread
 * until pg_store_server_stop.  Its memory is bounded by
 * $PG_STORE_MAX_BYTES and friends (man libpg).
 *
 * The job token: the _auth forms take it (NULL: $CDRUN_JOB_TOKEN, which
 * cdrun sets; "": none), the others read $CDRUN_JOB_TOKEN.  A server with
 * a token serves only clients that prove they know it (challenge and
 * HMAC-SHA256; the token never travels); a client with one refuses a
 * server that cannot prove it.  Without a token on either side the store
 * is open to whoever reaches the port.  A refused client gets -EACCES. */
typedef struct pg_store_server pg_store_server;
PG_EXTERN int pg_store_server_start(const char *addr, int *port,
                                    pg_store_server **out);
PG_EXTERN int pg_store_server_start_auth(const char *addr, int *port,
                                         const char *token,
                                         pg_store_server **out);
PG_EXTERN void pg_store_server_stop(pg_store_server *s);

/* Connects to a store, retrying until timeout seconds have passed. */
PG_EXTERN int pg_store_connect(const char *host, int port, double timeout,
                               pg_store **out);
PG_EXTERN int pg_store_connect_auth(const char *host, int port,
                                    double timeout, const char *token,
                                    pg_store **out);
PG_EXTERN void pg_store_close(pg_store *s);

/* Keys are NUL-terminated, at most 4096 bytes; values at most 64 MiB
 * (rank 0 may set lower limits).  A request over the server's memory
 * budget gets -ENOSPC (pg_last_error names the budget). */
PG_EXTERN int pg_store_set(pg_store *s, const char *key, const void *value,
                           size_t len);
/* Waits up to timeout seconds (0: don't wait; < 0: no limit) for key;
 * *value is malloc'd (free it).  -ETIMEDOUT, or -ENOENT when not waiting
 * and absent. */
PG_EXTERN int pg_store_get(pg_store *s, const char *key, double timeout,
                           void **value, size_t *len);
/* Adds delta to the decimal integer in key (absent: 0); *result (may be
 * NULL) gets the new value. */
PG_EXTERN int pg_store_add(pg_store *s, const char *key, int64_t delta,
                           int64_t *result);
/* Waits until every key exists, up to timeout seconds. */
PG_EXTERN int pg_store_wait(pg_store *s, const char *const *keys, size_t n,
                            double timeout);
/* Sets key to desired if its value equals expected (expected_len 0
 * matches an absent key or an empty value, as in PyTorch's TCPStore).  *current (malloc'd, may be NULL) gets the value
 * after the operation; *swapped whether it replaced. */
PG_EXTERN int pg_store_compare_set(pg_store *s, const char *key,
                                   const void *expected, size_t expected_len,
                                   const void *desired, size_t desired_len,
                                   void **current, size_t *current_len,
                                   bool *swapped);
/* *deleted (may be NULL): whether the key existed. */
PG_EXTERN int pg_store_delete(pg_store *s, const char *key, bool *deleted);
PG_EXTERN int pg_store_num_keys(pg_store *s, int64_t *n);
/* A view of s in which every key is prefix + key (as PyTorch's
 * PrefixStore; views nest).  It shares s's connection: close the view
 * (pg_store_close) before s.  num_keys counts every key of s. */
PG_EXTERN int pg_store_prefix(pg_store *s, const char *prefix,
                              pg_store **out);

/* ---- collectives ------------------------------------------------------ *
 * count is in elements; buffers are host memory for the CPU backend and
 * device memory for NCCL.  send == recv means in place.  count may be 0.
 * Every rank must issue the same collectives in the same order. */

PG_EXTERN int pg_all_reduce(pg_group *g, const void *send, void *recv,
                            size_t count, pg_dtype t, pg_op op);
PG_EXTERN int pg_broadcast(pg_group *g, void *buf, size_t count, pg_dtype t,
                           int root);
/* recv matters on root only (may be NULL elsewhere). */
PG_EXTERN int pg_reduce(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, pg_op op, int root);
/* recv holds world_size * count elements, rank r's at r * count.  In
 * place: send == recv + rank * count. */
PG_EXTERN int pg_all_gather(pg_group *g, const void *send, void *recv,
                            size_t count, pg_dtype t);
/* send holds world_size * count elements; rank r gets the reduction of
 * every rank's block r in recv (count elements).  In place: recv == send +
 * rank * count. */
PG_EXTERN int pg_reduce_scatter(pg_group *g, const void *send, void *recv,
                                size_t count, pg_dtype t, pg_op op);
PG_EXTERN int pg_barrier(pg_group *g);
/* send holds world_size blocks of count elements, block r for rank r;
 * recv gets world_size blocks, block r from rank r.  The buffers may not
 * overlap. */
PG_EXTERN int pg_all_to_all(pg_group *g, const void *send, void *recv,
                            size_t count, pg_dtype t);
/* The same with a size per rank: send_counts[r] elements at
 * send_displs[r] go to rank r, recv_counts[r] elements from rank r land
 * at recv_displs[r] (counts and displacements in elements; NULL
 * displacements: the blocks packed in rank order).  Rank r's
 * recv_counts[s] must equal rank s's send_counts[r] (-EMSGSIZE
 * otherwise); blocks may not overlap. */
PG_EXTERN int pg_all_to_all_v(pg_group *g, const void *send,
                              const size_t *send_counts,
                              const size_t *send_displs, void *recv,
                              const size_t *recv_counts,
                              const size_t *recv_displs, pg_dtype t);
/* recv (on root only; NULL elsewhere is fine) gets world_size blocks of
 * count elements, rank r's at r * count.  In place: on the root, send ==
 * recv + root * count. */
PG_EXTERN int pg_gather(pg_group *g, const void *send, void *recv,
                        size_t count, pg_dtype t, int root);
/* The root's send holds world_size blocks of count elements; rank r gets
 * block r in recv.  send matters on the root only.  In place: on the
 * root, recv == send + root * count. */
PG_EXTERN int pg_scatter(pg_group *g, const void *send, void *recv,
                         size_t count, pg_dtype t, int root);
/* Point to point; a send matches the peer's recv with the same tag, in
 * order.  Tag INT_MIN is libpg's own (all_to_all, gather and scatter are
 * made of such messages): -EINVAL. */
PG_EXTERN int pg_send(pg_group *g, const void *buf, size_t count,
                      pg_dtype t, int peer, int tag);
PG_EXTERN int pg_recv(pg_group *g, void *buf, size_t count, pg_dtype t,
                      int peer, int tag);

/* ---- async -------------------------------------------------------------
 * Each call queues the operation and returns at once with a work handle;
 * operations of a group run in issue order on the library's progress
 * thread.  The buffers must stay valid and untouched until the work is
 * done. */

PG_EXTERN int pg_all_reduce_async(pg_group *g, const void *send, void *recv,
                                  size_t count, pg_dtype t, pg_op op,
                                  pg_work **w);
PG_EXTERN int pg_broadcast_async(pg_group *g, void *buf, size_t count,
                                 pg_dtype t, int root, pg_work **w);
PG_EXTERN int pg_reduce_async(pg_group *g, const void *send, void *recv,
                              size_t count, pg_dtype t, pg_op op, int root,
                              pg_work **w);
PG_EXTERN int pg_all_gather_async(pg_group *g, const void *send, void *recv,
                                  size_t count, pg_dtype t, pg_work **w);
PG_EXTERN int pg_reduce_scatter_async(pg_group *g, const void *send,
                                      void *recv, size_t count, pg_dtype t,
                                      pg_op op, pg_work **w);
PG_EXTERN int pg_barrier_async(pg_group *g, pg_work **w);
/* The counts and displacements of pg_all_to_all_v_async, like the
 * buffers, must stay valid until the work is done. */
PG_EXTERN int pg_all_to_all_async(pg_group *g, const void *send,
                                  void *recv, size_t count, pg_dtype t,
                                  pg_work **w);
PG_EXTERN int pg_all_to_all_v_async(pg_group *g, const void *send,
                                    const size_t *send_counts,
                                    const size_t *send_displs, void *recv,
                                    const size_t *recv_counts,
                                    const size_t *recv_displs, pg_dtype t,
                                    pg_work **w);
PG_EXTERN int pg_gather_async(pg_group *g, const void *send, void *recv,
                              size_t count, pg_dtype t, int root,
                              pg_work **w);
PG_EXTERN int pg_scatter_async(pg_group *g, const void *send, void *recv,
                               size_t count, pg_dtype t, int root,
                               pg_work **w);
PG_EXTERN int pg_send_async(pg_group *g, const void *buf, size_t count,
                            pg_dtype t, int peer, int tag, pg_work **w);
PG_EXTERN int pg_recv_async(pg_group *g, void *buf, size_t count,
                            pg_dtype t, int peer, int tag, pg_work **w);

/* *done = whether the work finished; returns its result when done, else
 * 0. */
PG_EXTERN int pg_work_test(pg_work *w, bool *done);
/* Waits up to timeout seconds (< 0: no limit); returns the work's result,
 * or -ETIMEDOUT if it is still running (the work goes on).  NCCL: makes
 * the group's stream wait for the work on the device and returns at once
 * (see "streams" below; pg_work_synchronize waits on the host). */
PG_EXTERN int pg_work_wait(pg_work *w, double timeout);
/* Frees the handle; work still in flight completes on its own. */
PG_EXTERN void pg_work_free(pg_work *w);

/* ---- streams (NCCL) -------------------------------------------------------
 *
 * On NCCL, operations are stream-ordered, as NCCL's own and PyTorch's
 * ProcessGroupNCCL are:
 *
 * - Each operation is ordered after what the group's stream (below) holds
 *   when it is called -- the kernels that produced its input -- and runs
 *   on the communicator's own stream, so it never waits for later work.
 * - Every call, synchronous or not, returns once the operation is
 *   enqueued: the host does not wait for the GPU.  A synchronous call
 *   (pg_all_reduce, ...) makes the group's stream wait for the result on
 *   the device, so kernels queued there next see it; to read a result on
 *   the host, synchronize that stream.  pg_barrier alone waits on the
 *   host.
 * - An _async call's pg_work_wait makes the group's stream wait for the
 *   work on the device and returns at once (with the error known so far);
 *   pg_work_synchronize blocks the host until the work is done;
 *   $PG_NCCL_BLOCKING_WAIT=1 makes pg_work_wait (and synchronous calls
 *   and the reducer's memory operations) wait on the host too.
 *   pg_work_test asks without waiting.
 * - Buffers must stay valid until the work is done on the device.
 * - A failure (an operation past its timeout, an NCCL error) aborts the
 *   communicator and is published through the store: every rank's
 *   watchdog aborts its own within about a quarter of a second, and
 *   every later operation fails (PG_EPEERFAIL); the sentence names the
 *   operation, its sequence number and the rank that failed first.
 *
 * On the CPU backends buffers are host memory, there are no streams, and
 * calls return when their work is done (async: pg_work_wait). */

/* The stream (a cudaStream_t) that operations of g are ordered after and
 * that waits for them; NULL: the legacy default stream (the default).
 * No-op on the CPU backends. */
PG_EXTERN int pg_set_stream(pg_group *g, void *stream);
/* Waits on the host until w is done (NCCL: until the GPU finished it),
 * up to timeout seconds (< 0: no limit); the CPU backends: pg_work_wait. */
PG_EXTERN int pg_work_synchronize(pg_work *w, double timeout);

/* Point-to-point groups: pg_send and pg_recv issued between
 * pg_group_start and pg_group_end run together, so an exchange (each
 * rank sending to and receiving from the other) cannot deadlock; NCCL
 * runs them as one ncclGroupStart/ncclGroupEnd group, and pg_group_end
 * returns once it is enqueued (the group's stream waits for it).  On the
 * CPU backends pg_group_end runs every send, then every receive, and
 * returns when they are done; only pg_send and pg_recv may be grouped
 * there (-ENOTSUP otherwise), and never _async calls (-EINVAL).  Groups
 * nest; the outermost end runs them. */
PG_EXTERN int pg_group_start(pg_group *g);
PG_EXTERN int pg_group_end(pg_group *g);

/* ---- reducer: DDP-style gradient bucketing --------------------------------
 *
 * Gradients are averaged across ranks while the backward pass still runs.
 * Parameters are registered in forward order; buckets are formed in
 * reverse order (the last layers' gradients, ready first, go first): the
 * first bucket up to first_bucket_cap bytes (1 MiB), the others up to
 * bucket_cap (25 MiB), one dtype per bucket.  Each gradient lives in its
 * bucket's memory (pg_reducer_grad): the application writes it there, no
 * copy.  When every gradient of a bucket is marked ready, the bucket's
 * all-reduce (AVG) starts at once, asynchronously, buckets in order.
 *
 *   pg_reducer_create(g, params, n, &opts, &r);   // collective
 *   for each step:
 *     pg_reducer_prepare(r, sync);   // sync = false: accumulate (no_sync)
 *     backward: for each parameter i, last layer first:
 *       write or add its gradient into pg_reducer_grad(r, i);
 *       pg_reducer_mark_ready(r, i);
 *     pg_reducer_finish(r);          // averaged gradients in place
 *     optimizer step reading pg_reducer_grad(r, i); pg_reducer_zero_grad(r)
 *
 * Adding is safe in live mode too, where a step may be redone ("live
 * recovery" below):
 *
 * After pg_recover returns, every reducer is between iterations and
 * every gradient is zero, on every rank (the heal's source included),
 * whatever phase the failure interrupted: gradients written, added up
 * under no_sync, being reduced, or averaged and not yet used.  The
 * interrupted step, with its no_sync iterations, is redone from the
 * healed state.
 *
 * A parameter not marked ready by finish got no gradient this iteration:
 * its slot contributes zeros (so it is averaged with the ranks that did
 * use it), never a deadlock -- unless it was marked ready in a no_sync
 * iteration since the last synchronized finish or zero_grad: then its
 * slot holds an accumulated gradient, which is kept and averaged (as DDP
 * keeps a defined .grad).  The order in which gradients became ready
 * in the first synchronized iteration rebuilds the buckets once, at the
 * next prepare (rank 0's order, so all ranks agree); gradient pointers
 * may change then: fetch them with pg_reducer_grad after prepare. */

typedef struct pg_reducer pg_reducer;

struct pg_param_spec {
  size_t numel;
  pg_dtype dtype;
};

struct pg_reducer_options {
  size_t bucket_cap;        /* bytes; 0: $PG_BUCKET_CAP_MB MiB, else 25 MiB */
  size_t first_bucket_cap;  /* bytes; 0: $PG_FIRST_BUCKET_CAP_MB, else 1 MiB */
  bool no_rebuild;          /* keep the initial buckets */
};

#define PG_REDUCER_OPTIONS_INIT { 0, 0, false }

/* Collective.  Fails with -EINVAL on every rank (pg_last_error names the
 * first difference) when ranks disagree on the parameter list.  In live
 * mode on the world group before pg_state_register, a member's death
 * during that check is not an error here: the reducer is made and the
 * first collective after pg_state_register returns PG_ERR_PEER_LOST. */
PG_EXTERN int pg_reducer_create(pg_group *g, const struct pg_param_spec *p,
                                size_t n,
                                const struct pg_reducer_options *o,
                                pg_reducer **out);
PG_EXTERN void pg_reducer_destroy(pg_reducer *r);
/* Where parameter i's gradient lives (numel elements of its dtype). */
PG_EXTERN void *pg_reducer_grad(pg_reducer *r, size_t i);
/* Zeroes every gradient. */
PG_EXTERN int pg_reducer_zero_grad(pg_reducer *r);
/* Starts an iteration's backward pass; sync = false accumulates locally
 * without communicating (no_sync). */
PG_EXTERN int pg_reducer_prepare(pg_reducer *r, bool sync);
/* Parameter i's gradient is complete.  -EALREADY if marked twice in one
 * iteration. */
PG_EXTERN int pg_reducer_mark_ready(pg_reducer *r, size_t i);
/* Waits for every bucket; leaves averaged gradients in place. */
PG_EXTERN int pg_reducer_finish(pg_reducer *r);
/* Buckets as they are now: how many, and parameter i's bucket. */
PG_EXTERN size_t pg_reducer_num_buckets(const pg_reducer *r);
PG_EXTERN size_t pg_reducer_bucket_of(const pg_reducer *r, size_t i);

/* The bucket assignment alone (pure; for tests and tools): parameters
 * taken in order[0..n-1] (NULL: reverse registration order), grouped by
 * dtype, a bucket closed once it reaches its cap (the parameter that
 * crosses the cap stays in it), the first bucket of each dtype capped at
 * first_cap, the others at cap.  bucket_of[i] receives parameter i's
 * bucket; buckets are numbered in the order they are filled. */
PG_EXTERN int pg_bucket_assign(const struct pg_param_spec *p, size_t n,
                               const size_t *order, size_t first_cap,
                               size_t cap, size_t *bucket_of,
                               size_t *nbuckets);

/* ---- live recovery (cdrun --recovery=live) ------------------------------
 *
 * In live mode a failed worker is replaced alone and a lost node's ranks
 * leave the group; the survivors keep running.  A program takes part in
 * four calls:
 *
 *   pg_init(&o, &g);                      // opts in (CDRUN_LIVE_OPT_IN)
 *   make the model, pg_reducer_create(g, ...)  // a death: seen in the loop
 *   err = pg_state_register(g, bufs, n);  // a newcomer receives them here
 *   if (err == PG_ERR_PEER_LOST) err = recover(g);
 *   while (!err && step < steps) {        // step: in the registered state
 *     err = one_step(step);               // collectives, reducer, update
 *     if (!err) err = pg_membership_poll(g, &pending);  // a node joins
 *     if (err == PG_ERR_PEER_LOST || (!err && pending))
 *       err = recover(g);                 // healed: redo the step it says
 *   }                                     // err: give up, exit non-zero
 *
 *   recover(g): while ((err = pg_recover(g, &info)) == PG_ERR_PEER_LOST);
 *               then make the sub-groups again (pg_destroy above)
 *
 * A step leaves its registered state untouched until every collective
 * of the step has succeeded (the update comes last), so that a step cut
 * short is redone from the state the heal brings: the one before the
 * step, or after it when the healing rank had finished it.
 *
 *
 * A generation is one membership of the group, numbered from 0.  When a
 * member dies, every survivor's pending and later operations fail with
 * PG_ERR_PEER_LOST within the failure detector's time (a dead process
 * on this host: at once; a closed connection: at once; otherwise the
 * operation's timeout), never a hang.  pg_recover waits for the next
 * generation (the replacement of a dead worker, or the survivors of a
 * lost node, or them and a joining node's workers), rebuilds the
 * communicator for it, and heals: every registered buffer is sent from
 * one surviving rank to every rank (a broadcast, chunked and pipelined
 * as the all-reduce is), so that survivors that did and did not finish
 * the interrupted step agree again, and newcomers get the live state.
 * Sub-groups of an older generation fail every operation with
 * PG_ESTALE_GROUP.  Reducers (libpg(3), "Reducers after a recovery"):
 *
 * After pg_recover returns, every reducer is between iterations and
 * every gradient is zero, on every rank (the heal's source included),
 * whatever phase the failure interrupted: gradients written, added up
 * under no_sync, being reduced, or averaged and not yet used.  The
 * interrupted step, with its no_sync iterations, is redone from the
 * healed state.
 *
 * A reducer then averages over the new world.
 *
 * The handshake with cdrun (man cdrun, "LIVE RECOVERY"; a program that
 * does not use libpg can implement it): cdrun sets CDRUN_RECOVERY=live
 * and CDRUN_LIVE_OPT_IN=<path>; a worker opts in by creating that file
 * before its first collective.  pg_init does it.  A job with a worker
 * that has not opted in is recovered by restarting every worker. */

/* Whether the group runs in live mode ($CDRUN_RECOVERY=live at pg_init),
 * and whether this process joined a job already running (a replacement
 * or a joining node's worker: its state comes from pg_state_register). */
PG_EXTERN bool pg_live(const pg_group *g);
PG_EXTERN bool pg_joined_running(const pg_group *g);
/* Whether rank (of the group's current generation, the world group's)
 * is new to the group: a replacement or a joining node's worker, not a
 * member of the generation before; what pg_recover_info's joined
 * counts.  At the job's first generation, on sub-groups and outside live
 * mode: false. */
PG_EXTERN bool pg_rank_is_new(const pg_group *g, int rank);

/* One buffer of the program's state: parameters, optimizer state, the
 * step counter, RNG state.  Host memory on the CPU backends, device
 * memory on NCCL; the same sizes on every rank. */
struct pg_state_buf {
  void *ptr;
  size_t bytes;
};

/* Registers the buffers that make up this rank's state (once per group;
 * the array is copied, the buffers are not).  In live mode on a process
 * that joined a running job (pg_joined_running), collective with the
 * survivors' pg_recover: the reducers' bucket layouts and then the
 * buffers receive a survivor's state before it returns; such a process
 * must call it (n may be 0) after creating the same reducers as the
 * survivors, in the same order (its pg_reducer_create does not
 * communicate), and before any other collective.  PG_ERR_PEER_LOST when
 * a member died during it: call pg_recover.  Not live: records them,
 * nothing more.  -EINVAL on a bad argument or a second call; -EPROTO
 * when sizes or reducers differ from the survivors'; -ENODATA when the
 * live state is lost (as pg_recover's). */
PG_EXTERN int pg_state_register(pg_group *g, const struct pg_state_buf *b,
                                size_t n);

/* What pg_recover did. */
struct pg_recover_info {
  uint64_t generation;    /* the new generation */
  int rank, world;        /* this process's rank and the world now */
  int old_rank, old_world;
  int joined;             /* ranks new to the group (replacements and
                             joiners) */
  int left;               /* ranks that left for good, not replaced (a
                             lost node): old_world - world when
                             positive */
  int heal_source;        /* the rank whose state every rank now holds;
                             -1 when none did (-ENODATA) */
  double rebuild_s;       /* seconds waiting for the generation and
                             rebuilding the communicator */
  double heal_s;          /* seconds sending the state */
};

/* After PG_ERR_PEER_LOST, or when pg_membership_poll says a generation
 * is pending: joins the next generation, rebuilds the communicator and
 * heals the registered state (above).  Collective over the new
 * generation.  A failure during it (another death, even of the healing
 * rank) returns PG_ERR_PEER_LOST again: call it again.  -ETIMEDOUT when
 * no generation formed within the group's timeout (a store error as it
 * is: the live store is gone); -EPROTO when the live store holds a value
 * libpg did not write (the sentence names the key); -ENODATA when the
 * live state is lost: no member of the new generation holds a valid
 * state (every one that did died, one during a heal), so every member
 * fails alike, and once cdrun has replaced them all, a generation of
 * fresh processes starts over as the job did (pg_joined_running false).
 * After those, do not retry: exit non-zero; -ENOTSUP outside live
 * mode or on a sub-group (recover the world group; sub-groups made
 * before fail with PG_ESTALE_GROUP: make them again).  The group's
 * in-flight work fails first (waited for here).  info may be NULL. */
PG_EXTERN int pg_recover(pg_group *g, struct pg_recover_info *info);

/* At a step boundary: whether a new generation waits (a node joined the
 * job, or one left without this rank noticing yet).  Collective (one
 * small all-reduce), so every rank gets the same answer and all call
 * pg_recover together.  Not live: *pending = false at no cost. */
PG_EXTERN int pg_membership_poll(pg_group *g, bool *pending);

/* Progress heartbeat for cdrun --worker-heartbeat-timeout: touches the
 * file named by CDRUN_HEARTBEAT_FILE (a no-op returning 0 when unset).
 * Call it once per training step; a worker that goes longer than the
 * timeout without one is killed by cdrun as hung.  0 or a negative errno. */
PG_EXTERN int pg_heartbeat(void);

#ifdef __cplusplus
}
#endif
#endif
