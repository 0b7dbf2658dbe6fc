/* fake.h -- what the test-only CUDA runtime fake (fakecuda.c) offers the
 * NCCL fake (fakenccl.c).  Nothing here is part of libpg. */
#ifndef FAKE_H
#define FAKE_H

#include <cuda_runtime.h>

/* Runs fn(arg) on stream s's own thread, after everything enqueued on it
 * before (s may be 0, cudaStreamLegacy or cudaStreamPerThread: the
 * process's legacy stream).  Returns cudaSuccess or an error. */
cudaError_t fake_stream_enqueue(cudaStream_t s, void (*fn)(void *),
                                void *arg);

/* Sleeps a little, more the longer a wait has lasted (spins counts the
 * calls): the fake's kernels poll shared memory. */
void fake_backoff(unsigned *spins);

/* Makes the stream's work slow, so that a missing wait shows up as a
 * wrong result instead of passing by luck: every copy, memset and NCCL
 * operation first sleeps $FAKECUDA_DELAY_US (default 300) microseconds. */
void fake_work_delay(void);

/* The fake device that owns p (from cudaMalloc), or -1: host memory. */
int fake_ptr_device(const void *p);

/* Communicators made and not yet destroyed or aborted (fakenccl.c). */
int fake_live_comms(void);

/* Communicators, streams and events not destroyed; > 0: why says which.
 * The NCCL suite checks it at the end of every rank. */
int fake_leaks(char *why, size_t len);

/* The devices this process made a CUDA context on (a bit each; Note
 * [contexts] in fakecuda.c). */
unsigned fake_contexts(void);

#endif
