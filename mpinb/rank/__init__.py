"""Code that runs inside each MPI rank of the pool (an ipyparallel engine)."""

from ._execute import run_cell, run_file
from ._setup import hello, init, reset

__all__ = ["hello", "init", "reset", "run_cell", "run_file"]
