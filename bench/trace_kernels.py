"""Kernels for the cost of tracing: run in a pool with tracing on and off, compared in one run.

Rank 0 prints one JSON line: 1-byte ping-pong half round trip (uppercase and lowercase calls),
8 MB Send/Recv bandwidth (ranks 0 and 1) and 1 MB Allreduce time over all ranks; best of repeats.
"""

import json
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def best(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        comm.Barrier()
        times.append(fn())
    return min(times)


def pingpong(rounds, nbytes=1, lowercase=False):
    buf = np.zeros(nbytes, dtype=np.uint8)

    def run():
        start = time.perf_counter()
        for _ in range(rounds):
            if rank == 0:
                if lowercase:
                    comm.send(b"x", dest=1)
                    comm.recv(source=1)
                else:
                    comm.Send(buf, dest=1)
                    comm.Recv(buf, source=1)
            elif rank == 1:
                if lowercase:
                    comm.recv(source=0)
                    comm.send(b"x", dest=0)
                else:
                    comm.Recv(buf, source=0)
                    comm.Send(buf, dest=0)
        return (time.perf_counter() - start) / rounds / 2

    return best(run)


def allreduce(nbytes, rounds):
    send, recv = np.ones(nbytes // 8), np.empty(nbytes // 8)

    def run():
        start = time.perf_counter()
        for _ in range(rounds):
            comm.Allreduce(send, recv)
        return (time.perf_counter() - start) / rounds

    return best(run)


figures = {
    "latency_us": pingpong(1000) * 1e6,
    "latency_lowercase_us": pingpong(1000, lowercase=True) * 1e6,
    "bandwidth_8mb_gbs": 8 * 2**20 / pingpong(10, 8 * 2**20) / 1e9,
    "allreduce_1mb_ms": allreduce(2**20, 20) * 1e3,
}
if rank == 0:
    print(json.dumps(figures))
