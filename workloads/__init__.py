"""Workloads that both the tests and the benchmarks run: each imports them from here, neither
imports the other."""
