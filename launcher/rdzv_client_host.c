/* rdzv_client_host.c -- the rdzvd back end's embedded server (Note
 * [embedded rendezvous]): whether this node hosts the rendezvous, and on
 * which address. */
#include "rdzv_client.h"
#include "rdzv_client_internal.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "say.h"
#include "server.h"

static void server_log(void *ctx, const char *line)
{
  (void)ctx;
  say("rdzv: %s", line);
}

static bool is_loopback_sa(const struct sockaddr *sa)
{
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >>
            24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

void rdzv_host_bind_addr(const char *host, const struct sockaddr *addr,
                         char *out, size_t outlen)
{
  unsigned char bin[sizeof(struct in6_addr)];
  bool literal = inet_pton(AF_INET, host, bin) == 1 ||
                 inet_pton(AF_INET6, host, bin) == 1;
  bool localhost_name = strcmp(host, "localhost") == 0 ||
                        strncmp(host, "localhost.", 10) == 0 ||
                        strcmp(host, "ip6-localhost") == 0 ||
                        strcmp(host, "ip6-loopback") == 0;

  out[0] = '\0';
  if (!literal && !localhost_name && is_loopback_sa(addr))
    return;                     /* this machine's own name: see above */
  if (addr->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, out,
              (socklen_t)outlen);
  else if (addr->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr,
              out, (socklen_t)outlen);
}

/* Note [embedded rendezvous]: a node whose endpoint names its own host
 * tries to serve the rendezvous itself, from the same state machine as
 * rdzvd.  Binding decides the race between agents on one host and a
 * daemon already there: whoever binds hosts, the others connect.  The
 * hosting agent stays up after its own job ends until every node has
 * left, so finishing first breaks nobody's exit barrier.  It listens on
 * the endpoint's own address (rdzv_host_bind_addr), never on more than
 * the endpoint names: a loopback endpoint stays loopback. */
void rdzv_client__maybe_host(struct rdzv_client *c)
{
  struct rdzvd_server_opts so;
  const char *lvl = getenv("LOGLEVEL");
  char err[256], bind_addr[INET6_ADDRSTRLEN];
  int rc;

  if (c->o.host_mode == RDZV_HOST_NEVER)
    return;
  if (c->o.host_mode == RDZV_HOST_AUTO && !rdzv_endpoint_is_local(c->host))
    return;
  memset(&so, 0, sizeof so);
  /* is_host=1 for a name that resolves elsewhere: the user knows this
   * machine is the host under another address, so every address. */
  if (c->o.host_mode == RDZV_HOST_ALWAYS && !rdzv_endpoint_is_local(c->host))
    bind_addr[0] = '\0';
  else
    rdzv_host_bind_addr(c->host, (const struct sockaddr *)&c->addr,
                        bind_addr, sizeof bind_addr);
  so.host = bind_addr;
  so.port = c->o.port;
  so.secret = &c->secret;
  so.embedded = true;
  if (lvl && (strcmp(lvl, "INFO") == 0 || strcmp(lvl, "DEBUG") == 0))
    so.log = server_log;
  rc = rdzvd_server_start(c->base.loop, &so, &c->server, err, sizeof err);
  if (rc == 0) {
    c->open_handles++;
    say("hosting the rendezvous for '%s' on %s%s%s:%d", c->id,
        strchr(bind_addr, ':') ? "[" : "", bind_addr[0] ? bind_addr : "*",
        strchr(bind_addr, ':') ? "]" : "", rdzvd_server_port(c->server));
    if (c->o.port == 0) {
      c->o.port = rdzvd_server_port(c->server);
      if (c->addr.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&c->addr)->sin6_port =
            htons((uint16_t)c->o.port);
      else
        ((struct sockaddr_in *)&c->addr)->sin_port =
            htons((uint16_t)c->o.port);
    }
  } else if (rc != UV_EADDRINUSE) {
    say("cannot host the rendezvous (%s); joining as a client", err);
  }
}

bool rdzv_endpoint_is_local(const char *host)
{
  struct addrinfo hints, *res, *ai;
  struct ifaddrs *ifs, *i;
  char name[256];
  bool local = false;

  if (strcmp(host, "localhost") == 0)
    return true;
  if (gethostname(name, sizeof name) == 0 && strcmp(name, host) == 0)
    return true;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, NULL, &hints, &res) != 0)
    return false;
  if (getifaddrs(&ifs) != 0)
    ifs = NULL;
  for (ai = res; ai && !local; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;

      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
        local = true;
      for (i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                a->sin_addr.s_addr)
          local = true;
    } else if (ai->ai_family == AF_INET6) {
      const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ai->ai_addr;

      if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
        local = true;
      for (i = ifs; i && !local; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 &&
            memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                   &a->sin6_addr, sizeof a->sin6_addr) == 0)
          local = true;
    }
  }
  if (ifs)
    freeifaddrs(ifs);
  freeaddrinfo(res);
  return local;
}

