/* multihost.h -- the head node: `cdrun --hostfile=FILE` / `--hosts=h1,h2`
 * starts one cdrun agent per host over OpenSSH with a shared rendezvous,
 * prefixes each host's output, forwards Ctrl-C/SIGTERM and exits with the
 * job's status.  The hosts come from hostfile.h; each remote agent runs
 * with --stdin_watchdog (stdin_watchdog.h). */
#ifndef CDRUN_MULTIHOST_H
#define CDRUN_MULTIHOST_H

#include "args.h"

/* Runs the job on every host; returns cdrun's exit status. */
int multihost_run(const struct cdrun_args *a, int argc, char **argv);

#endif
