/* number.h -- libpg's one number parser, for every number libpg reads
 * from text: environment variables (RANK, PG_TIMEOUT, PG_SHM_BUF, ...),
 * Slurm's task lists, /proc files and peers' endpoints.
 *
 * The rule: the whole string is the number (no blanks, nothing
 * trailing), an optional sign then decimal digits for integers, a finite
 * decimal (no inf, nan or hex) for reals; the value must lie in [lo, hi],
 * both ends included.
 *
 * Note [libpg's own copies]: this is the launcher's rule (launcher/num.c)
 * written again on purpose.  libpg is installed alone (libpg.so, pg.h and
 * nothing of cdrun's), so it links nothing of the launcher's; its copy is
 * hidden, like every internal symbol of libpg. */
#ifndef PG_NUMBER_H
#define PG_NUMBER_H

#include <stddef.h>

#include "pg_internal.h"

/* s[0..n) (n = strlen(s) for pg__number_long) as an integer in [lo, hi].
 * Returns 0, -EINVAL (not an integer) or -ERANGE (outside [lo, hi]);
 * *out is written only on success. */
PG__HIDDEN int pg__number_long(const char *s, long lo, long hi, long *out);
PG__HIDDEN int pg__number_long_n(const char *s, size_t n, long lo, long hi,
                                 long *out);

/* s as a size (no sign) in [lo, hi]; same returns. */
PG__HIDDEN int pg__number_size(const char *s, size_t lo, size_t hi,
                               size_t *out);

/* s as a finite decimal in [lo, hi]; same returns. */
PG__HIDDEN int pg__number_double(const char *s, double lo, double hi,
                                 double *out);

#endif
