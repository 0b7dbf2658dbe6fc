/* num.h -- the one number parser and its bounds, for cdrun, rdzvd and
 * libpg (which compiles this file in: Note [libpg's own copies] in the
 * Makefile).
 *
 * One rule for every number a user types (flags, PET_* variables,
 * --rdzv_conf values, rank specs, rdzvd's limits, libpg's environment,
 * Slurm's task lists, /proc files): the whole string is the number (no
 * blanks, nothing trailing), an optional sign then decimal digits for
 * integers, a finite decimal (no inf, nan or hex) for reals; the value must
 * lie in [lo, hi], both ends included.  Each bound lives here once. */
#ifndef UTIL_NUM_H
#define UTIL_NUM_H

#include <stddef.h>
#include <stdint.h>

/* --nproc_per_node: the most workers one agent supervises. */
#define NUM_NPROC_MAX 65536
/* Any duration in seconds (grace period, rendezvous timeouts): about 115
 * days, far beyond any use and far from overflowing a uint64 of ms. */
#define NUM_SECONDS_MAX 1e7

/* s[0..n) (n = strlen(s) for num_parse_long) as an integer in [lo, hi].
 * Returns 0, -EINVAL (not an integer) or -ERANGE (outside [lo, hi]);
 * *out is written only on success. */
int num_parse_long(const char *s, long lo, long hi, long *out);
int num_parse_long_n(const char *s, size_t n, long lo, long hi, long *out);

/* s[0..n) as an int64 in [lo, hi], with any number of digits (leading
 * zeros included); same returns.  For numbers stored as text (rdzvd's
 * KV ADD counters). */
int num_parse_i64_n(const char *s, size_t n, int64_t lo, int64_t hi,
                    int64_t *out);

/* s as a finite decimal in [lo, hi]; same returns. */
int num_parse_double(const char *s, double lo, double hi, double *out);

/* s as a byte count in [lo, hi]: decimal digits, then optionally K, M or
 * G (either case: powers of 1024).  Same returns. */
int num_parse_size(const char *s, size_t lo, size_t hi, size_t *out);

/* s as a plain count (decimal digits only: no sign, no suffix) in
 * [lo, hi], up to SIZE_MAX; same returns.  For libpg's byte counts
 * (PG_SHM_BUF, the store's budgets), which take no K/M/G. */
int num_parse_count(const char *s, size_t lo, size_t hi, size_t *out);

#endif
