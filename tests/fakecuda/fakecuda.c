/* fakecuda.c -- a test-only fake of the CUDA runtime functions libpg's
 * NCCL backend calls, so that CI runs libpg/nccl/ without a GPU.
 *
 * "Device" memory is host memory.  Every stream is a real thread that runs
 * what is enqueued on it in order; events are recorded by the stream when
 * it gets there; cudaStreamWaitEvent makes a stream wait (on its thread,
 * not the caller's) for the event's last recording.  Streams never
 * synchronize implicitly with each other, not even with the legacy default
 * stream, which is stricter than CUDA for non-blocking streams and the
 * same for what libpg uses: a missing cudaStreamWaitEvent shows up as a
 * wrong result.  Synchronous copies and memsets go through the legacy
 * stream and wait for it, as in CUDA.
 *
 * cudaMallocAsync/cudaFreeAsync are a stream-ordered pool that reuses
 * freed memory as CUDA's does (Note [stream-ordered pool]); the devices a
 * process made CUDA contexts on are recorded (Note [contexts]).
 *
 * Devices: $FAKECUDA_DEVICES (default 4; 0: cudaErrorNoDevice).
 * Work on streams is slowed down (fake_work_delay) so that ordering bugs
 * do not pass by luck.
 *
 * Stricter than a GPU where libpg could go wrong unseen:
 * - streams, events and memory belong to the device current when they
 *   were made; recording an event on another device's stream, or
 *   enqueueing on a stream of a device that is not current, fails
 *   (cudaErrorInvalidResourceHandle), and fake_check_ptr tells the NCCL
 *   fake whose memory a buffer is (cudaPointerGetAttributes as well);
 * - cudaFree and cudaDeviceSynchronize wait for every stream;
 * - stream capture: an event recorded on a capturing stream (or one that
 *   joined the capture through cudaStreamWaitEvent) cannot be queried;
 *   while a global-mode capture runs, a query from a thread whose capture
 *   mode is global, or work on the legacy stream, invalidates it
 *   (cudaStreamEndCapture: cudaErrorStreamCaptureInvalidated);
 * - streams and events are counted: fake_leaks() says what is left. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

struct task {
  void (*fn)(void *);
  void *arg;
  struct task *next;
};

struct CUstream_st {
  int dev;
  bool capturing;           /* in a capture (began it or joined it) */
  struct CUstream_st *all_next;  /* the list of live streams (all_mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* work queued, or work finished */
  struct task *head, *tail;
  uint64_t queued, finished;
  bool stop;
  pthread_t th;
};

struct CUevent_st {
  int dev;
  bool captured;            /* its last record was inside a capture */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded;        /* recordings asked for */
  uint64_t reached;         /* recordings the stream has got to */
  int refs;                 /* the creator's, each queued record/wait's:
                               CUDA lets an event be destroyed with work
                               on it still queued */
};

/* Tells the tests they run on the fake (check_pg_nccl.c). */
int fakecuda_is_fake = 1;

static __thread cudaError_t last_error;
static __thread int current_device;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;
static struct CUstream_st *legacy;
static __thread enum cudaStreamCaptureMode capture_mode =
  cudaStreamCaptureModeGlobal;

/* Every stream made by cudaStreamCreate*, for cudaFree and capture. */
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *all_streams;
static int live_streams, live_events;   /* all_mu */
static int captures;                    /* global-mode captures running */
static bool capture_invalid;            /* all_mu */

/* Note [contexts]: the CUDA runtime makes the current device's primary
 * context on a thread's first call that needs one (device 0 if the
 * thread never called cudaSetDevice): a helper thread that forgets
 * cudaSetDevice puts a context -- hundreds of MiB -- on GPU 0 from every
 * rank.  The fake records, per process, the devices such calls ran on
 * (fake_contexts). */
static unsigned contexts;           /* atomic: a bit per device */

static void touch(void)
{
  __atomic_or_fetch(&contexts, 1u << (current_device & 31),
                    __ATOMIC_RELAXED);
}

unsigned fake_contexts(void)
{
  return __atomic_load_n(&contexts, __ATOMIC_RELAXED);
}

static cudaError_t fail(cudaError_t e)
{
  if (e != cudaSuccess)
    last_error = e;
  return e;
}

void fake_backoff(unsigned *spins)
{
  struct timespec ts = { 0, 0 };

  if (++*spins < 64) {
    sched_yield();
    return;
  }
  ts.tv_nsec = *spins < 1000 ? 20000 : 200000;
  nanosleep(&ts, NULL);
}

