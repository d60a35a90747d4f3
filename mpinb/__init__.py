"""mpinb: a Jupyter environment for MPI.

``Pool`` keeps MPI ranks alive between cells; ``%load_ext mpinb`` adds the ``%mpi``/``%%mpi`` magics.
"""

from .errors import CellSyntaxError, PoolError, PoolStartError, RankError
from .magics import load_ipython_extension, unload_ipython_extension
from .pool import Pool
from .result import RankFailure, RunResult
from .session import last_trace
from .trace import Trace

__version__ = "0.1.0"

__all__ = [
    "CellSyntaxError",
    "Pool",
    "PoolError",
    "PoolStartError",
    "RankError",
    "RankFailure",
    "RunResult",
    "Trace",
    "last_trace",
    "load_ipython_extension",
    "unload_ipython_extension",
]
