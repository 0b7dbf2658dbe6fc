/* store_server.c -- the store server's transport: one epoll thread
 * serving every connection (protocol: store_wire.h), handshakes,
 * reading, writing and deadlines (util's timer heap); whole frames go to
 * the commands (store_commands.c: the keys, in a hash table,
 * store_table.h).  store_server.h holds what the two share.
 *
 * Note [store budget]: with a job token nothing but the handshake is read
 * from a connection until it has proved the token (auth.h), and a
 * stranger's connection holds a few hundred bytes for at most
 * ST_HANDSHAKE_S, ST_MAX_PREAUTH of them at once (past that, one that
 * sent nothing makes room: Note [admission under a flood], admit.c).
 * Past it, every byte the server holds for a client is counted: the keys
 * and values of the table, each connection's input and output buffers,
 * and ST_CONN_COST for each proven connection (a handshake the budget has
 * no room for is answered OVER_BUDGET and closed).  A request whose frame would take its connection past
 * max_conn, or the whole past max_bytes, is answered OVER_BUDGET as soon
 * as its header is read, and its bytes are read and dropped as they come,
 * so the connection stays in step (a connection's input is at most its
 * head frame and one ST_READ_SLICE behind it).  So is a write or a reply
 * that would take the whole past max_bytes.  The client gets an error
 * naming the budget; the server and every other client go on. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admit.h"
#include "auth.h"
#include "knobs.h"
#include "num.h"
#include "pg_internal.h"
#include "store_table.h"
#include "store_wire.h"
#include "store_server.h"
#include "timer_heap.h"

/* ---- timers ----
 * Each connection's one deadline (its handshake's, its wait's or its
 * linger's) is a node of proto/util's timer heap (Note [libpg's own
 * copies] in the Makefile), reserved while the connection lives, so
 * arming never fails. */

static struct store_conn *conn_of_timer(struct timer_heap_node *t)
{
  return (struct store_conn *)((char *)t -
                               offsetof(struct store_conn, timer));
}

/* A connection closed (or never served): its memory and its timer's
 * room. */
static void conn_free(struct pg_store_server *srv, struct store_conn *c)
{
  timer_heap_clear(&srv->timers, &c->timer);
  timer_heap_unreserve(&srv->timers, 1);
  free(c);
}

/* ---- connections ---- */

void pg__st_resume(struct pg_store_server *srv, struct store_conn *c)
{
  if (c->in_resume)
    return;
  c->in_resume = true;
  c->resume_next = srv->resume;
  srv->resume = c;
}

/* Every byte held for clients (Note [store budget]). */
size_t pg__st_used(const struct pg_store_server *srv)
{
  return srv->stored + srv->keys.key_bytes +
         srv->keys.nentries * ST_ENTRY_COST + srv->buffered;
}

/* The budget has room for extra more bytes. */
bool pg__st_room(const struct pg_store_server *srv, size_t extra)
{
  size_t used = pg__st_used(srv);

  return used <= srv->max_bytes && extra <= srv->max_bytes - used;
}

/* Keeps srv->buffered equal to the sum of the connections' buffers. */
static void conn_charge(struct pg_store_server *srv, struct store_conn *c)
{
  size_t now = c->dead ? 0 : c->in.cap + c->out.cap +
                             (c->auth == CA_READY ? ST_CONN_COST : 0);

  srv->buffered = srv->buffered - c->charge + now;
  c->charge = now;
}


/* c has proved the token, or failed to, or closes: it no longer counts
 * among the connections proving it. */
static void preauth_end(struct pg_store_server *srv, struct store_conn *c)
{
  if (!c->in_preauth_list)
    return;
  TAILQ_REMOVE(&srv->preauth, c, in_preauth);
  c->in_preauth_list = false;
  srv->npreauth--;
  /* Its handshake deadline. */
  timer_heap_clear(&srv->timers, &c->timer);
}