void fake_work_delay(void)
{
  const char *v = getenv("FAKECUDA_DELAY_US");
  long us = v && *v ? atol(v) : 300;
  struct timespec ts;

  if (us <= 0)
    return;
  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (us % 1000000) * 1000;
  nanosleep(&ts, NULL);
}

static int devices(void)
{
  const char *v = getenv("FAKECUDA_DEVICES");

  return v && *v ? atoi(v) : 4;
}

/* ---- streams --------------------------------------------------------- */

static void *stream_main(void *arg)
{
  struct CUstream_st *s = arg;
  struct task *t;

  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop)
      pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head)
      break;
    t = s->head;
    pthread_mutex_unlock(&s->mu);
    t->fn(t->arg);
    pthread_mutex_lock(&s->mu);
    s->head = t->next;
    if (!s->head)
      s->tail = NULL;
    s->finished++;
    free(t);
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct CUstream_st *stream_new(void)
{
  struct CUstream_st *s = calloc(1, sizeof *s);

  if (!s)
    return NULL;
  s->dev = -1;  /* the legacy stream: any device's */
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->th, NULL, stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

static void legacy_init(void)
{
  legacy = stream_new();
  if (!legacy)
    abort();
}

/* The legacy stream's implicit synchronization with a capturing stream
 * invalidates the capture, as on a GPU. */
static void legacy_use(cudaStream_t s)
{
  if (s != 0 && s != cudaStreamLegacy)
    return;
  pthread_mutex_lock(&all_mu);
  if (captures > 0)
    capture_invalid = true;
  pthread_mutex_unlock(&all_mu);
}

/* A thread in global capture mode may not query while a global capture
 * runs: the query fails and the capture is invalidated. */
static bool unsafe_during_capture(void)
{
  bool bad;

  pthread_mutex_lock(&all_mu);
  bad = captures > 0 && capture_mode == cudaStreamCaptureModeGlobal;
  if (bad)
    capture_invalid = true;
  pthread_mutex_unlock(&all_mu);
  return bad;
}

static struct CUstream_st *resolve(cudaStream_t s)
{
  if (s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    pthread_once(&legacy_once, legacy_init);
    return legacy;
  }
  return s;
}

cudaError_t fake_stream_enqueue(cudaStream_t hs, void (*fn)(void *),
                                void *arg)
{
  struct CUstream_st *s = resolve(hs);
  struct task *t;

  if (s->dev >= 0 && s->dev != current_device) {
    fprintf(stderr, "fakecuda: work for device %d's stream issued with "
            "device %d current\n", s->dev, current_device);
    return fail(cudaErrorInvalidResourceHandle);
  }
  legacy_use(hs);
  t = malloc(sizeof *t);
  if (!t)
    return fail(cudaErrorMemoryAllocation);
  t->fn = fn;
  t->arg = arg;
  t->next = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->tail)
    s->tail->next = t;
  else
    s->head = t;
  s->tail = t;
  s->queued++;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
  struct CUstream_st *s = stream_new();

  touch();
  (void)flags;
  *out = s;
  if (!s)
    return fail(cudaErrorMemoryAllocation);
  s->dev = current_device;
  pthread_mutex_lock(&all_mu);
  s->all_next = all_streams;
  all_streams = s;
  live_streams++;
  pthread_mutex_unlock(&all_mu);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out)
{
  return cudaStreamCreateWithFlags(out, 0);
}

cudaError_t cudaStreamSynchronize(cudaStream_t hs)
{
  struct CUstream_st *s = resolve(hs);
  uint64_t want;

  touch();
  pthread_mutex_lock(&s->mu);
  want = s->queued;
  while (s->finished < want)
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t hs)
{
  struct CUstream_st *s = resolve(hs);
  bool idle;

  touch();
  if (unsafe_during_capture())
    return fail(cudaErrorStreamCaptureUnsupported);
  pthread_mutex_lock(&s->mu);
  idle = s->finished == s->queued;
  pthread_mutex_unlock(&s->mu);
  return idle ? cudaSuccess : cudaErrorNotReady;
}

/* Waits for the queue to drain, then ends the thread. */
cudaError_t cudaStreamDestroy(cudaStream_t hs)
{
  struct CUstream_st *s = hs, **pp;
  bool found = false;

  touch();
  if (!s || s == resolve(0))
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&all_mu);
  for (pp = &all_streams; *pp && *pp != s; pp = &(*pp)->all_next)
    ;
  if (*pp) {
    *pp = s->all_next;
    live_streams--;
    found = true;
  }
  pthread_mutex_unlock(&all_mu);
  if (!found)
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->th, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return cudaSuccess;
}

