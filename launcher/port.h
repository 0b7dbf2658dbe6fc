/* port.h -- a free TCP port for MASTER_PORT, held while the job runs. */
#ifndef CDRUN_PORT_H
#define CDRUN_PORT_H

#include <stddef.h>

/* Note [port reservation]: binding port 0 and closing the socket hands out
 * a port that another cdrun job on this host may get too before our rank 0
 * binds it.  Instead the agent keeps a socket bound to the port (SO_REUSEADDR,
 * never listening) for the whole job: the kernel gives that port to no other
 * bind(0), while our workers' servers, which set SO_REUSEADDR as TCPStore
 * and libpg do, can still bind and listen on it. */

/* Binds a socket to INADDR_ANY:0.  Returns the fd (close-on-exec) and the
 * port in *port, or a negative errno. */
int port_reserve(int *port);

/* The same for a given port (1..65535): live recovery's store port
 * (rdzvd/live_store.h), held so that no other bind(0) and no outgoing
 * connection's ephemeral port takes it.  Returns the fd, or a negative
 * errno: -EADDRINUSE when the port is taken, by a listener or by an
 * outgoing connection (TIME_WAIT included) that would keep a listener
 * off it. */
int port_reserve_at(int port);

/* Note [taken master port]: a --master_port that another process
 * listens on would let our rank-0 worker's store fail to bind while the
 * other ranks talk to the stranger until their timeout.  Linux's
 * /proc/net/tcp and tcp6 say whether any socket listens on port (any
 * address); /proc/<pid>/fd says whose it is where we may read it.
 * Returns 1 when one listens, with the holder's pid in *pid and its
 * command name in comm (pid 0 and "": /proc does not say, another user's
 * process); 0 when none does; a negative errno when /proc cannot be
 * read. */
int port_listener(int port, long *pid, char *comm, size_t commlen);

#endif