static void conn_close(struct pg_store_server *srv, struct store_conn *c)
{
  if (c->dead)
    return;
  pg__st_unwait(srv, c);
  timer_heap_clear(&srv->timers, &c->timer);
  preauth_end(srv, c);
  epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->fd = -1;
  LIST_REMOVE(c, in_server);
  stw_buf_free(&c->in);
  stw_buf_free(&c->out);
  /* Events of this batch may still name c: free it after the batch. */
  c->dead = true;
  conn_charge(srv, c);
  c->dead_next = srv->dead;
  srv->dead = c;
}

/* A frame we cannot parse: say so, then close once the reply is out (or
 * after ST_LINGER), reading and dropping what still comes so the close
 * does not reset the connection before the peer reads the reply. */
void pg__st_reject(struct pg_store_server *srv, struct store_conn *c,
                          uint32_t id)
{
  if (id || c->auth == CA_READY)
    pg__st_status(srv, c, id, ST_MALFORMED);
  preauth_end(srv, c);
  c->closing = true;
  c->in.off = c->in.len = 0;
  c->skip = 0;
  timer_heap_clear(&srv->timers, &c->timer);
  timer_heap_set(&srv->timers, &c->timer, pg__now() + ST_LINGER);
  pg__st_resume(srv, c);
}


/* The handshake bytes c still owes us in its present step. */
static size_t handshake_left(const struct store_conn *c)
{
  size_t want = c->auth == CA_HELLO ? ST_HELLO_BYTES : PG_MAC_BYTES;
  size_t have = stw_buf_used(&c->in);

  return have < want ? want - have : 0;
}

/* One step of c's handshake (store_wire.h) on what it sent: false when
 * it must wait for more, or was refused. */
static bool conn_handshake(struct pg_store_server *srv, struct store_conn *c)
{
  const uint8_t *p = c->in.p + c->in.off;
  size_t avail = stw_buf_used(&c->in);
  uint8_t mac[PG_MAC_BYTES];

  if (c->auth == CA_HELLO) {
    if (avail >= 4 && memcmp(p, stw_hello, 4)) {
      stw_buf_put(&c->out, stw_hello, 4);   /* what we speak, then close */
      pg__st_reject(srv, c, 0);
      return false;
    }
    if (avail < ST_HELLO_BYTES)
      return false;
    memcpy(c->nc, p + 4, PG_NONCE_BYTES);
    c->in.off += ST_HELLO_BYTES;
    pg__nonce(c->ns, PG_NONCE_BYTES);
    stw_buf_put(&c->out, stw_hello, 4);
    stw_buf_u8(&c->out, srv->token.len ? ST_AUTH_TOKEN : ST_AUTH_NONE);
    stw_buf_put(&c->out, c->ns, PG_NONCE_BYTES);
    if (!srv->token.len) {
      preauth_end(srv, c);
      c->auth = CA_READY;
    } else {
      c->auth = CA_PROOF;
    }
    return true;
  }
  if (avail < PG_MAC_BYTES)
    return false;
  if (!pg__auth_check(&srv->token, ST_LABEL_CLIENT, NULL, 0, c->nc, c->ns,
                      p)) {
    memset(mac, 0, sizeof mac);
    stw_buf_u8(&c->out, ST_AUTH_FAILED);
    stw_buf_put(&c->out, mac, sizeof mac);
    pg__st_reject(srv, c, 0);
    return false;
  }
  c->in.off += PG_MAC_BYTES;
  if (!pg__st_room(srv, ST_CONN_COST)) {
    /* Proven, but the budget holds no more connections: told so. */
    memset(mac, 0, sizeof mac);
    stw_buf_u8(&c->out, ST_OVER_BUDGET);
    stw_buf_put(&c->out, mac, sizeof mac);
    pg__st_reject(srv, c, 0);
    return false;
  }
  pg__auth_mac(&srv->token, ST_LABEL_SERVER, NULL, 0, c->nc, c->ns, mac);
  stw_buf_u8(&c->out, ST_OK);
  stw_buf_put(&c->out, mac, sizeof mac);
  preauth_end(srv, c);
  c->auth = CA_READY;
  conn_charge(srv, c);
  return true;
}