/* ---- events ------------------------------------------------------------ */

static void ev_unref(struct CUevent_st *e)
{
  if (__atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
  struct CUevent_st *e = calloc(1, sizeof *e);

  touch();
  (void)flags;
  if (!e)
    return fail(cudaErrorMemoryAllocation);
  e->refs = 1;
  e->dev = current_device;
  pthread_mutex_lock(&all_mu);
  live_events++;
  pthread_mutex_unlock(&all_mu);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out)
{
  return cudaEventCreateWithFlags(out, 0);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
  touch();
  if (!e)
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&all_mu);
  live_events--;
  pthread_mutex_unlock(&all_mu);
  ev_unref(e);
  return cudaSuccess;
}

struct ev_arg {
  struct CUevent_st *e;
  uint64_t gen;
};

static void ev_reach(void *p)
{
  struct ev_arg *a = p;

  pthread_mutex_lock(&a->e->mu);
  if (a->e->reached < a->gen)
    a->e->reached = a->gen;
  pthread_cond_broadcast(&a->e->cv);
  pthread_mutex_unlock(&a->e->mu);
  ev_unref(a->e);
  free(a);
}

static void ev_wait(void *p)
{
  struct ev_arg *a = p;

  pthread_mutex_lock(&a->e->mu);
  while (a->e->reached < a->gen)
    pthread_cond_wait(&a->e->cv, &a->e->mu);
  pthread_mutex_unlock(&a->e->mu);
  ev_unref(a->e);
  free(a);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
  struct CUstream_st *rs = resolve(s);
  struct ev_arg *a;
  cudaError_t r;

  touch();
  if (!e)
    return fail(cudaErrorInvalidResourceHandle);
  if (rs->dev >= 0 && rs->dev != e->dev) {
    fprintf(stderr, "fakecuda: event of device %d recorded on a stream of "
            "device %d\n", e->dev, rs->dev);
    return fail(cudaErrorInvalidResourceHandle);
  }
  a = malloc(sizeof *a);
  if (!a)
    return fail(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&e->mu);
  a->e = e;
  a->gen = ++e->recorded;
  e->captured = rs->capturing;
  pthread_mutex_unlock(&e->mu);
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
  r = fake_stream_enqueue(s, ev_reach, a);
  if (r != cudaSuccess) {
    ev_unref(e);
    free(a);
    return r;
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
  bool done;

  touch();
  if (!e)
    return fail(cudaErrorInvalidResourceHandle);
  if (unsafe_during_capture())
    return fail(cudaErrorStreamCaptureUnsupported);
  pthread_mutex_lock(&e->mu);
  if (e->captured) {
    pthread_mutex_unlock(&e->mu);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  done = e->reached >= e->recorded;
  pthread_mutex_unlock(&e->mu);
  return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
  touch();
  if (!e)
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&e->mu);
  while (e->reached < e->recorded)
    pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e,
                                unsigned int flags)
{
  struct ev_arg *a;
  uint64_t gen;

  touch();
  (void)flags;
  if (!e)
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&e->mu);
  gen = e->recorded;
  if (e->captured && s != 0 && s != cudaStreamLegacy &&
      s != cudaStreamPerThread)
    ((struct CUstream_st *)s)->capturing = true;  /* joins the capture */
  pthread_mutex_unlock(&e->mu);
  if (gen == 0)
    return cudaSuccess;  /* never recorded: nothing to wait for */
  a = malloc(sizeof *a);
  if (!a)
    return fail(cudaErrorMemoryAllocation);
  a->e = e;
  a->gen = gen;
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
  if (fake_stream_enqueue(s, ev_wait, a) != cudaSuccess) {
    ev_unref(e);
    free(a);
    return last_error;
  }
  return cudaSuccess;
}

/* ---- memory ----------------------------------------------------------- */

/* "Device" memory: every allocation is listed with its device, so a
 * pointer anywhere inside one is known for the device's. */
struct alloc {
  char *base;
  size_t bytes;
  int dev;
  struct alloc *next;
};

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;

