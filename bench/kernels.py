"""MPI micro-kernels shared by the benchmark scripts (imported from beside them, as under mpiexec).

Each figure is the best of several repeats after a warm-up, the usual way to take noise out on a
shared machine.
"""

import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def best(fn, repeats=5):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        comm.Barrier()
        times.append(fn())
    return min(times)


def pingpong(rounds, nbytes=1, lowercase=False, repeats=5):
    """Half round trip between ranks 0 and 1, in seconds."""
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

    return best(run, repeats)


def allreduce(nbytes, rounds, repeats=5):
    """Time of one Allreduce of ``nbytes`` over all ranks, in seconds."""
    send, recv = np.ones(nbytes // 8), np.empty(nbytes // 8)

    def run():
        start = time.perf_counter()
        for _ in range(rounds):
            comm.Allreduce(send, recv)
        return (time.perf_counter() - start) / rounds

    return best(run, repeats)


def rma_put(nbytes, rounds, repeats=5, locked=False):
    """Time of one ``Put`` of ``nbytes`` from every rank to the next, each closed by a ``Fence``
    (one-sided: the target takes no part but the fence), or with ``locked`` in a passive-target
    epoch of its own (``Lock``/``Unlock``: the target takes no part at all), in seconds."""
    exposed, source = np.zeros(nbytes, dtype=np.uint8), np.ones(nbytes, dtype=np.uint8)
    window = MPI.Win.Create(exposed, comm=comm)
    target = (rank + 1) % comm.Get_size()
    try:
        def run():
            window.Fence()
            start = time.perf_counter()
            for _ in range(rounds):
                if locked:
                    window.Lock(target, MPI.LOCK_SHARED)
                    window.Put(source, target)
                    window.Unlock(target)
                else:
                    window.Put(source, target)
                    window.Fence()
            elapsed = (time.perf_counter() - start) / rounds
            window.Fence()
            return elapsed

        return best(run, repeats)
    finally:
        window.Free()


def tracing_figures():
    """The figures compared with tracing on and off (see ``trace_kernels.py``)."""
    return {
        "latency_us": pingpong(1000) * 1e6,
        "latency_lowercase_us": pingpong(1000, lowercase=True) * 1e6,
        "bandwidth_8mb_gbs": 8 * 2**20 / pingpong(10, 8 * 2**20) / 1e9,
        # rounds enough for tens of milliseconds per repeat: fewer read this VM's memory bursts
        "allreduce_1mb_ms": allreduce(2**20, 100) * 1e3,
        "allreduce_16kb_ms": allreduce(2**14, 400) * 1e3,
        "put_1mb_gbs": 2**20 / rma_put(2**20, 50) / 1e9,
        "put_locked_1mb_gbs": 2**20 / rma_put(2**20, 50, locked=True) / 1e9,
        # a small epoch shows what a traced Fence itself adds (its members' agreement)
        "put_fence_1kb_us": rma_put(1024, 200) * 1e6,
    }


def crowd_figures():
    """The figure compared with tracing on and off when ranks share cores."""
    return {"allreduce_16kb_ms": allreduce(2**14, 400) * 1e3}