/* The head frame of c (len bytes after its length; avail buffered) fits
 * the budgets; otherwise it is refused, its bytes dropped as they come
 * (Note [store budget]). */
static bool frame_admit(struct pg_store_server *srv, struct store_conn *c,
                        const uint8_t *p, size_t avail, uint32_t len)
{
  size_t need = 4 + (size_t)len, used = pg__st_used(srv) - c->charge, take;
  uint32_t id = stw_get_u32(p + 5);

  if (need > srv->max_conn)
    pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "a request of %zu bytes is "
                  "over rank 0's per-connection budget of %zu bytes "
                  "(PG_STORE_MAX_CONN_BYTES)", need, srv->max_conn);
  else if (used > srv->max_bytes || need > srv->max_bytes - used)
    pg__st_refuse(srv, c, id, ST_OVER_BUDGET, "a request of %zu bytes "
                  "would take rank 0's store past its budget of %zu bytes "
                  "(PG_STORE_MAX_BYTES; %zu in use)", need, srv->max_bytes,
                  used);
  else
    return true;
  take = avail < need ? avail : need;
  c->in.off += take;
  c->skip = need - take;
  return false;
}

/* Serves the complete requests buffered on c, in order, until one waits
 * or the output backs up. */
static void conn_serve(struct pg_store_server *srv, struct store_conn *c)
{
  while (!c->waiting && !c->closing && !c->out.oom &&
         stw_buf_used(&c->out) < ST_OUT_HIGH) {
    const uint8_t *p = c->in.p + c->in.off;
    size_t avail = stw_buf_used(&c->in);
    uint32_t len;

    if (c->skip)
      break;
    if (c->auth != CA_READY) {
      if (!conn_handshake(srv, c))
        break;
      continue;
    }
    if (avail < 4)
      break;
    len = stw_get_u32(p);
    if (len < 5 || len > ST_MAX_FRAME) {
      pg__st_reject(srv, c, avail >= 9 ? stw_get_u32(p + 5) : 0);
      break;
    }
    if (avail < 9)
      break;
    if (!c->admitted) {
      if (!frame_admit(srv, c, p, avail, len))
        continue;
      c->admitted = true;
    }
    if (avail - 4 < len)
      break;
    /* Nothing below reads c->in, so the frame can be used in place. */
    c->in.off += 4 + (size_t)len;
    c->admitted = false;
    pg__st_serve(srv, c, p + 4, len);
  }
  if (stw_buf_used(&c->in) == 0)
    stw_buf_clear(&c->in);
}

/* Reads what c has for us.  Returns -1 when c must close. */
static int conn_read(struct store_conn *c)
{
  size_t total = 0;

  while (total < ST_READ_SLICE) {
    size_t want = 65536;
    ssize_t n;

    /* A big frame grows the buffer by doubling as its bytes arrive, not
     * by trusting its header up front. */
    if (c->closing) {
      c->in.off = c->in.len = 0;
    } else if (c->auth != CA_READY) {
      /* Before the token is proved: the handshake's bytes, no more. */
      want = handshake_left(c);
      if (want == 0)
        return 0;
    }
    if (!stw_buf_reserve(&c->in, want))
      return -1;
    n = recv(c->fd, c->in.p + c->in.len, c->auth != CA_READY && !c->closing
             ? want : c->in.cap - c->in.len, 0);
    if (n > 0) {
      c->in.len += (size_t)n;
      total += (size_t)n;
      if (c->skip) {        /* a refused frame's bytes */
        size_t drop = stw_buf_used(&c->in) < c->skip
                    ? stw_buf_used(&c->in) : c->skip;

        c->in.off += drop;
        c->skip -= drop;
        if (stw_buf_used(&c->in) == 0)
          c->in.off = c->in.len = 0;
      }
    } else if (n == 0) {
      c->eof = true;
      return c->closing ? -1 : 0;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    } else {
      return -1;
    }
  }
  return 0;
}