int fake_ptr_device(const void *p)
{
  const char *q = p;
  struct alloc *a;
  int dev = -1;

  pthread_mutex_lock(&mem_mu);
  for (a = allocs; a; a = a->next)
    if (q >= a->base && q < a->base + a->bytes) {
      dev = a->dev;
      break;
    }
  pthread_mutex_unlock(&mem_mu);
  if (dev < 0 && p) {
    /* $FAKECUDA_HOST_IS_DEVICE=1: host memory passes for the current
     * device's (tests/helpers/pgtest's buffers are malloc'd). */
    const char *v = getenv("FAKECUDA_HOST_IS_DEVICE");

    if (v && strcmp(v, "1") == 0)
      dev = current_device;
  }
  return dev;
}

/* p lies in a cudaMalloc'd block. */
static bool known(const void *p)
{
  const char *q = p;
  struct alloc *a;

  pthread_mutex_lock(&mem_mu);
  for (a = allocs; a && !(q >= a->base && q < a->base + a->bytes);
       a = a->next)
    ;
  pthread_mutex_unlock(&mem_mu);
  return a != NULL;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
  struct alloc *a = malloc(sizeof *a);

  touch();
  if (!a || posix_memalign(p, 256, bytes ? bytes : 1) != 0) {
    free(a);
    *p = NULL;
    return fail(cudaErrorMemoryAllocation);
  }
  a->base = *p;
  a->bytes = bytes ? bytes : 1;
  a->dev = current_device;
  pthread_mutex_lock(&mem_mu);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&mem_mu);
  return cudaSuccess;
}

/* Unlists p's allocation; false if p is not the start of one. */
static bool alloc_del(void *p)
{
  struct alloc **pp, *a = NULL;

  pthread_mutex_lock(&mem_mu);
  for (pp = &allocs; *pp; pp = &(*pp)->next)
    if ((*pp)->base == p) {
      a = *pp;
      *pp = a->next;
      break;
    }
  pthread_mutex_unlock(&mem_mu);
  free(a);
  return a != NULL;
}

/* Waits for every stream first, as CUDA's cudaFree does. */
cudaError_t cudaFree(void *p)
{
  touch();
  if (!p)
    return cudaSuccess;
  cudaDeviceSynchronize();
  if (!alloc_del(p))
    return fail(cudaErrorInvalidValue);
  free(p);
  return cudaSuccess;
}

/* Note [stream-ordered pool] (CUDA's cudaMallocAsync/cudaFreeAsync
 * semantics, "Stream Ordered Memory Allocator" in the CUDA programming
 * guide): an allocation exists from the point its stream reaches it, and
 * a freed block may be handed out again at once to an allocation on the
 * stream that freed it (stream order keeps them apart) and to any other
 * stream once the freeing stream has reached the free.  The fake's pool
 * does the same and makes every such point visible: the block is filled
 * with POISON_ALLOC when its stream reaches the allocation and with
 * POISON_FREE when it reaches the free, so work that touches the memory
 * outside its allocation's lifetime in stream order (a missing wait)
 * reads or leaves garbage, as reuse on a GPU would. */
#define POISON_ALLOC 0xa5
#define POISON_FREE 0xdb
#define POOL_KEEP 64               /* freed blocks kept for reuse */
#define REACHED 1
#define TAKEN 2

struct pooled {
  char *base;
  size_t bytes;
  int dev;
  struct CUstream_st *stream;      /* where it was freed */
  int reached;                     /* atomic: REACHED once that stream got
                                      there; TAKEN: reused before (on the
                                      same stream), poison_free frees b */
  struct pooled *next;
};

static struct pooled *pool;         /* mem_mu */
static int npool;

static void poison_alloc(void *p)
{
  struct alloc *a = p;

  memset(a->base, POISON_ALLOC, a->bytes);
  free(a);
}

static void poison_free(void *p)
{
  struct pooled *b = p;

  memset(b->base, POISON_FREE, b->bytes);
  if (__atomic_exchange_n(&b->reached, REACHED, __ATOMIC_ACQ_REL) == TAKEN)
    free(b);
}

/* A freed block for bytes on s (mem_mu held), or NULL. */
static struct pooled *pool_take(size_t bytes, struct CUstream_st *s)
{
  struct pooled **pp, *b;

  for (pp = &pool; (b = *pp) != NULL; pp = &b->next)
    if (b->dev == current_device && b->bytes >= bytes &&
        (b->stream == s || __atomic_load_n(&b->reached, __ATOMIC_ACQUIRE))) {
      *pp = b->next;
      npool--;
      return b;
    }
  return NULL;
}

