/* launch_env.h -- a worker started without cdrun/torchrun, one process per
 * rank by `srun -n N ./train` or `mpirun -n N ./train`: RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT derived from
 * Slurm's or Open MPI's environment.  Private to libpg. */
#ifndef PG_LAUNCH_ENV_H
#define PG_LAUNCH_ENV_H

#include <stddef.h>

/* getenv(name) when set and not empty.  Otherwise, for the six names above
 * and only when RANK and WORLD_SIZE are both absent, the value Slurm's
 * (SLURM_PROCID, ...) or Open MPI's (OMPI_COMM_WORLD_RANK, ...)
 * environment implies, written into buf; NULL when there is none. */
const char *pg__launch_env(const char *name, char *buf, size_t len);

/* The first host of a Slurm hostlist ("n[07-09],m" -> "n07") into out;
 * 0, or -EINVAL when list is not a hostlist.  (cdrun's launcher/hostlist.c
 * expands whole lists; libpg needs only this and cannot link it.) */
int pg__hostlist_first(const char *list, char *out, size_t len);

/* The port every rank of a job agrees on: a hash of id into
 * [20000, 32000), below Linux's ephemeral range. */
int pg__agreed_port(const char *id);

#endif
