/* shm.c -- the shared-memory communicator: every rank of the comm on one
 * host, all data through one POSIX shm segment.  This file makes and
 * ends the segment, waits on its words and fails the comm; the
 * collectives are shm_coll.c's, send and recv shm_ring.c's
 * (shm_internal.h says what crosses).
 *
 * Note [shm segment]: local rank 0 creates "/pg-<random>-<pid>" (O_EXCL),
 * reserves its pages (posix_fallocate: a full /dev/shm fails here with
 * ENOSPC, not later with SIGBUS; smaller buffers are tried then) and
 * publishes name and sizes through the store; the others open and map it;
 * after a second exchange (everyone mapped, or someone failed) rank 0
 * unlinks it.  From then on only the mappings hold it: nothing is left in
 * /dev/shm however the processes end.
 *
 * Note [stale segments]: before that unlink the name is the only thing
 * that holds the segment, and a rank 0 SIGKILLed in between (inside
 * pg_init, during pg_recover's rebuild) would leave it in /dev/shm for
 * good.  So whoever can unlinks it: every rank that mapped the segment
 * unlinks the name once the second exchange is over, whether it
 * succeeded (all have mapped it: rank 0 may have died since it said so)
 * or failed (rank 0 may have died before; the first unlink wins, the
 * others find nothing); and
 * every rank 0, before it creates a segment, sweeps /dev/shm for this
 * user's "pg-" segments whose creator's pid is gone, as Note [stale
 * cgroups] does for cgroups.  A name's first 32 bits of "random" are the
 * creator's pid namespace (the low bits of its inode), so that a sweep
 * never judges a pid of another namespace, whose segment it would take
 * from under a setup in progress; a live creator's pid exists, and one
 * that died leaves mappings (if any) that need no name.  Layout, each
 * part aligned to LINE:
 *
 *   header | abort line | rank[n] (seq line + waiters line) |
 *   ring control[n*n] (sender line + receiver line) |
 *   buffers[n][NBUF] (buf bytes each) | rings[n*n] (ring bytes each)
 *
 * Note [waiting]: spin for SPIN_S (only when ranks do not outnumber the
 * CPUs we may run on), then yield with short spins in between until
 * YIELD_S (the peer may need this very CPU), then sleep on the counter
 * word with FUTEX_WAIT (shared futexes: the word lives in the segment)
 * for at most SLEEP_SLICE at a time; a writer calls FUTEX_WAKE only when
 * the word's waiters count says someone sleeps.
 * Between sleeps a waiter checks the deadline, the abort word, and whether
 * the peer it waits for died (a pidfd per peer, readable once the process
 * is gone, zombie or not; kill(pid, 0) where pidfd_open is missing).  The first rank that
 * fails sets the abort word and wakes every sleeper, so the others fail at
 * once instead of at their own deadlines; a failed comm fails every later
 * op. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "knobs.h"
#include "num.h"
#include "pg_internal.h"
#include "shm_internal.h"

#define SHM_MAGIC 0x70677368u     /* "pgsh" */
#define SHM_VERSION 1u

#define BUF_DEFAULT (512u << 10)
#define BUF_MIN (64u << 10)
#define SEG_CAP ((size_t)256 << 20)   /* n * NBUF * buf at most */
#define RING_TOTAL ((size_t)4 << 20)
#define RING_MAX (256u << 10)
#define RING_MIN (4u << 10)
/* all_reduce/reduce in one phase up to this many bytes (Note
 * [algorithms]).  With a CPU per rank the two-phase path catches up early
 * (it reads less of the peers' data): SMALL_SPIN; when ranks outnumber
 * CPUs every phase costs a context switch, so one phase wins further:
 * SMALL_SLEEP. */
#define SMALL_SPIN 2048u
#define SMALL_SLEEP 8192u

#define SPIN_S 10e-6        /* pure spinning */
#define YIELD_S 1e-3        /* then yielding, then futex sleeps of */
#define SLEEP_SLICE 0.010   /* at most this (liveness checks between) */
#define DRAIN_SLICE 0.001   /* the same for a send draining its inbox */

struct shm_hdr {
  uint32_t magic, version, n, nbuf;
  uint64_t size, buf, ring;
};

struct shm_abort {
  uint32_t word;          /* 0, or 1 + the rank that failed first */
  int32_t err;
};

static const struct pg__comm_ops shm_ops;

/* ---- the futex words ---------------------------------------------------- */

