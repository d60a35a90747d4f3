from mpi4py import MPI

x = (
