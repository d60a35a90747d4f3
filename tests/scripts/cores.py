"""Prints the cores this rank may run on: where mpiexec placed it."""
import os
import sys

from mpi4py import MPI

# One write: unbuffered (PYTHONUNBUFFERED), print() writes each piece, and under plain mpiexec the
# ranks' pieces then interleave mid-line.
sys.stdout.write(f"{MPI.COMM_WORLD.Get_rank()} {sorted(os.sched_getaffinity(0))}\n")