static inline bool ge32(uint32_t a, uint32_t b)
{
  return (int32_t)(a - b) >= 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#endif
}

static void futex_wait(uint32_t *w, uint32_t val, double secs)
{
  struct timespec ts;

  if (secs < 0)
    secs = 0;
  ts.tv_sec = (time_t)secs;
  ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
  syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* ---- failure -------------------------------------------------------------- */

static void wake_everyone(struct shm_comm *c)
{
  int i;

  for (i = 0; i < c->n; i++)
    futex_wake(&c->rk[i].seq);
  for (i = 0; i < c->n * c->n; i++) {
    futex_wake(&c->rc[i].tail);
    futex_wake(&c->rc[i].head);
  }
}

/* shm_internal.h. */
int shm_poison(struct shm_comm *c, int err)
{
  uint32_t zero = 0;

  c->err = err;
  if (__atomic_compare_exchange_n(&c->ab->word, &zero, (uint32_t)c->me + 1,
                                  false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST)) {
    __atomic_store_n(&c->ab->err, err, __ATOMIC_RELAXED);
    wake_everyone(c);
  }
  return err;
}

static int check_abort(struct shm_comm *c)
{
  uint32_t w = __atomic_load_n(&c->ab->word, __ATOMIC_ACQUIRE);
  int r, err;

  if (w == 0)
    return 0;
  r = (int)w - 1;
  err = __atomic_load_n(&c->ab->err, __ATOMIC_RELAXED);
  c->err = -ECONNRESET;
  return pg__fail(-ECONNRESET,
                  "shm: rank %d (pid %d) failed (%s) and aborted the "
                  "communicator during %s",
                  r, (int)c->pid[r], pg_err_name(err), c->what);
}

/* Whether rank r's process is gone (exited, killed, a zombie).  Only the
 * rank waited for is checked: a rank that finished its part and exited is
 * no failure, and one that waits for a dead rank finds out itself and
 * aborts the comm. */
static bool peer_dead(struct shm_comm *c, int r)
{
  struct pollfd pfd;

  if (r == c->me || c->pid[r] <= 0)
    return false;
  if (c->pidfd[r] >= 0) {
    pfd.fd = c->pidfd[r];
    pfd.events = POLLIN;
    pfd.revents = 0;
    return poll(&pfd, 1, 0) > 0 && pfd.revents != 0;
  }
  return kill(c->pid[r], 0) < 0 && errno == ESRCH;
}

int shm_ok_before(struct shm_comm *c)
{
  if (c->err)
    return pg__fail(PG_EPEERFAIL, "shm: the communicator failed earlier (%s)",
                    pg_err_name(c->err));
  return 0;
}

/* Waits until *w >= target (mod 2^32); peer is whose word it is. */
int shm_wait_ge(struct shm_comm *c, uint32_t *w, uint32_t *waiters,
                uint32_t target, int peer, double deadline)
{
  double start, now;
  int i, err;
  bool slept_out = false;

  if (ge32(load_acq(w), target))
    return 0;
  start = pg__now();
  /* Spin, when every rank can have a CPU of its own. */
  while (c->spin) {
    for (i = 0; i < 64; i++) {
      if (ge32(load_acq(w), target))
        return 0;
      cpu_relax();
    }
    if ((err = check_abort(c)) != 0)
      return err;
    now = pg__now();
    if (now - start > SPIN_S || now >= deadline)
      break;
  }
  /* Yield with short spins in between: the peer may be waiting for this
   * very CPU (other load, or more ranks than CPUs). */
  for (;;) {
    sched_yield();
    for (i = 0; i < 16; i++) {
      if (ge32(load_acq(w), target))
        return 0;
      cpu_relax();
    }
    if ((err = check_abort(c)) != 0)
      return err;
    if (c->draining && (err = shm_drain_all(c)) < 0)
      return err;
    now = pg__now();
    if (now - start > YIELD_S || now >= deadline)
      break;
  }
  for (;;) {
    uint32_t v;

    if ((err = check_abort(c)) != 0)
      return err;
    if (c->draining && (err = shm_drain_all(c)) < 0)
      return err;
    now = pg__now();
    if (now >= deadline) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ETIMEDOUT, "shm: %s timed out waiting for rank %d (pid %d)",
               c->what, peer, (int)c->pid[peer]);
      return shm_poison(c, -ETIMEDOUT);
    }
    if (slept_out && peer_dead(c, peer)) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ECONNRESET, "shm: rank %d (pid %d) died during %s", peer,
               (int)c->pid[peer], c->what);
      return shm_poison(c, -ECONNRESET);
    }
    if (__atomic_load_n(&c->rk[peer].left, __ATOMIC_ACQUIRE)) {
      if (ge32(load_acq(w), target))
        return 0;
      pg__fail(-ECONNRESET, "shm: rank %d (pid %d) left the communicator "
               "(pg_destroy) during %s", peer, (int)c->pid[peer], c->what);
      return shm_poison(c, -ECONNRESET);
    }
    __atomic_add_fetch(waiters, 1, __ATOMIC_SEQ_CST);
    v = __atomic_load_n(w, __ATOMIC_SEQ_CST);
    if (!ge32(v, target)) {
      /* A draining sender is not woken by incoming data: look often. */
      double cap = c->draining ? DRAIN_SLICE : SLEEP_SLICE;
      double slice = deadline - now < cap ? deadline - now : cap;

      futex_wait(w, v, slice);
      slept_out = pg__now() - now >= slice * 0.9;
    }
    __atomic_sub_fetch(waiters, 1, __ATOMIC_SEQ_CST);
    if (ge32(load_acq(w), target))
      return 0;
  }
}
/* ---- create / destroy ---------------------------------------------------------- */

