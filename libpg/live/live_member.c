/* live_member.c -- a generation's entries and decision as text (live.h).
 * Text, one line per member, so that a person reading the store can tell
 * who formed what. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

#define DECISION_HDR_MAX 64

void pg__live_member_format(const struct pg__live_member *m, char *buf,
                            size_t len)
{
  snprintf(buf, len, "inc=%016" PRIx64 " round=%" PRId64 " world=%d "
           "slot=%d old=%d from=%" PRId64 " pid=%d fresh=%d valid=%d "
           "comm=%d boot=%s", m->inc, m->round, m->world, m->slot,
           m->old_rank, m->from, m->pid, m->fresh, m->valid, m->comm,
           m->boot[0] ? m->boot : "-");
}

int pg__live_member_parse(const char *text, size_t len,
                          struct pg__live_member *m)
{
  char line[PG__LIVE_MEMBER_MAX + 1], boot[PG__LIVE_BOOT_MAX];
  int fresh, valid, comm, used = 0;

  if (len >= sizeof line)
    return pg__fail(-EPROTO, "a generation entry of %zu bytes", len);
  memcpy(line, text, len);
  line[len] = '\0';
  memset(m, 0, sizeof *m);
  if (sscanf(line, "inc=%" SCNx64 " round=%" SCNd64 " world=%d slot=%d "
             "old=%d from=%" SCNd64 " pid=%d fresh=%d valid=%d comm=%d "
             "boot=%63s%n", &m->inc, &m->round, &m->world, &m->slot,
             &m->old_rank, &m->from, &m->pid, &fresh, &valid, &comm, boot,
             &used) != 11 ||
      (size_t)used != len || m->world < 1 || m->slot < 0 ||
      m->slot >= m->world || m->round < 0)
    return pg__fail(-EPROTO, "a malformed generation entry '%.80s'", line);
  m->fresh = fresh != 0;
  m->valid = valid != 0;
  m->comm = comm != 0;
  snprintf(m->boot, sizeof m->boot, "%s", strcmp(boot, "-") ? boot : "");
  return 0;
}

bool pg__live_complete(const struct pg__live_member *m, const bool *present,
                       int world, int64_t round)
{
  int i, j;

  for (i = 0; i < world; i++) {
    if (!present[i] || m[i].round != round || m[i].world != world ||
        m[i].slot != i)
      return false;
    for (j = 0; j < i; j++)
      if (m[j].inc == m[i].inc)
        return false;
  }
  return true;
}

char *pg__live_decision_format(const struct pg__live_member *m, int world,
                               int64_t round)
{
  size_t cap = DECISION_HDR_MAX + (size_t)world * PG__LIVE_MEMBER_MAX, at;
  char *s = malloc(cap);
  int i;

  if (!s)
    return NULL;
  at = (size_t)snprintf(s, cap, "round=%" PRId64 " world=%d\n", round,
                        world);
  for (i = 0; i < world; i++) {
    pg__live_member_format(&m[i], s + at, cap - at);
    at += strlen(s + at);
    s[at++] = '\n';
    s[at] = '\0';
  }
  return s;
}

int pg__live_decision_parse(const char *text, size_t len,
                            struct pg__live_member **m, int *world,
                            int64_t *round)
{
  char hdr[DECISION_HDR_MAX];
  const char *p = text, *end = text + len, *nl;
  int i, used = 0, err;

  *m = NULL;
  *world = 0;
  if (len == strlen(PG__LIVE_ABANDONED) &&
      memcmp(text, PG__LIVE_ABANDONED, len) == 0)
    return 0;
  nl = memchr(p, '\n', len);
  if (!nl || (size_t)(nl - p) >= sizeof hdr)
    return pg__fail(-EPROTO, "a malformed generation decision");
  memcpy(hdr, p, (size_t)(nl - p));
  hdr[nl - p] = '\0';
  /* Every member takes a line of more than 32 bytes: a world the text
   * cannot hold is refused before anything is allocated for it. */
  if (sscanf(hdr, "round=%" SCNd64 " world=%d%n", round, world, &used) != 2
      || used != nl - p || *world < 1 || *world > (1 << 24) ||
      (size_t)*world > len / 32 || *round < 0)
    return pg__fail(-EPROTO, "a malformed generation decision '%s'", hdr);
  *m = calloc((size_t)*world, sizeof **m);
  if (!*m)
    return pg__fail(-ENOMEM, "out of memory for a generation of %d", *world);
  p = nl + 1;
  for (i = 0; i < *world; i++) {
    nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    err = nl ? pg__live_member_parse(p, (size_t)(nl - p), &(*m)[i])
             : pg__fail(-EPROTO, "a generation decision with %d of %d "
                        "members", i, *world);
    /* Slot i holds member i of this very round and world: the members'
     * ranks and the communicator's size come from here. */
    if (!err && ((*m)[i].slot != i || (*m)[i].world != *world ||
                 (*m)[i].round != *round))
      err = pg__fail(-EPROTO, "a generation decision whose line %d is "
                     "slot %d of round %" PRId64 " world %d, not slot %d "
                     "of round %" PRId64 " world %d", i + 1, (*m)[i].slot,
                     (*m)[i].round, (*m)[i].world, i, *round, *world);
    if (err) {
      free(*m);
      *m = NULL;
      *world = 0;
      return err;
    }
    p = nl + 1;
  }
  return 0;
}

bool pg__live_shrinks(const struct pg__live_member *m, int world,
                      int64_t old_gen, int old_world)
{
  int i, last = -1;

  if (world >= old_world)
    return false;
  for (i = 0; i < world; i++) {
    if (m[i].fresh || !m[i].comm || m[i].from != old_gen ||
        m[i].old_rank <= last)
      return false;
    last = m[i].old_rank;
  }
  return true;
}

int pg__live_heal_source(const struct pg__live_member *m, int world)
{
  int i;

  for (i = 0; i < world; i++)
    if (m[i].valid && !m[i].fresh)
      return i;
  return -1;
}
