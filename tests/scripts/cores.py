"""Prints the cores this rank may run on: where mpiexec placed it."""
import os

from mpi4py import MPI

print(MPI.COMM_WORLD.Get_rank(), sorted(os.sched_getaffinity(0)))