/* Note [left]: a rank that destroys the comm says so before it unmaps.
 * Whatever it contributed is there; a peer that still waits for more
 * from it (it left mid-collective: an error outside libpg, a failed
 * checkpoint write) would wait for its death or the timeout, while the
 * leaver's pg_destroy waits for that peer's exit: both stuck for up to
 * 30 s.  The peer fails at once instead. */
static void shm_destroy(struct pg__comm *pc)
{
  struct shm_comm *c = (struct shm_comm *)pc;
  int i;

  if (!c)
    return;
  if (c->map && c->rk) {
    __atomic_store_n(&c->rk[c->me].left, 1, __ATOMIC_RELEASE);
    wake_everyone(c);
  }
  if (c->map)
    munmap(c->map, c->map_len);
  for (i = 0; c->pidfd && i < c->n; i++)
    if (c->pidfd[i] >= 0)
      close(c->pidfd[i]);
  for (i = 0; c->uq && i < c->n; i++)
    while (c->uq[i]) {
      struct unexpected *u = c->uq[i];

      c->uq[i] = u->next;
      free(u);
    }
  for (i = 0; c->part && i < c->n; i++)
    free(c->part[i]);
  free(c->uq);
  free(c->part);
  free(c->part_got);
  free(c->pid);
  free(c->pidfd);
  free(c->tx_tail);
  free(c->rx_head);
  free(c);
}

static size_t align_up(size_t x, size_t a)
{
  return (x + a - 1) & ~(a - 1);
}

/* Segment offsets for n ranks and the given sizes. */
struct layout {
  size_t abort_off, rank_off, ring_ctl_off, buf_off, ring_off, size;
};

static struct layout layout_of(int n, size_t buf, size_t ring)
{
  struct layout l;
  size_t nn = (size_t)n * (size_t)n;

  l.abort_off = LINE;
  l.rank_off = 2 * LINE;
  l.ring_ctl_off = l.rank_off + (size_t)n * sizeof(struct shm_rank);
  l.buf_off = align_up(l.ring_ctl_off + nn * sizeof(struct shm_ring), 4096);
  l.ring_off = l.buf_off + (size_t)n * NBUF * buf;
  l.size = align_up(l.ring_off + nn * ring, 4096);
  return l;
}

static size_t pow2_floor(size_t x)
{
  size_t p = 1;

  while (p * 2 <= x)
    p *= 2;
  return p;
}

/* Buffer bytes: want ($PG_SHM_BUF, a tuning knob, see shm_buf_knob; 0:
 * unset), else BUF_DEFAULT (chunks that stay in L2/L3 while they are
 * reduced); capped so the buffers of all ranks
 * stay within SEG_CAP, at least 16 elements of 8 bytes per rank.  Local
 * rank 0 sizes the segment: its value counts. */
static size_t default_buf(int n, size_t want)
{
  size_t buf = want ? want : BUF_DEFAULT,
         cap = SEG_CAP / ((size_t)n * NBUF);

  if (buf > cap)
    buf = cap;
  if (buf < (size_t)n * 128)
    buf = (size_t)n * 128;
  return align_up(buf, 4096);
}

