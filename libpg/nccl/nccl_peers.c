/* nccl_peers.c -- live mode: which members of an NCCL communicator run
 * under this kernel and pid namespace, and whether one of them died
 * (Note [peer liveness]). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "group.h"
#include "nccl_comm.h"

/* Note [peer liveness]: NCCL reports a dead peer late or never (a kernel
 * waiting on a peer over NVLink or shared memory spins until it is
 * aborted), and a dead process publishes nothing.  In live mode each
 * member publishes its pid, pid namespace and boot id under <ns>peer/<me>
 * at create; the members of the same machine and namespace (only those
 * on this rank's host are read, O(local ranks)) get a pidfd, and the
 * watchdog polls them every tick: a member killed on this host fails the
 * comm with PG_ERR_PEER_LOST within two ticks, and its failure is
 * published under <ns>abort for the ranks of the other hosts (Note
 * [watchdog]).  Only while this rank has work unfinished for two ticks:
 * a member that exits once its part is done (the job's end) is no
 * failure, and the op it finished completes here too.  A shrunk comm
 * inherits its parent's survivors. */

/* "pid pidns boot": what makes a pid meaningful to another process. */
static void identity(char *out, size_t len)
{
  char boot[64];
  struct stat st;
  unsigned long long ns = 0;

  pg__topo_boot_id(boot, sizeof boot);
  if (stat("/proc/self/ns/pid", &st) == 0)
    ns = (unsigned long long)st.st_ino;
  snprintf(out, len, "%d %llu %s", (int)getpid(), ns, boot);
}

static int peers_alloc(struct nccl_comm *c)
{
  int i;

  c->peer_pid = calloc((size_t)c->n, sizeof *c->peer_pid);
  c->peer_fd = malloc((size_t)c->n * sizeof *c->peer_fd);
  if (!c->peer_pid || !c->peer_fd) {
    nccl_peers_free(c);
    return pg__fail(-ENOMEM, "NCCL backend: out of memory");
  }
  for (i = 0; i < c->n; i++)
    c->peer_fd[i] = -1;
  return 0;
}

/* Whether member j is on this rank's host, as far as the topology says
 * (none: every member is read). */
static bool same_host(const struct pg__setup *s, int j)
{
  const struct pg__topo *t = s->topo;

  if (!t || !t->host_of || !s->ranks)
    return true;
  return t->host_of[s->ranks[j]] == t->host_of[s->ranks[s->me]];
}

int nccl_peers_share(struct nccl_comm *c, const struct pg__setup *s,
                     double deadline)
{
  char key[4096], mine[160], other[160];
  void *val;
  size_t len;
  double left;
  int j, err;

  if (!c->live || !c->store)
    return 0;
  if ((err = peers_alloc(c)) != 0)
    return err;
  identity(mine, sizeof mine);
  snprintf(key, sizeof key, "%speer/%d", s->ns ? s->ns : "", c->me);
  err = pg_store_set(s->store, key, mine, strlen(mine));
  if (err)
    return pg__fail(err, "NCCL backend: cannot publish '%s': %s", key,
                    pg_strerror(err));
  /* Only the pid differs between two processes of one namespace. */
  for (j = 0; j < c->n; j++) {
    if (j == c->me || !same_host(s, j))
      continue;
    snprintf(key, sizeof key, "%speer/%d", s->ns ? s->ns : "", j);
    left = deadline - pg__now();
    val = NULL;
    err = pg_store_get(s->store, key, left > 0.001 ? left : 0.001, &val,
                       &len);
    if (err)
      return pg__fail(err, "NCCL backend: waiting for member %d's pid "
                      "('%s'): %s", j, key, pg_strerror(err));
    snprintf(other, sizeof other, "%.*s", (int)len, (const char *)val);
    free(val);
    if (strcmp(strchr(other, ' ') ? strchr(other, ' ') : "",
               strchr(mine, ' ')) != 0)
      continue;  /* another machine or pid namespace */
    c->peer_pid[j] = (pid_t)atoi(other);
    c->peer_fd[j] = pg__pidfd_open(c->peer_pid[j]);
  }
  return 0;
}

int nccl_peers_inherit(struct nccl_comm *c, const struct nccl_comm *p,
                       const int *excluded, int nexcluded)
{
  int i, j = 0, x = 0, err;

  if (!p->peer_pid)
    return 0;
  if ((err = peers_alloc(c)) != 0)
    return err;
  for (i = 0; i < p->n && j < c->n; i++) {
    if (x < nexcluded && excluded[x] == i) {
      x++;
      continue;
    }
    c->peer_pid[j] = p->peer_pid[i];
    if (p->peer_fd[i] >= 0)
      c->peer_fd[j] = fcntl(p->peer_fd[i], F_DUPFD_CLOEXEC, 0);
    j++;
  }
  return 0;
}

int nccl_peers_dead(const struct nccl_comm *c)
{
  struct pollfd pfd;
  int j;

  if (!c->peer_pid)
    return -1;
  for (j = 0; j < c->n; j++) {
    if (j == c->me || c->peer_pid[j] <= 0)
      continue;
    if (c->peer_fd[j] >= 0) {
      pfd.fd = c->peer_fd[j];
      pfd.events = POLLIN;
      pfd.revents = 0;
      if (poll(&pfd, 1, 0) > 0 && pfd.revents != 0)
        return j;
    } else if (kill(c->peer_pid[j], 0) < 0 && errno == ESRCH) {
      return j;
    }
  }
  return -1;
}

void nccl_peers_free(struct nccl_comm *c)
{
  int j;

  for (j = 0; c->peer_fd && j < c->n; j++)
    if (c->peer_fd[j] >= 0)
      close(c->peer_fd[j]);
  free(c->peer_fd);
  free(c->peer_pid);
  c->peer_fd = NULL;
  c->peer_pid = NULL;
}
