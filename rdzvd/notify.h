/* notify.h -- systemd's readiness notification protocol, without
 * libsystemd: one datagram of "VAR=value" lines to $NOTIFY_SOCKET. */
#ifndef RDZVD_NOTIFY_H
#define RDZVD_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", "STATUS=...", newline-separated)
 * to the AF_UNIX datagram socket named by $NOTIFY_SOCKET: a path
 * ("/run/systemd/notify") or an abstract name ("@name").  Returns 1 when
 * sent, 0 when NOTIFY_SOCKET is unset or empty (not started by systemd),
 * or a negative errno. */
int notify_send(const char *state);

#endif
