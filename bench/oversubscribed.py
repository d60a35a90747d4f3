"""Rank 0 computes while every other rank waits for it in MPI: how much do the waiters slow it?

Run unchanged under plain mpiexec and inside a pool. Rank 0 prints the compute time (best of 3).
"""

import time

from mpi4py import MPI

comm = MPI.COMM_WORLD


def compute() -> float:
    began = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    return time.perf_counter() - began


times = []
for _ in range(3):
    comm.Barrier()
    spent = compute() if comm.Get_rank() == 0 else 0.0
    comm.bcast(spent, root=0)  # the others wait here, in MPI, for rank 0
    times.append(spent)
if comm.Get_rank() == 0:
    print(min(times))