/* The low 32 bits of this process's pid namespace inode (0 unknown). */
static uint32_t pidns32(void)
{
  struct stat st;

  return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* A segment name of ours: "pg-<16 hex>-<pid>" (no leading slash), its
 * namespace bits and creator; false for anything else. */
static bool parse_name(const char *name, uint32_t *ns, pid_t *pid)
{
  uint64_t rnd;
  long p;
  int used = 0;

  if (strlen(name) > 48 ||
      sscanf(name, "pg-%16" SCNx64 "-%ld%n", &rnd, &p, &used) != 2 ||
      used != (int)strlen(name) || strlen(name) < 20 || name[19] != '-' ||
      p <= 0 || p > INT_MAX)
    return false;
  *ns = (uint32_t)(rnd >> 32);
  *pid = (pid_t)p;
  return true;
}

#define STALE_SWEEP_MAX 4096

/* Note [stale segments]: unlinks this user's segments of this pid
 * namespace whose creator is gone.  Best effort, a bounded look. */
static void sweep_stale(uint32_t ns)
{
  char path[300];
  struct dirent *e;
  struct stat st;
  uint32_t their_ns;
  pid_t pid;
  int seen = 0;
  DIR *d;

  if (ns == 0 || (d = opendir("/dev/shm")) == NULL)
    return;
  while (seen++ < STALE_SWEEP_MAX && (e = readdir(d)) != NULL) {
    if (!parse_name(e->d_name, &their_ns, &pid) || their_ns != ns ||
        pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    snprintf(path, sizeof path, "/%s", e->d_name);
    shm_unlink(path);
  }
  closedir(d);
}

/* Rank 0: creates, sizes and maps the segment; *name gets its name. */
static int create_segment(struct shm_comm *c, char *name, size_t name_len)
{
  size_t buf = default_buf(c->n, c->buf_knob), ring;
  struct layout l;
  uint32_t ns = pidns32(), r32;
  uint64_t rnd;
  int fd = -1, tries, err;

  ring = c->n > 1 ? pow2_floor(RING_TOTAL / ((size_t)c->n * (size_t)c->n))
                  : RING_MIN;
  if (ring > RING_MAX)
    ring = RING_MAX;
  if (ring < RING_MIN)
    ring = RING_MIN;
  sweep_stale(ns);
  for (tries = 0; tries < 8 && fd < 0; tries++) {
    if (getrandom(&r32, sizeof r32, 0) != (ssize_t)sizeof r32)
      r32 = (uint32_t)(pg__now() * 1e9) ^ (uint32_t)tries;
    rnd = (uint64_t)ns << 32 | r32;
    snprintf(name, name_len, "/pg-%016" PRIx64 "-%d", rnd, (int)getpid());
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0)
    return pg__fail(-errno, "shm: cannot create a shared memory segment "
                    "(%s): %s", name, strerror(errno));
  /* Reserve the pages now; on ENOSPC try smaller buffers and rings. */
  for (;;) {
    l = layout_of(c->n, buf, ring);
    if (ftruncate(fd, (off_t)l.size) < 0) {
      err = -errno;
    } else {
      err = -posix_fallocate(fd, 0, (off_t)l.size);
      if (err == -EOPNOTSUPP || err == -EINVAL || err == -ENOSYS)
        err = 0;
    }
    if (err == 0 || buf <= BUF_MIN || (err != -ENOSPC && err != -EFBIG))
      break;
    if (ftruncate(fd, 0) < 0) {
      err = -errno;
      break;
    }
    buf /= 2;
    if (ring > RING_MIN)
      ring /= 2;
  }
  if (err == 0) {
    c->map = mmap(NULL, l.size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, fd, 0);
    if (c->map == MAP_FAILED) {
      c->map = NULL;
      err = -errno;
    }
  }
  close(fd);
  if (err) {
    shm_unlink(name);
    return pg__fail(err, "shm: cannot size a %zu-byte shared memory segment "
                    "in /dev/shm: %s", l.size, strerror(-err));
  }
  c->map_len = l.size;
  c->buf = buf;
  c->ring = ring;
  c->hdr = (struct shm_hdr *)c->map;
  c->hdr->n = (uint32_t)c->n;
  c->hdr->nbuf = NBUF;
  c->hdr->size = l.size;
  c->hdr->buf = buf;
  c->hdr->ring = ring;
  c->hdr->version = SHM_VERSION;
  __atomic_store_n(&c->hdr->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  return 0;
}

static int open_segment(struct shm_comm *c, const char *name, size_t size)
{
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0), err;
  struct shm_hdr *h;

  if (fd < 0)
    return pg__fail(-errno, "shm: cannot open rank 0's segment %s: %s", name,
                    strerror(errno));
  c->map = mmap(NULL, size, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_POPULATE, fd, 0);
  err = errno;
  close(fd);
  if (c->map == MAP_FAILED) {
    c->map = NULL;
    return pg__fail(-err, "shm: cannot map %s: %s", name, strerror(err));
  }
  c->map_len = size;
  h = (struct shm_hdr *)c->map;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC ||
      h->version != SHM_VERSION || h->n != (uint32_t)c->n ||
      h->nbuf != NBUF || h->size != size || (h->ring & (h->ring - 1)) != 0)
    return pg__fail(-EPROTO, "shm: segment %s does not match this "
                    "communicator", name);
  c->hdr = h;
  c->buf = h->buf;
  c->ring = h->ring;
  return 0;
}

static struct shm_comm *comm_alloc(int n, int me)
{
  struct shm_comm *c = calloc(1, sizeof *c);
  int i;

  if (!c)
    return NULL;
  c->base.ops = &shm_ops;
  c->n = n;
  c->me = me;
  c->what = "setup";
  c->tx_tail = calloc((size_t)n, sizeof *c->tx_tail);
  c->rx_head = calloc((size_t)n, sizeof *c->rx_head);
  c->uq = calloc((size_t)n, sizeof *c->uq);
  c->part = calloc((size_t)n, sizeof *c->part);
  c->part_got = calloc((size_t)n, sizeof *c->part_got);
  c->pid = calloc((size_t)n, sizeof *c->pid);
  c->pidfd = malloc((size_t)n * sizeof *c->pidfd);
  for (i = 0; c->pidfd && i < n; i++)
    c->pidfd[i] = -1;
  if (!c->tx_tail || !c->rx_head || !c->uq || !c->part || !c->part_got ||
      !c->pid || !c->pidfd) {
    shm_destroy(&c->base);
    return NULL;
  }
  return c;
}

/* Setup exchange 1: rank 0 creates the segment and publishes its name
 * (or its failure); the others map it.  name gets the segment's name on
 * rank 0 and on the others that mapped it (to unlink: Note [stale
 * segments]), "" elsewhere. */
static int share_segment(struct shm_comm *c, const struct pg__setup *s,
                         double timeout, char *name, size_t namelen)
{
  char val[160], seg[64];
  void *v0 = NULL;
  size_t len0 = 0, size = 0;
  int err = 0, e2;

  if (c->me == 0) {
    err = create_segment(c, name, namelen);
    if (err)
      snprintf(val, sizeof val, "! %d", err);
    else
      snprintf(val, sizeof val, "%s %zu", name, c->map_len);
  } else {
    snprintf(val, sizeof val, "-");
  }
  /* Everyone publishes, only rank 0's is read: the first 1. */
  e2 = pg__store_allgather(s->store, s->ns, "seg", c->me, 1, val,
                           strlen(val) + 1, timeout, &v0, &len0);
  if (e2 && !err)
    err = e2;
  if (!err && c->me != 0) {
    const char *v = v0;

    if (len0 == 0 || v[len0 - 1] != '\0' || v[0] == '!' ||
        sscanf(v, "%63s %zu", seg, &size) != 2)
      err = pg__fail(-ECONNRESET, "shm: rank 0 could not create the "
                     "shared memory segment");
    else
      err = open_segment(c, seg, size);
    if (c->map)
      snprintf(name, namelen, "%s", seg);
  }
  free(v0);
  return err;
}

/* Setup exchange 2: everyone's pid and pid namespace (for the peers'
 * liveness), or the failure to attach (err, if not 0). */
static int share_pids(struct shm_comm *c, const struct pg__setup *s,
                      double timeout, int err)
{
  int i, n = c->n;
  unsigned long long pidns = 0;
  struct stat nsst;
  char val[160];
  void **vals = calloc((size_t)n, sizeof *vals);
  size_t *lens = calloc((size_t)n, sizeof *lens);

  if (stat("/proc/self/ns/pid", &nsst) == 0)
    pidns = (unsigned long long)nsst.st_ino;
  if (err)
    snprintf(val, sizeof val, "! %d", err);
  else
    snprintf(val, sizeof val, "%d %llu", (int)getpid(), pidns);
  if (!vals || !lens) {
    err = err ? err : pg__fail(-ENOMEM, "shm: out of memory");
  } else {
    int e2 = pg__store_allgather(s->store, s->ns, "att", c->me, n, val,
                                 strlen(val) + 1, timeout, vals, lens);
    if (e2 && !err)
      err = e2;
  }
  for (i = 0; !err && i < n; i++) {
    const char *v = vals[i];
    unsigned long long ns;
    int pid;

    if (!v || lens[i] == 0 || v[lens[i] - 1] != '\0' || v[0] == '!' ||
        sscanf(v, "%d %llu", &pid, &ns) != 2)
      err = pg__fail(-ECONNRESET, "shm: rank %d could not attach the "
                     "shared memory segment", i);
    else  /* A pid from another pid namespace means nothing here. */
      c->pid[i] = ns == pidns ? (pid_t)pid : 0;
  }
  pg__free_vals(vals, n);
  free(vals);
  free(lens);
  return err;
}

/* The segment's parts, the spin mode, and pidfds on the peers. */
static void comm_attach(struct shm_comm *c)
{
  struct layout l = layout_of(c->n, c->buf, c->ring);
  int i;

  c->ab = (struct shm_abort *)(c->map + l.abort_off);
  c->rk = (struct shm_rank *)(c->map + l.rank_off);
  c->rc = (struct shm_ring *)(c->map + l.ring_ctl_off);
  c->bufs = c->map + l.buf_off;
  c->rings = c->map + l.ring_off;
  c->spin = c->n <= pg__usable_cpus();
  c->small_max = c->spin ? SMALL_SPIN : SMALL_SLEEP;
  if (c->small_max > c->buf)
    c->small_max = c->buf;
  __atomic_store_n(&c->rk[c->me].pid, (int32_t)getpid(), __ATOMIC_RELAXED);
  for (i = 0; i < c->n; i++)
    if (i != c->me && c->pid[i] > 0)
      c->pidfd[i] = pg__pidfd_open(c->pid[i]);
}

/* Rank 0 makes the segment, everyone maps it and learns the others'
 * pids; the segment is unlinked as soon as all have it. */
/* $PG_SHM_BUF in [BUF_MIN, SEG_CAP] (0: unset), read by every rank at
 * once, so a bad value fails every rank alike instead of the one that
 * sizes the segment while the others wait for it. */
static int shm_buf_knob(size_t *out)
{
  const char *v = pg__knob(PG_KNOB_SHM_BUF);

  *out = 0;
  if (v && num_parse_count(v, BUF_MIN, SEG_CAP, out))
    return pg__fail(-EINVAL, "PG_SHM_BUF is '%s', expected bytes %u..%zu",
                    v, BUF_MIN, SEG_CAP);
  return 0;
}

int pg__shm_create(const struct pg__setup *s, struct pg__comm **out)
{
  struct shm_comm *c;
  char name[64] = "";
  double timeout = s->timeout > 0 ? s->timeout : 300;
  size_t buf_knob;
  int err;

  *out = NULL;
  if (s->n < 1 || s->me < 0 || s->me >= s->n)
    return pg__fail(-EINVAL, "shm: bad communicator (%d of %d)", s->me,
                    s->n);
  if ((err = shm_buf_knob(&buf_knob)))
    return err;
  c = comm_alloc(s->n, s->me);
  if (!c)
    return pg__fail(-ENOMEM, "shm: out of memory");
  c->buf_knob = buf_knob;
  err = share_segment(c, s, timeout, name, sizeof name);
  err = share_pids(c, s, timeout, err);
  /* Everyone that mapped it, rank 0 perhaps dead (Note [stale
   * segments]). */
  if (name[0])
    shm_unlink(name);
  if (err) {
    shm_destroy(&c->base);
    return err;
  }
  comm_attach(c);
  *out = &c->base;
  return 0;
}
/* Host memory: the mem_* hooks stay NULL. */
static const struct pg__comm_ops shm_ops = {
  .name = "cpu-shm",
  .all_reduce = shm_all_reduce,
  .broadcast = shm_broadcast,
  .reduce = shm_reduce,
  .all_gather = shm_all_gather,
  .reduce_scatter = shm_reduce_scatter,
  .barrier = shm_barrier,
  .send = shm_send,
  .recv = shm_recv,
  .destroy = shm_destroy,
};
