/* hostlist.h -- Slurm's hostlist syntax: "n[01-04,07],gpu-a[1-2]",
 * "rack[1-2]-node[01-02]".  Expanded the way `scontrol show hostnames`
 * expands it (same names, same order). */
#ifndef CDRUN_HOSTLIST_H
#define CDRUN_HOSTLIST_H

#include <stddef.h>

/* Longest host name we produce (DNS names are at most 253). */
#define HOSTLIST_MAX_NAME 255

/* Expands list into a heap array of *count heap strings (free with
 * hostlist_free).  Items are separated by commas or blanks outside
 * brackets; inside brackets, commas separate numbers and lo-hi ranges,
 * zero-padded to the width of lo.  Several brackets in one item multiply
 * (Slurm's order); text after the last bracket is refused, as Slurm does.
 * More than max_hosts names is -E2BIG; bad syntax is -EINVAL; both write a
 * one-line message naming the problem into err. */
int hostlist_expand(const char *list, size_t max_hosts, char ***hosts,
                    size_t *count, char *err, size_t errlen);

/* The first host of list without expanding the rest (a range of a million
 * names costs nothing here).  The whole list is still checked.  Returns 0,
 * or -EINVAL with a message in err; an empty list is -EINVAL too. */
int hostlist_first(const char *list, char *out, size_t outlen, char *err,
                   size_t errlen);

void hostlist_free(char **hosts, size_t count);

#endif