static int conn_flush(struct store_conn *c)
{
  while (stw_buf_used(&c->out) > 0) {
    ssize_t n = send(c->fd, c->out.p + c->out.off, stw_buf_used(&c->out),
                     MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n > 0)
      c->out.off += (size_t)n;
    else if (n < 0 && errno == EINTR)
      continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    else
      return -1;
  }
  stw_buf_clear(&c->out);
  return 0;
}

/* After anything happened to c: serve, write, close or re-arm epoll. */
static void conn_progress(struct pg_store_server *srv, struct store_conn *c)
{
  uint32_t want;

  for (;;) {
    bool backed_up;

    conn_serve(srv, c);
    backed_up = stw_buf_used(&c->out) >= ST_OUT_HIGH;
    if (c->out.oom || conn_flush(c) < 0)
      return conn_close(srv, c);
    if (!backed_up || stw_buf_used(&c->out) >= ST_OUT_HIGH || c->waiting ||
        c->closing)
      break;
  }
  if (c->closing && !c->shut && stw_buf_used(&c->out) == 0) {
    shutdown(c->fd, SHUT_WR);
    c->shut = true;
  }
  /* A peer that hung up gets the replies to what it sent, then we close;
   * one that hung up while waiting is gone. */
  if (c->eof && (c->waiting || c->closing || stw_buf_used(&c->out) == 0))
    return conn_close(srv, c);
  conn_charge(srv, c);
  want = 0;
  if (!c->eof) {
    want |= EPOLLRDHUP;
    if (c->closing || (!c->waiting && stw_buf_used(&c->out) < ST_OUT_HIGH))
      want |= EPOLLIN;
  }
  if (stw_buf_used(&c->out) > 0)
    want |= EPOLLOUT;
  if (want != c->events) {
    struct epoll_event ev = { .events = want, .data.ptr = c };

    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
      return conn_close(srv, c);
    c->events = want;
  }
}

static void conn_event(struct pg_store_server *srv, struct store_conn *c,
                       uint32_t ev)
{
  if (c->dead)
    return;
  if ((ev & (EPOLLERR | EPOLLHUP)) || ((ev & EPOLLRDHUP) && c->waiting))
    return conn_close(srv, c);
  if ((ev & (EPOLLIN | EPOLLRDHUP)) && conn_read(c) < 0)
    return conn_close(srv, c);
  conn_progress(srv, c);
}

/* True when c's peer sent bytes not read yet: a client in its
 * handshake, not an idle stranger. */
