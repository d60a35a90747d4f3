"""MPI micro-benchmarks, run unchanged under plain mpiexec and inside a pool (via run_file).

Rank 0 prints one JSON line: ping-pong latency (1 byte, ranks 0 and 1), bandwidth (8 MB Send/Recv,
ranks 0 and 1) and 8 MB Allreduce time over all ranks. Each figure is the best of several repeats
after a warm-up, the usual way to take noise out on a shared machine.
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def best(fn, repeats=REPEATS):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        comm.Barrier()
        times.append(fn())
    return min(times)


def pingpong(nbytes, rounds):
    buf = np.zeros(nbytes, dtype=np.uint8)

    def run():
        start = time.perf_counter()
        for _ in range(rounds):
            if rank == 0:
                comm.Send(buf, dest=1)
                comm.Recv(buf, source=1)
            elif rank == 1:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)
        return (time.perf_counter() - start) / rounds / 2

    return best(run)


def allreduce(nbytes, rounds):
    send = np.ones(nbytes // 8)
    recv = np.empty_like(send)

    def run():
        start = time.perf_counter()
        for _ in range(rounds):
            comm.Allreduce(send, recv)
        return (time.perf_counter() - start) / rounds

    return best(run)


latency = pingpong(1, 2000)
half_trip_8mb = pingpong(8 * 2**20, 10)
allreduce_8mb = allreduce(8 * 2**20, 5)
if rank == 0:
    print(json.dumps({
        "latency_us": latency * 1e6,
        "bandwidth_gbs": 8 * 2**20 / half_trip_8mb / 1e9,
        "allreduce_8mb_ms": allreduce_8mb * 1e3,
    }))
