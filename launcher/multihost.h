/* multihost.h -- the head node: `cdrun --hostfile=FILE` / `--hosts=h1,h2`
 * starts one cdrun agent per host over OpenSSH with a shared rendezvous,
 * prefixes each host's output, forwards Ctrl-C/SIGTERM and exits with the
 * job's status.  And the remote side's watchdog (--stdin_watchdog). */
#ifndef CDRUN_MULTIHOST_H
#define CDRUN_MULTIHOST_H

#include <stddef.h>

#include "args.h"

#define MULTIHOST_MAX_HOSTS 4096

struct mh_host {
  char name[256];
  int slots;                    /* slots=N, 0 when not given */
};

/* Parses a hostfile's text (mpirun/DeepSpeed style: "host [slots=N]" per
 * line, '#' comments, blank lines; "max_slots=N" is accepted too) or, with
 * is_list, a comma list "h1,h2".  Returns the count (>= 1) and a heap array
 * in *out, or -EINVAL with a message naming the line in err. */
int multihost_parse_hosts(const char *text, int is_list, struct mh_host **out,
                          char *err, size_t errlen);

/* Runs the job on every host; returns cdrun's exit status. */
int multihost_run(const struct cdrun_args *a, int argc, char **argv);

/* --stdin_watchdog: moves stdin away from the workers and sends this
 * process SIGTERM when it closes (the ssh connection to the head node is
 * gone).  Returns 0 or a negative errno (reported). */
int multihost_watchdog_start(void);

#endif
