"""Benchmarks of mpinb against its peers (plain ipyparallel, plain mpiexec), side by side."""
