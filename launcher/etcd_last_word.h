/* etcd_last_word.h -- an agent that dies by a signal it does not handle
 * (SIGSEGV, SIGABRT, SIGUSR1 when not in --signals_to_handle, ...) still
 * revokes its etcd lease, so that the other agents count it as lost at
 * once instead of one lease TTL later.
 *
 * Note [an agent's last word]: the revoke request is written out in full
 * while the agent runs (etcd_last_word_arm, after every renewal), and
 * the handler only sends it: socket, connect, write, poll, read, close
 * are async-signal-safe.  Then the signal does what it would have done.
 * The handler is installed only for signals whose disposition is still
 * the default (the agent's own handlers come first), and for the faults
 * (SIGSEGV, SIGABRT, ...) whatever handles them (a sanitizer's handler
 * runs next, as before); it does nothing in a process other than the
 * agent (a worker between fork and exec).
 * Plain http only: over TLS a crashed agent costs one lease TTL, as a
 * SIGKILLed one always does.  One agent per process: the prepared
 * request is this file's, because a signal handler has no other way to
 * find it. */
#ifndef CDRUN_ETCD_LAST_WORD_H
#define CDRUN_ETCD_LAST_WORD_H

/* Prepares the revoke of lease (decimal) at ip:port (numeric), with the
 * auth token ("" for none), and installs the handlers the first time.
 * Returns 0, or -EINVAL when the address or the request does not fit
 * (nothing armed then). */
int etcd_last_word_arm(const char *ip, int port, const char *lease,
                       const char *token);

/* Nothing to revoke any more (the agent revoked it, or is leaving). */
void etcd_last_word_disarm(void);

#endif
