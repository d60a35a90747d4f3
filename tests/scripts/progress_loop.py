"""A script that shows progress as it would on a cluster: under plain mpiexec, rank 0 prints a bar."""

from mpi4py import MPI

import mpinb

total = 0
for step in mpinb.progress(range(50), desc="steps"):
    total += MPI.COMM_WORLD.allreduce(step)
print(f"rank {MPI.COMM_WORLD.Get_rank()}: {total}")
