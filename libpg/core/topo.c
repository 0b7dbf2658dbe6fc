/* topo.c -- which ranks share a host (struct pg__topo), computed at init
 * from every rank's host id and boot id, all-gathered over the store. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"

/* This kernel's boot id ("" if unknown): processes that share it share
 * the machine's CPUs, even in network namespaces posing as hosts. */
void pg__topo_boot_id(char *out, size_t len)
{
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

  out[0] = '\0';
  if (f) {
    if (!fgets(out, (int)len, f))
      out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
  }
}

/* This machine: hostname plus boot id, so two containers with the same
 * hostname on different machines are not taken for one host. */
void pg__topo_default_host_id(const char *boot, char *out, size_t len)
{
  char host[256] = "unknown";

  gethostname(host, sizeof host - 1);
  snprintf(out, len, "%s/%s", host, boot);
}

void pg__topo_free(struct pg__topo *t)
{
  free(t->host_of);
  free(t->leader_of);
  free(t->local);
  memset(t, 0, sizeof *t);
}

/* The length of a published "<host id>\n<boot id>"'s host id. */
static size_t host_part(const void *val, size_t len)
{
  const char *nl = memchr(val, '\n', len);

  return nl ? (size_t)(nl - (const char *)val) : len;
}

/* All-gathers host ids (and boot ids) over the store and groups ranks by
 * them. */
int pg__topo_build(pg_group *g, const char *host_id, const char *boot)
{
  struct pg__topo *t = &g->topo;
  void **vals = NULL;
  size_t *lens = NULL, hl, bl;
  char mine[1024];
  int i, j, err = -ENOMEM;

  t->rank = g->rank;
  t->size = g->size;
  t->host_of = calloc((size_t)g->size, sizeof *t->host_of);
  t->leader_of = calloc((size_t)g->size, sizeof *t->leader_of);
  t->local = calloc((size_t)g->size, sizeof *t->local);
  vals = calloc((size_t)g->size, sizeof *vals);
  lens = calloc((size_t)g->size, sizeof *lens);
  if (!t->host_of || !t->leader_of || !t->local || !vals || !lens)
    goto out;
  snprintf(mine, sizeof mine, "%s\n%s", host_id, boot);
  err = pg__store_allgather(g->store, g->ns, "host/", g->rank, g->size,
                            mine, strlen(mine), g->timeout, vals, lens);
  if (err)
    goto out;
  t->nhosts = 0;
  for (i = 0; i < g->size; i++) {
    hl = host_part(vals[i], lens[i]);
    for (j = 0; j < i; j++)
      if (host_part(vals[j], lens[j]) == hl &&
          memcmp(vals[j], vals[i], hl) == 0)
        break;
    if (j < i) {
      t->host_of[i] = t->host_of[j];
    } else {
      t->leader_of[t->nhosts] = i;
      t->host_of[i] = t->nhosts++;
    }
  }
  t->nlocal = 0;
  for (i = 0; i < g->size; i++)
    if (t->host_of[i] == t->host_of[g->rank]) {
      if (i == g->rank)
        t->local_index = t->nlocal;
      t->local[t->nlocal++] = i;
    }
  t->machine_ranks = 0;
  bl = strlen(boot);
  for (i = 0; i < g->size; i++) {
    hl = host_part(vals[i], lens[i]);
    t->machine_ranks += hl < lens[i] && lens[i] - hl - 1 == bl &&
                        memcmp((char *)vals[i] + hl + 1, boot, bl) == 0;
  }
  err = 0;
out:
  pg__free_vals(vals, g->size);
  free(vals);
  free(lens);
  return err;
}
