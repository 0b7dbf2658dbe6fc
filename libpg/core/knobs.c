/* knobs.c -- the table of libpg's environment knobs (knobs.h).
 *
 * Note [knobs]: every variable libpg reads is a row here, read once per
 * process and kept (as NCCL_PARAM does), so a value cannot change under
 * a running group and the documentation (man/libpg.3, ENVIRONMENT) has
 * one list to follow.  Parsing and range checks stay with the code that
 * uses a knob: it names the knob in its sentence. */
#include <pthread.h>
#include <stdlib.h>

#include "knobs.h"
#include "worker_contract.h"   /* the CDRUN_* names cdrun sets */

const struct pg__knob_def pg__knobs[PG_KNOB_COUNT] = {
  [PG_KNOB_TIMEOUT] = { "PG_TIMEOUT", "300",
    "seconds allowed to each operation and to setup" },
  [PG_KNOB_BACKEND] = { "PG_BACKEND", "cpu",
    "cpu or nccl, when pg_options.backend is PG_BACKEND_AUTO" },
  [PG_KNOB_HOST_ID] = { "PG_HOST_ID", "",
    "this process's host id (ranks with equal ids share memory); "
    "default: hostname and boot id" },
  [PG_KNOB_BUCKET_CAP_MB] = { "PG_BUCKET_CAP_MB", "25",
    "the reducer's bucket cap in MiB" },
  [PG_KNOB_FIRST_BUCKET_CAP_MB] = { "PG_FIRST_BUCKET_CAP_MB", "1",
    "the reducer's first bucket cap in MiB" },
  [PG_KNOB_SHM_BUF] = { "PG_SHM_BUF", "524288",
    "bytes of each shared-memory collective buffer (65536 .. 256 MiB / "
    "2 ranks)" },
  [PG_KNOB_NCCL_BLOCKING_WAIT] = { "PG_NCCL_BLOCKING_WAIT", "0",
    "1: NCCL waits block the host instead of ordering the stream" },
  [PG_KNOB_HEARTBEAT_FILE] = { WORKER_ENV_HEARTBEAT_FILE, "",
    "the file pg_heartbeat touches (set by cdrun)" },
  [PG_KNOB_TCP_SPIN_US] = { "PG_TCP_SPIN_US", "",
    "microseconds a TCP wait polls its sockets before it sleeps in "
    "poll() (0 .. 10000); default: 50 when this host's ranks of the "
    "communicator have a CPU each, else 0" },
  [PG_KNOB_JOB_TOKEN] = { WORKER_ENV_JOB_TOKEN, "",
    "the job's secret (set by cdrun): store clients and mesh peers must "
    "prove they know it" },
  [PG_KNOB_STORE_MAX_BYTES] = { "PG_STORE_MAX_BYTES", "1073741824",
    "bytes rank 0's store may hold: keys, values and every connection's "
    "buffers (1 MiB .. 1 TiB)" },
  [PG_KNOB_STORE_MAX_CONN_BYTES] = { "PG_STORE_MAX_CONN_BYTES",
    "268435456", "bytes one store request or reply may take (64 KiB .. "
    "PG_STORE_MAX_BYTES)" },
  [PG_KNOB_STORE_MAX_VALUE] = { "PG_STORE_MAX_VALUE", "67108864",
    "the largest value the store accepts (0 .. 64 MiB)" },
  [PG_KNOB_STORE_MAX_KEY] = { "PG_STORE_MAX_KEY", "4096",
    "the longest key the store accepts (1 .. 4096 bytes)" },
  [PG_KNOB_RECOVERY] = { WORKER_ENV_RECOVERY, WORKER_RECOVERY_RESTART,
    "live: live recovery (set by cdrun --recovery=live; man libpg, LIVE "
    "RECOVERY)" },
  [PG_KNOB_LIVE_OPT_IN] = { WORKER_ENV_LIVE_OPT_IN, "",
    "live mode: the file pg_init creates (with its pid) to opt in" },
  [PG_KNOB_LIVE_STORE] = { WORKER_ENV_LIVE_STORE, "",
    "live mode: host:port of the job's live store, used as the group's "
    "store (no rank serves MASTER_PORT)" },
  [PG_KNOB_LIVE_ROUND_FILE] = { WORKER_ENV_LIVE_ROUND_FILE, "",
    "live mode: the node's round file (round= world= rank_offset= "
    "local_world=); unset: round 0 of RANK and WORLD_SIZE" },
  [PG_KNOB_TEST_LIVE_KILL] = { "PG_TEST_LIVE_KILL", "",
    "tests only: heal:<generation>:<rank> kills that rank (SIGKILL) after "
    "its first chunk of that generation's heal, setup:<generation>:<rank> "
    "before it sets that generation's communicator up" },
  [PG_KNOB_TEST_MESH_HOLD] = { "PG_TEST_MESH_HOLD", "",
    "tests only: a path; this rank waits, with its TCP mesh listener "
    "open and before it publishes its endpoint, until the path exists "
    "(within the setup's deadline)" },
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *values[PG_KNOB_COUNT];

static void read_all(void)
{
  int k;

  for (k = 0; k < PG_KNOB_COUNT; k++) {
    const char *v = getenv(pg__knobs[k].name);

    values[k] = v && *v ? v : NULL;
  }
}

const char *pg__knob(enum pg__knob k)
{
  pthread_once(&once, read_all);
  return (unsigned)k < PG_KNOB_COUNT ? values[k] : NULL;
}

const char *pg__knob_name(enum pg__knob k)
{
  return (unsigned)k < PG_KNOB_COUNT ? pg__knobs[k].name : "?";
}
