/* port.h -- a free TCP port for MASTER_PORT, held while the job runs. */
#ifndef CDRUN_PORT_H
#define CDRUN_PORT_H

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
 * (launcher/live_store.h), held so that no other bind(0) and no outgoing
 * connection's ephemeral port takes it.  Returns the fd, or a negative
 * errno: -EADDRINUSE when the port is taken, by a listener or by an
 * outgoing connection (TIME_WAIT included) that would keep a listener
 * off it. */
int port_reserve_at(int port);

#endif
