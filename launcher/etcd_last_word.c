/* etcd_last_word.c -- the lease revoke a dying agent sends from its
 * signal handler (etcd_last_word.h, Note [an agent's last word]). */
#include "etcd_last_word.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 1000      /* connect, then the answer */

/* Two slots: the loop writes the one not in use, then switches. */
struct prepared {
  struct sockaddr_storage sa;
  socklen_t salen;
  char req[2048];
  int len;
};

static struct prepared slot[2];
static volatile sig_atomic_t live = -1;   /* slot to send; -1: none */
static pid_t owner;
static bool installed;
static struct sigaction prev[NSIG];     /* what each signal did before */

/* Terminating by default, and not SIGKILL/SIGSTOP: taken when nobody
 * handles them. */
static const int fatal[] = {
  SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGSTKFLT,
  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR,
};
/* A fault: taken even when a handler is there (a sanitizer's), which
 * then runs as before. */
static const int faults[] = {
  SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGSYS,
};

static bool wait_fd(int fd, short ev)
{
  struct pollfd p = { fd, ev, 0 };

  return poll(&p, 1, WAIT_MS) == 1 && !(p.revents & (POLLERR | POLLNVAL));
}

static void on_fatal(int sig, siginfo_t *info, void *uc)
{
  int save = errno, i = live, fd;
  char buf[256];

  (void)uc;
  live = -1;        /* once */
  if (i >= 0 && getpid() == owner) {
    const struct prepared *p = &slot[i];

    fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd >= 0) {
      if ((connect(fd, (const struct sockaddr *)&p->sa, p->salen) == 0 ||
           (errno == EINPROGRESS && wait_fd(fd, POLLOUT))) &&
          write(fd, p->req, (size_t)p->len) == p->len &&
          wait_fd(fd, POLLIN))
        (void)!read(fd, buf, sizeof buf);   /* etcd has acted on it */
      close(fd);
    }
  }
  errno = save;
  /* The signal does what it did before: a fault the kernel raised
   * happens again on return, another signal is raised again. */
  sigaction(sig, &prev[sig], NULL);
  if (info && info->si_code > 0 && sig != SIGABRT && sig != SIGTRAP)
    return;
  raise(sig);
}

static void install(void)
{
  struct sigaction sa, old;
  size_t i;

  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
    if (sigaction(fatal[i], NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
        old.sa_handler == SIG_DFL) {
      prev[fatal[i]] = old;
      sigaction(fatal[i], &sa, NULL);
    }
  for (i = 0; i < sizeof faults / sizeof faults[0]; i++)
    if (sigaction(faults[i], NULL, &old) == 0 &&
        ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_IGN)) {
      prev[faults[i]] = old;
      sigaction(faults[i], &sa, NULL);
    }
  installed = true;
}

int etcd_last_word_arm(const char *ip, int port, const char *lease,
                       const char *token)
{
  int next = live == 0 ? 1 : 0;
  struct prepared *p = &slot[next];
  struct sockaddr_in *v4 = (struct sockaddr_in *)&p->sa;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&p->sa;
  char body[64];
  int n;

  memset(&p->sa, 0, sizeof p->sa);
  if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((unsigned short)port);
    p->salen = sizeof *v4;
  } else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((unsigned short)port);
    p->salen = sizeof *v6;
  } else {
    return -EINVAL;
  }
  n = snprintf(body, sizeof body, "{\"ID\":\"%s\"}", lease);
  if (n <= 0 || (size_t)n >= sizeof body ||
      strspn(lease, "0123456789") != strlen(lease) || strpbrk(token, "\r\n"))
    return -EINVAL;
  n = snprintf(p->req, sizeof p->req,
               "POST /v3/lease/revoke HTTP/1.1\r\n"
               "Host: %s%s%s:%d\r\n"
               "Content-Type: application/json\r\n"
               "%s%s%s"
               "Content-Length: %zu\r\n"
               "Connection: close\r\n\r\n%s",
               p->sa.ss_family == AF_INET6 ? "[" : "", ip,
               p->sa.ss_family == AF_INET6 ? "]" : "", port,
               token[0] ? "Authorization: " : "", token,
               token[0] ? "\r\n" : "", strlen(body), body);
  if (n <= 0 || (size_t)n >= sizeof p->req)
    return -EINVAL;
  p->len = n;
  owner = getpid();
  live = next;
  if (!installed)
    install();
  return 0;
}

void etcd_last_word_disarm(void)
{
  live = -1;
}
