"""ar_gloo.py -- torch.distributed all_reduce with the Gloo backend (f32
SUM, in place) for scripts/bench/allreduce.  A cdrun worker:
init_process_group("gloo") with env:// reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT from cdrun.  Run with Debian's python3-torch
(/usr/bin/python3).  Same method and output as ar_libpg.c (ar_common.h):
per size one checked all-reduce of the pattern (rank r, element i:
(7 i + 13 r) mod 251: every sum exact in f32), zeros, warm-up rounds
(>= 0.1 s, at least 2), the slowest rank's estimate, a barrier, the timed loop; time per op = max over
ranks of the mean (all_reduce MAX).  Rank 0 prints the result lines."""
import os
import sys
import time

import torch
import torch.distributed as dist

SIZES = ([int(x) for x in os.environ.get("AR_SIZES", "").split()]
         or [4096, 65536, 1 << 20, 16 << 20, 64 << 20])
TARGET_S, MIN_ITERS, MAX_ITERS = 0.25, 5, 200000
WARM_S, WARM_MAX_ROUNDS = 0.1, 1000
TIMED_MIN_S, MAX_PASSES = 0.2, 10


def max_over_ranks(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def pattern(cnt, r):
    i = torch.arange(cnt, dtype=torch.int64)
    return ((7 * (i % 251) + 13 * r) % 251).to(torch.float32)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, ws = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"ar_gloo: n={ws} torch={torch.__version__}", file=sys.stderr)
    for nbytes in SIZES:
        cnt = nbytes // 4
        rnd = 50 if nbytes <= 65536 else 10 if nbytes <= (1 << 20) else 2
        buf = pattern(cnt, rank)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        want = sum(pattern(cnt, r) for r in range(ws))
        bad = int((buf != want).sum().item())
        del want
        if bad:
            print(f"ar_gloo: rank {rank}: {bad} of {cnt} elements wrong at "
                  f"{nbytes} bytes", file=sys.stderr)
        if max_over_ranks(bad) > 0:
            if rank == 0:
                print(f"ar_gloo: WRONG RESULT at {nbytes} bytes",
                      file=sys.stderr)
            return 1
        buf.zero_()
        warm, rounds = 0.0, 0
        while rounds < 2 or (warm < WARM_S and rounds < WARM_MAX_ROUNDS):
            t0 = time.perf_counter()
            for _ in range(rnd):
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            est = max_over_ranks((time.perf_counter() - t0) / rnd)
            warm += est * rnd
            rounds += 1
        # Timed passes (see ar_common.h): mine is this rank's time, seen
        # the slowest rank's.
        mine = seen = 0.0
        done = passes = 0
        while passes < 1 or (seen < TIMED_MIN_S and passes < MAX_PASSES):
            iters = int(min(max((TARGET_S - seen) / est, MIN_ITERS),
                            MAX_ITERS))
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            dt = time.perf_counter() - t0
            mine += dt
            done += iters
            dt = max_over_ranks(dt)
            seen += dt
            est = dt / iters
            passes += 1
        dt = max_over_ranks(mine / done)
        if rank == 0:
            algbw = nbytes / dt / 1e9
            busbw = algbw * 2 * (ws - 1) / ws
            print(f"result impl=gloo n={ws} bytes={nbytes} iters={done} "
                  f"time_us={dt * 1e6:.3f} algbw={algbw:.4f} "
                  f"busbw={busbw:.4f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
