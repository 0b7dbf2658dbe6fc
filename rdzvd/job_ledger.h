/* job_ledger.h -- what rdzvd keeps of each job across its lives, beside
 * its token key file (Note [job ledger], rdzv_state.h): a folder PATH.jobs
 * (mode 700) holding one small file per job, named by the SHA-256 of the
 * job id, with the job's incarnation and the last round and restart count
 * it issued.  Written whole and durably (a temporary file, fsync, rename,
 * fsync of the folder: Note [ledger writes], job_ledger.c) when a job is
 * created and at every ROUND, removed when the job is forgotten. */
#ifndef JOB_LEDGER_H
#define JOB_LEDGER_H

#include <stddef.h>

#include "rdzv_state.h"

struct job_ledger;

/* Opens (creating it, mode 700) the folder key_file.jobs: it must be a
 * folder, not a link, owned by this user and closed to others.  0 and
 * *out, or a negative errno with a sentence naming the folder in err. */
int job_ledger_open(const char *key_file, struct job_ledger **out,
                    char *err, size_t errlen);
void job_ledger_close(struct job_ledger *l);

/* The state machine's calls (rdzv_state_set_ledger) over l.  A failed
 * write is logged through log (ctx) once per job and errno, and leaves
 * the job's claims unprovable after a restart: never a crash. */
struct rdzv_ledger job_ledger_calls(struct job_ledger *l,
                                    void (*log)(void *ctx, const char *line),
                                    void *log_ctx);

/* The same calls, for tests: 0, -ENOENT, -EPROTO (a file that is not a
 * whole record) or another negative errno; get does not log. */
int job_ledger_get(struct job_ledger *l, const char *job,
                   struct rdzv_ledger_rec *out);
int job_ledger_put(struct job_ledger *l, const char *job,
                   const struct rdzv_ledger_rec *rec);
int job_ledger_drop(struct job_ledger *l, const char *job);

#endif