static bool has_input(const struct store_conn *c)
{
  char b;

  return c->in.len > c->in.off ||
         recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

/* How many of the oldest unproven connections a full table weighs. */
#define ST_EVICT_WINDOW 32

/* Too many strangers proving nothing: one makes room (Note [admission
 * under a flood], admit.c).  Of the ST_EVICT_WINDOW oldest, those that
 * sent nothing, not even a hello (accepting the backlog comes before
 * reading it, so a client's handshake may wait in the kernel; and one
 * whose hello was answered is computing its proof, as the mesh never
 * closes one past its hello): one past its deadline, else the oldest of
 * the address that holds the most.  If every one of them is talking, the
 * oldest. */
static void preauth_evict(struct pg_store_server *srv)
{
  struct pg__unproven u[ST_EVICT_WINDOW];
  struct store_conn *who[ST_EVICT_WINDOW], *c;
  int n = 0, seen = 0;

  TAILQ_FOREACH(c, &srv->preauth, in_preauth) {
    if (seen++ == ST_EVICT_WINDOW)
      break;
    if (c->auth != CA_HELLO || has_input(c))
      continue;
    u[n] = c->u;
    who[n++] = c;
  }
  if (!n)
    conn_close(srv, TAILQ_FIRST(&srv->preauth));
  else
    conn_close(srv, who[pg__admit_victim(u, sizeof u[0], 0, n,
                                         pg__now())]);
}

/* Takes at most ST_ACCEPT_PASS waiting connections per wakeup (Note
 * [admission under a flood]): the listener is level-triggered, so the
 * rest wait for the next pass, and the proven clients' requests are
 * served in between.  Draining the whole backlog at once let a flood
 * that refills it as fast as it is drained keep this thread accepting and
 * evicting: the job's own requests went unanswered past their slice's
 * deadline (the client drops such a connection), and live formation
 * failed ("cannot read live/next: a peer closed its connection"). */
#define ST_ACCEPT_PASS (ST_MAX_PREAUTH / 2)
static void srv_accept(struct pg_store_server *srv)
{
  for (int n = 0; n < ST_ACCEPT_PASS; n++) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(srv->lfd, (struct sockaddr *)&sa, &sl,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    int one = 1;
    struct store_conn *c;
    struct epoll_event ev;

    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        /* Out of fds or memory: the listener stays readable, so stop
         * watching it for a moment instead of spinning. */
        struct epoll_event ev0 = { .events = 0, .data.ptr = &srv->lfd };

        if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev0) == 0)
          srv->accept_resume = pg__now() + 0.1;
      }
      return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c = calloc(1, sizeof *c);
    if (!c || timer_heap_reserve(&srv->timers, 1)) {
      close(fd);
      free(c);
      continue;
    }
    c->fd = fd;
    timer_heap_node_init(&c->timer, 0);
    c->events = EPOLLIN | EPOLLRDHUP;
    c->u.src = pg__admit_source((struct sockaddr *)&sa, sl);
    c->u.since = pg__now();
    c->u.until = c->u.since + ST_HANDSHAKE_S;
    timer_heap_set(&srv->timers, &c->timer, c->u.until);
    ev.events = c->events;
    ev.data.ptr = c;
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
      conn_free(srv, c);
      close(fd);
      continue;
    }
    LIST_INSERT_HEAD(&srv->conns, c, in_server);
    if (srv->npreauth == ST_MAX_PREAUTH)
      preauth_evict(srv);
    TAILQ_INSERT_TAIL(&srv->preauth, c, in_preauth);
    c->in_preauth_list = true;
    srv->npreauth++;
  }
}

static void srv_expire(struct pg_store_server *srv)
{
  double now = pg__now();

  struct timer_heap_node *t;

  while ((t = timer_heap_top(&srv->timers)) && t->at <= now) {
    struct store_conn *c = conn_of_timer(t);

    timer_heap_clear(&srv->timers, &c->timer);
    if (c->waiting)
      pg__st_done(srv, c, ST_TIMEOUT, NULL);
    else
      conn_close(srv, c);   /* lingered enough, or proved nothing */
  }
}

static int srv_timeout_ms(const struct pg_store_server *srv)
{
  const struct timer_heap_node *t = timer_heap_top(&srv->timers);
  double dt, next = INFINITY;

  if (t)
    next = t->at;
  if (srv->accept_resume > 0)
    next = fmin(next, srv->accept_resume);
  if (isinf(next))
    return -1;
  dt = next - pg__now();
  if (dt <= 0)
    return 0;
  return dt > 86400 ? 86400000 : (int)ceil(dt * 1000);
}