/* Drops the oldest reached blocks beyond POOL_KEEP (mem_mu held). */
static void pool_trim(void)
{
  struct pooled **pp = &pool, *b;
  int i = 0;

  while ((b = *pp) != NULL) {
    if (++i > POOL_KEEP && __atomic_load_n(&b->reached, __ATOMIC_ACQUIRE)) {
      *pp = b->next;
      npool--;
      free(b->base);
      free(b);
      continue;
    }
    pp = &b->next;
  }
}

cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t hs)
{
  struct CUstream_st *s = resolve(hs);
  struct alloc *a = malloc(sizeof *a), *mark = malloc(sizeof *mark);
  struct pooled *b;
  cudaError_t e;

  touch();
  if (!a || !mark) {
    free(a);
    free(mark);
    *p = NULL;
    return fail(cudaErrorMemoryAllocation);
  }
  if (!bytes)
    bytes = 1;
  pthread_mutex_lock(&mem_mu);
  b = pool_take(bytes, s);
  pthread_mutex_unlock(&mem_mu);
  if (b) {
    *p = b->base;
    bytes = b->bytes;
    /* Same stream, free not reached yet: poison_free frees b. */
    if (__atomic_exchange_n(&b->reached, TAKEN, __ATOMIC_ACQ_REL) == REACHED)
      free(b);
  } else if (posix_memalign(p, 256, bytes) != 0) {
    free(a);
    free(mark);
    *p = NULL;
    return fail(cudaErrorMemoryAllocation);
  }
  a->base = *p;
  a->bytes = bytes;
  a->dev = current_device;
  *mark = *a;
  e = fake_stream_enqueue(hs, poison_alloc, mark);
  if (e != cudaSuccess) {
    free(mark);
    free(a);
    free(*p);
    *p = NULL;
    return e;
  }
  pthread_mutex_lock(&mem_mu);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&mem_mu);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t hs)
{
  struct alloc **pp, *a = NULL;
  struct pooled *b;
  cudaError_t e;

  touch();
  if (!p)
    return cudaSuccess;
  b = calloc(1, sizeof *b);
  if (!b)
    return fail(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&mem_mu);
  for (pp = &allocs; *pp; pp = &(*pp)->next)
    if ((*pp)->base == p) {
      a = *pp;
      *pp = a->next;
      break;
    }
  pthread_mutex_unlock(&mem_mu);
  if (!a) {
    free(b);
    return fail(cudaErrorInvalidValue);
  }
  b->base = a->base;
  b->bytes = a->bytes;
  b->dev = a->dev;
  b->stream = resolve(hs);
  free(a);
  e = fake_stream_enqueue(hs, poison_free, b);
  if (e != cudaSuccess) {
    free(b->base);
    free(b);
    return e;
  }
  pthread_mutex_lock(&mem_mu);
  b->next = pool;
  pool = b;
  npool++;
  pool_trim();
  pthread_mutex_unlock(&mem_mu);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a,
                                     const void *p)
{
  const char *v = getenv("FAKECUDA_HOST_IS_DEVICE");
  int dev = fake_ptr_device(p);

  memset(a, 0, sizeof *a);
  a->type = dev >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  if (dev >= 0 && v && strcmp(v, "1") == 0 && !known(p))
    a->type = cudaMemoryTypeManaged;  /* any device's, as the knob says */
  a->device = dev >= 0 ? dev : -2;
  a->devicePointer = dev >= 0 ? (void *)p : NULL;
  a->hostPointer = dev >= 0 ? NULL : (void *)p;
  return cudaSuccess;
}

struct copy_arg {
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  bool set;
};

static void do_copy(void *p)
{
  struct copy_arg *a = p;

  fake_work_delay();
  if (a->set)
    memset(a->dst, a->value, a->bytes);
  else
    memmove(a->dst, a->src, a->bytes);
  free(a);
}

static cudaError_t enqueue_copy(void *dst, const void *src, size_t bytes,
                                int value, bool set, cudaStream_t s)
{
  struct copy_arg *a = malloc(sizeof *a);

  if (!a)
    return fail(cudaErrorMemoryAllocation);
  a->dst = dst;
  a->src = src;
  a->bytes = bytes;
  a->value = value;
  a->set = set;
  if (fake_stream_enqueue(s, do_copy, a) != cudaSuccess) {
    free(a);
    return last_error;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            enum cudaMemcpyKind kind, cudaStream_t s)
{
  touch();
  (void)kind;
  return enqueue_copy(dst, src, bytes, 0, false, s);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes,
                            cudaStream_t s)
{
  touch();
  return enqueue_copy(dst, NULL, bytes, value, true, s);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                       enum cudaMemcpyKind kind)
{
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, 0);

  return e == cudaSuccess ? cudaStreamSynchronize(0) : e;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes)
{
  cudaError_t e = cudaMemsetAsync(dst, value, bytes, 0);

  return e == cudaSuccess ? cudaStreamSynchronize(0) : e;
}

