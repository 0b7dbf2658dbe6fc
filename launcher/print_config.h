/* print_config.h -- `cdrun --print-config`: every setting, its value and
 * where it came from (flag, PET_* environment, Slurm, default). */
#ifndef CDRUN_PRINT_CONFIG_H
#define CDRUN_PRINT_CONFIG_H

#include <stdio.h>

#include "args.h"
#include "rdzv_config.h"
#include "slurm_env.h"

/* nproc is the resolved worker count, nproc_from what decided it. */
void print_config(FILE *f, const struct cdrun_args *a, char *const *env,
                  const struct slurm_env *s, const struct rdzv_config *c,
                  int nproc, const char *nproc_from);

#endif
