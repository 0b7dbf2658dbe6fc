/* knobs.h -- libpg's environment knobs: one table (knobs.c) of every
 * variable libpg reads, with its default and meaning, as NCCL's
 * NCCL_PARAM.  The launcher's variables (RANK, MASTER_ADDR, ...) are
 * launch_env.c's. */
#ifndef PG_KNOBS_H
#define PG_KNOBS_H

#include "pg_internal.h"

enum pg__knob {
  PG_KNOB_TIMEOUT,
  PG_KNOB_BACKEND,
  PG_KNOB_HOST_ID,
  PG_KNOB_BUCKET_CAP_MB,
  PG_KNOB_FIRST_BUCKET_CAP_MB,
  PG_KNOB_SHM_BUF,
  PG_KNOB_NCCL_BLOCKING_WAIT,
  PG_KNOB_HEARTBEAT_FILE,
  PG_KNOB_TCP_SPIN_US,
  PG_KNOB_JOB_TOKEN,
  PG_KNOB_STORE_MAX_BYTES,
  PG_KNOB_STORE_MAX_CONN_BYTES,
  PG_KNOB_STORE_MAX_VALUE,
  PG_KNOB_STORE_MAX_KEY,
  PG_KNOB_RECOVERY,
  PG_KNOB_LIVE_OPT_IN,
  PG_KNOB_LIVE_STORE,
  PG_KNOB_LIVE_ROUND_FILE,
  PG_KNOB_TEST_LIVE_KILL,
  PG_KNOB_TEST_MESH_HOLD,
  PG_KNOB_COUNT
};

struct pg__knob_def {
  const char *name;     /* the variable */
  const char *dflt;     /* the default, as text ("" : none) */
  const char *doc;      /* one line */
};

/* The table, indexed by enum pg__knob. */
PG__HIDDEN extern const struct pg__knob_def pg__knobs[PG_KNOB_COUNT];

/* The knob's value, read from the environment once per process (the
 * first call of any knob reads them all); NULL when unset or empty. */
PG__HIDDEN const char *pg__knob(enum pg__knob k);
/* Its variable's name, for sentences. */
PG__HIDDEN const char *pg__knob_name(enum pg__knob k);

#endif
