/* hostfile.h -- the hosts a head node starts agents on: `--hostfile=FILE`
 * (mpirun/DeepSpeed style) or `--hosts=h1,h2` (multihost.h runs them).
 *
 * A host name is what ssh is given ("node1", "user@node3", "10.0.0.4",
 * "[fe80::1%eth0]"): letters, digits and "._-@:[]%", never starting with
 * '-' (it would be an ssh option).  Every error is -EINVAL with a one-line
 * message naming the flag and the line or entry. */
#ifndef CDRUN_HOSTFILE_H
#define CDRUN_HOSTFILE_H

#include <stddef.h>

#define HOSTFILE_MAX_HOSTS 4096

struct hostfile_host {
  char name[256];
  int slots;                    /* slots=N, 0 when not given */
};

/* Parses a hostfile's text ("host [slots=N]" per line, '#' comments,
 * blank lines; "max_slots=N" is accepted too; N a number as num.h reads
 * it, 1 <= N <= NUM_NPROC_MAX) or, with is_list, a comma list "h1,h2".
 * Returns the count (>= 1) and a heap array in *out, or -EINVAL (*out
 * NULL) with a message naming the line in err. */
int hostfile_parse(const char *text, int is_list, struct hostfile_host **out,
                   char *err, size_t errlen);

/* The text of the hostfile at path (heap, NUL-terminated; at most 1 MiB,
 * no NUL byte in it), or NULL with the reason in err. */
char *hostfile_read(const char *path, char *err, size_t errlen);

#endif