static void *srv_main(void *arg)
{
  struct pg_store_server *srv = arg;
  struct epoll_event evs[64];
  bool stop = false;

  pthread_setname_np(pthread_self(), "pg-store");   /* for top, gdb */

  while (!stop) {
    int n = epoll_wait(srv->epfd, evs, 64, srv_timeout_ms(srv)), i;
    struct store_conn *c;

    if (n < 0 && errno != EINTR)
      break;
    for (i = 0; i < n; i++) {
      if (evs[i].data.ptr == &srv->wakefd)
        stop = true;
      else if (evs[i].data.ptr == &srv->lfd)
        srv_accept(srv);
      else
        conn_event(srv, evs[i].data.ptr, evs[i].events);
    }
    srv_expire(srv);
    if (srv->accept_resume > 0 && pg__now() >= srv->accept_resume) {
      struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv->lfd };

      epoll_ctl(srv->epfd, EPOLL_CTL_MOD, srv->lfd, &ev);
      srv->accept_resume = 0;
    }
    while ((c = srv->resume)) {
      srv->resume = c->resume_next;
      c->in_resume = false;
      if (!c->dead)
        conn_progress(srv, c);
    }
    while ((c = srv->dead)) {
      srv->dead = c->dead_next;
      conn_free(srv, c);
    }
  }
  /* Stopping (or epoll broke): every client sees its connection close
   * now rather than waiting for its deadline. */
  while (!LIST_EMPTY(&srv->conns))
    conn_close(srv, LIST_FIRST(&srv->conns));
  while (srv->dead) {
    struct store_conn *c = srv->dead;

    srv->dead = c->dead_next;
    conn_free(srv, c);
  }
  srv->resume = NULL;
  return NULL;
}

/* A listening socket on sa; SO_REUSEADDR because cdrun holds the port
 * bound (Note [port reservation] in launcher/port.h). */
static int listen_on(const struct sockaddr *sa, socklen_t len)
{
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  int one = 1, zero = 0, err;

  if (fd < 0)
    return -errno;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      (sa->sa_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0) ||
      bind(fd, sa, len) < 0 || listen(fd, 16384) < 0) {
    err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

static int srv_listen(const char *addr, int port)
{
  struct addrinfo hints, *res, *ai;
  char service[16];
  int fd = -EADDRNOTAVAIL, rc;

  if (!addr) {
    /* Dual-stack ::, else (no IPv6 here) 0.0.0.0. */
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t)port),
                               .sin6_addr = IN6ADDR_ANY_INIT };
    struct sockaddr_in s4 = { .sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_ANY) };

    fd = listen_on((struct sockaddr *)&s6, sizeof s6);
    if (fd < 0)
      fd = listen_on((struct sockaddr *)&s4, sizeof s4);
  } else {
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof service, "%d", port);
    rc = getaddrinfo(addr, service, &hints, &res);
    if (rc)
      return pg__fail(-EINVAL, "store: cannot resolve listen address "
                      "'%s': %s", addr, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
      fd = listen_on(ai->ai_addr, ai->ai_addrlen);
      if (fd >= 0)
        break;
    }
    freeaddrinfo(res);
  }
  if (fd < 0)
    return pg__fail(fd, "store: cannot listen on %s:%d: %s",
                    addr ? addr : "*", port, strerror(-fd));
  return fd;
}

