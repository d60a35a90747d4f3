"""Each rank passes a list to its right neighbour; prints in turn (which orders the prints, not
the lines mpiexec merges from the ranks' pipes)."""
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
got = comm.sendrecv([rank] * 3, dest=(rank + 1) % size, source=(rank - 1) % size)
for turn in range(size):
    if turn == rank:
        print(f"rank {rank} of {size} got {got}", flush=True)
    comm.Barrier()
