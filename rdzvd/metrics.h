/* metrics.h -- rdzvd's counters, and their Prometheus text exposition
 * (format 0.0.4).
 *
 * One struct of plain counters, owned by the daemon and bumped by the
 * server and the state machine through the functions below.  Every bump
 * takes NULL and then does nothing: the server embedded in cdrun keeps no
 * metrics.  Single-threaded, like the loop that owns it. */
#ifndef RDZVD_METRICS_H
#define RDZVD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "rdzv_proto.h"

/* Upper bounds (seconds) of the round completion time histogram; a last
 * +Inf bucket is implied. */
#define METRICS_ROUND_BUCKETS 14

/* Refusal reasons are RDZV_PROTO_ERROR codes; index 0 counts codes not
 * known. */
#define METRICS_REFUSAL_CODES 16

/* Phases of a job, as rdzv_state_jobs_by_phase counts them. */
#define METRICS_PHASES 5

struct rdzvd_metrics {
  uint64_t rounds_completed;
  uint64_t restarts;            /* restart_count increments (failures) */
  uint64_t joins;               /* JOIN requests received */
  uint64_t refusals[METRICS_REFUSAL_CODES];   /* ERROR sent, by code */
  uint64_t auth_failures;
  uint64_t connections_accepted;
  int64_t connections_open;
  uint64_t bytes_in, bytes_out;
  uint64_t frame_errors;        /* frames the codec refused */
  uint64_t reconnects;          /* agents that re-asserted a running job */
  uint64_t round_buckets[METRICS_ROUND_BUCKETS + 1];  /* not cumulative */
  double round_seconds_sum;
  uint64_t round_count;
  double start_time;            /* Unix time the daemon started */
};

/* What only the registry knows, read at scrape time. */
struct metrics_gauges {
  int jobs_by_phase[METRICS_PHASES];
  const char *phase_names[METRICS_PHASES];
  int nodes;
  int peers;                    /* Note [tenant share] */
  uint64_t peer_refused_jobs, peer_refused_waiting, peer_refused_conns;
};

void metrics_init(struct rdzvd_metrics *m);

/* One round completed, seconds after it started (its job's creation for
 * round 0, the RESTART that began it otherwise). */
void metrics_round_completed(struct rdzvd_metrics *m, double seconds);
void metrics_restart(struct rdzvd_metrics *m);
void metrics_join(struct rdzvd_metrics *m);
void metrics_refusal(struct rdzvd_metrics *m, enum rdzv_proto_error_code code);
void metrics_auth_failure(struct rdzvd_metrics *m);
void metrics_reconnect(struct rdzvd_metrics *m);
void metrics_conn_opened(struct rdzvd_metrics *m);
void metrics_conn_closed(struct rdzvd_metrics *m);
void metrics_bytes_in(struct rdzvd_metrics *m, size_t n);
void metrics_bytes_out(struct rdzvd_metrics *m, size_t n);
void metrics_frame_error(struct rdzvd_metrics *m);

/* The whole exposition as text (a malloc'd string of *len bytes, NUL
 * terminated).  Returns 0 or -ENOMEM. */
int metrics_render(const struct rdzvd_metrics *m,
                   const struct metrics_gauges *g, char **out, size_t *len);

#endif