static int srv_add_fd(struct pg_store_server *srv, int fd, void *tag)
{
  struct epoll_event ev = { .events = EPOLLIN, .data.ptr = tag };

  return epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void srv_free(struct pg_store_server *srv)
{
  memset(&srv->token, 0, sizeof srv->token);
  if (srv->lfd >= 0)
    close(srv->lfd);
  if (srv->epfd >= 0)
    close(srv->epfd);
  if (srv->wakefd >= 0)
    close(srv->wakefd);
  store_table_free(&srv->keys);
  timer_heap_free(&srv->timers);
  free(srv);
}

/* A size knob: its value in [lo, hi], or dflt when unset. */
static int knob_size(enum pg__knob k, size_t dflt, size_t lo, size_t hi,
                     size_t *out)
{
  const char *v = pg__knob(k);

  *out = dflt;
  if (!v)
    return 0;
  if (num_parse_count(v, lo, hi, out))
    return pg__fail(-EINVAL, "%s is '%s', expected bytes %zu..%zu",
                    pg__knob_name(k), v, lo, hi);
  return 0;
}

/* The budgets of Note [store budget], from the knobs. */
static int srv_budgets(struct pg_store_server *srv)
{
  int err;

  if ((err = knob_size(PG_KNOB_STORE_MAX_BYTES, ST_DEFAULT_MAX_BYTES,
                       1u << 20, (size_t)1 << 40, &srv->max_bytes)) ||
      (err = knob_size(PG_KNOB_STORE_MAX_CONN_BYTES, ST_DEFAULT_MAX_CONN,
                       1u << 16, srv->max_bytes, &srv->max_conn)) ||
      (err = knob_size(PG_KNOB_STORE_MAX_VALUE, ST_MAX_VALUE, 0,
                       ST_MAX_VALUE, &srv->max_value)) ||
      (err = knob_size(PG_KNOB_STORE_MAX_KEY, ST_MAX_KEY, 1, ST_MAX_KEY,
                       &srv->max_key)))
    return err;
  /* An unset per-connection budget follows a smaller total one. */
  if (!pg__knob(PG_KNOB_STORE_MAX_CONN_BYTES) &&
      srv->max_conn > srv->max_bytes)
    srv->max_conn = srv->max_bytes;
  return 0;
}

int pg_store_server_start(const char *addr, int *port,
                          pg_store_server **out)
{
  return pg_store_server_start_auth(addr, port, NULL, out);
}

int pg_store_server_start_auth(const char *addr, int *port,
                               const char *token, pg_store_server **out)
{
  struct pg_store_server *srv;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  sigset_t all, old;
  uint64_t seed;
  int err;

  if (!out || !port || *port < 0 || *port > 65535)
    return pg__fail(-EINVAL, "store: server needs a port 0..65535 (got "
                    "%d)", port ? *port : -1);
  *out = NULL;
  srv = calloc(1, sizeof *srv);
  if (!srv)
    return pg__fail(-ENOMEM, "store: out of memory");
  srv->lfd = srv->epfd = srv->wakefd = -1;
  LIST_INIT(&srv->conns);
  TAILQ_INIT(&srv->preauth);
  if ((err = pg__token_from(token, &srv->token)) ||
      (err = srv_budgets(srv))) {
    free(srv);
    return err;
  }
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
    seed = (uint64_t)(uintptr_t)srv ^ (uint64_t)getpid() << 32 ^
           (uint64_t)(pg__now() * 1e9);
  if (store_table_init(&srv->keys, seed) != 0) {
    srv_free(srv);
    return pg__fail(-ENOMEM, "store: out of memory");
  }
  srv->lfd = srv_listen(addr, *port);
  if (srv->lfd < 0) {
    err = srv->lfd;
    srv->lfd = -1;
    srv_free(srv);
    return err;
  }
  srv->epfd = epoll_create1(EPOLL_CLOEXEC);
  srv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (srv->epfd < 0 || srv->wakefd < 0 ||
      getsockname(srv->lfd, (struct sockaddr *)&ss, &sl) < 0 ||
      (err = srv_add_fd(srv, srv->lfd, &srv->lfd)) < 0 ||
      (err = srv_add_fd(srv, srv->wakefd, &srv->wakefd)) < 0) {
    err = -errno;
    srv_free(srv);
    return pg__fail(err, "store: server setup: %s", strerror(-err));
  }
  /* The thread takes no signals: they belong to the application. */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  err = -pthread_create(&srv->thread, NULL, srv_main, srv);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    srv_free(srv);
    return pg__fail(err, "store: cannot start the server thread: %s",
                    strerror(-err));
  }
  if (ss.ss_family == AF_INET6)
    *port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  else
    *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *out = srv;
  return 0;
}

void pg_store_server_stop(pg_store_server *srv)
{
  uint64_t one = 1;

  if (!srv)
    return;
  while (write(srv->wakefd, &one, sizeof one) < 0 && errno == EINTR)
    ;
  pthread_join(srv->thread, NULL);
  srv_free(srv);
}

uint64_t pg__store_server_requests(const pg_store_server *srv)
{
  return __atomic_load_n(&srv->requests, __ATOMIC_RELAXED);
}