/* ---- devices and errors ------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *n)
{
  *n = devices();
  if (*n < 1) {
    *n = 0;
    return fail(cudaErrorNoDevice);
  }
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev)
{
  if (dev < 0 || dev >= devices())
    return fail(cudaErrorInvalidDevice);
  current_device = dev;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *dev)
{
  *dev = current_device;
  return cudaSuccess;
}

/* Every stream (the fake does not tell devices apart here). */
cudaError_t cudaDeviceSynchronize(void)
{
  struct CUstream_st *s;
  int i, n;

  touch();
  cudaStreamSynchronize(0);
  for (i = 0;; i++) {
    pthread_mutex_lock(&all_mu);
    for (s = all_streams, n = 0; s && n < i; s = s->all_next)
      n++;
    pthread_mutex_unlock(&all_mu);
    if (!s)
      break;
    /* Streams are destroyed by their owners only after their last use. */
    cudaStreamSynchronize(s);
  }
  return cudaSuccess;
}

/* ---- stream capture ------------------------------------------------------ */

cudaError_t cudaThreadExchangeStreamCaptureMode(
    enum cudaStreamCaptureMode *mode)
{
  enum cudaStreamCaptureMode old = capture_mode;

  capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t hs,
                                   enum cudaStreamCaptureMode mode)
{
  struct CUstream_st *s = hs;

  touch();
  if (hs == 0 || hs == cudaStreamLegacy)
    return fail(cudaErrorStreamCaptureUnsupported);
  s = resolve(hs);
  if (s->capturing)
    return fail(cudaErrorIllegalState);
  s->capturing = true;
  pthread_mutex_lock(&all_mu);
  if (mode == cudaStreamCaptureModeGlobal)
    captures++;
  capture_invalid = false;
  pthread_mutex_unlock(&all_mu);
  return cudaSuccess;
}

/* The fake runs captured work as it is enqueued; the graph is a token. */
cudaError_t cudaStreamEndCapture(cudaStream_t hs, cudaGraph_t *graph)
{
  static int token;
  struct CUstream_st *s = resolve(hs), *o;
  bool invalid;

  if (!s->capturing)
    return fail(cudaErrorIllegalState);
  pthread_mutex_lock(&all_mu);
  for (o = all_streams; o; o = o->all_next)
    o->capturing = false;
  s->capturing = false;
  if (captures > 0)
    captures--;
  invalid = capture_invalid;
  capture_invalid = false;
  pthread_mutex_unlock(&all_mu);
  *graph = invalid ? NULL : (cudaGraph_t)&token;
  return invalid ? fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t hs,
                                  enum cudaStreamCaptureStatus *st)
{
  struct CUstream_st *s = resolve(hs);

  *st = s->capturing ? cudaStreamCaptureStatusActive
                     : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

/* ---- accounting ---------------------------------------------------------- */

int fake_leaks(char *why, size_t len)
{
  int comms = fake_live_comms(), n;

  pthread_mutex_lock(&all_mu);
  n = comms + live_streams + live_events;
  if (n)
    snprintf(why, len, "%d communicators, %d streams, %d events not "
             "destroyed", comms, live_streams, live_events);
  pthread_mutex_unlock(&all_mu);
  return n;
}

cudaError_t cudaGetLastError(void)
{
  cudaError_t e = last_error;

  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void)
{
  return last_error;
}

const char *cudaGetErrorString(cudaError_t e)
{
  switch (e) {
  case cudaSuccess: return "no error (fake)";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected (fake)";
  case cudaErrorInvalidDevice: return "invalid device ordinal (fake)";
  case cudaErrorMemoryAllocation: return "out of memory (fake)";
  case cudaErrorNotReady: return "device not ready (fake)";
  case cudaErrorInvalidResourceHandle:
    return "invalid resource handle (fake)";
  case cudaErrorInvalidValue: return "invalid argument (fake)";
  case cudaErrorStreamCaptureUnsupported:
    return "operation not permitted when stream is capturing (fake)";
  case cudaErrorStreamCaptureInvalidated:
    return "operation failed due to a previous error during capture "
           "(fake)";
  default: return "unknown error (fake)";
  }
}
