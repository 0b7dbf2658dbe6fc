/* device.c -- which CUDA device a rank uses.
 *
 * Note [device rule]: an explicit pg_options.device is taken as is.
 * Otherwise a process that sees one device (CUDA_VISIBLE_DEVICES set to
 * one GPU per worker, as Slurm and many launchers do) uses device 0
 * whatever its LOCAL_RANK, and one that sees several uses LOCAL_RANK
 * modulo their number (every worker sees the node's GPUs: worker i takes
 * GPU i; more workers than GPUs share them round robin). */
#include "pg_internal.h"

int pg__pick_device(int requested, int local_rank, int ndev)
{
  if (requested >= 0)
    return requested;
  if (ndev <= 1)
    return 0;
  if (local_rank < 0)
    local_rank = 0;
  return local_rank % ndev;
}
