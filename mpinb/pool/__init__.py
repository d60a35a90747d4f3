"""Starting, supervising and driving a pool of MPI ranks (runs in the notebook's process).

The ranks' own side is :mod:`mpinb.rank`; ``_controller_main`` and ``_watchdog`` are the entry
points of the two helper processes that a pool starts.
"""

from ._launch import find_mpiexec
from ._pool import Pool, default_size
from ._result import RankFailure, RunResult

__all__ = ["Pool", "RankFailure", "RunResult", "default_size", "find_mpiexec"]
