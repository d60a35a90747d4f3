"""mpinb: a Jupyter environment for MPI.

``Pool`` keeps MPI ranks alive between cells; ``%load_ext mpinb`` adds the ``%mpi``/``%%mpi`` magics.

Names are imported on first use: every rank imports ``mpinb.rank`` at start-up, and must not pay
for the notebook-side modules (ipyparallel's client, widgets) while the other ranks start too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CellSyntaxError": ".errors",
    "CheckResult": ".teach",
    "DeadlockError": ".errors",
    "MPIHangError": ".errors",
    "RankDiedError": ".errors",
    "Pool": ".pool",
    "PoolError": ".errors",
    "PoolStartError": ".errors",
    "RankError": ".errors",
    "RankFailure": ".pool",
    "RunInterrupted": ".errors",
    "RunResult": ".pool",
    "RunTimeoutError": ".errors",
    "Trace": ".trace",
    "TransferError": ".errors",
    "TransferTimeoutError": ".errors",
    "breakpoint": "._breakpoint",
    "check": ".teach",
    "compare": ".widgets.compare",
    "current_pool": ".notebook",
    "last_trace": ".notebook",
    "load_ipython_extension": ".notebook",
    "progress": ".common._progress",
    "set_language": "._language",
    "unload_ipython_extension": ".notebook",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name is imported on first use
    from ._breakpoint import breakpoint
    from ._language import set_language
    from .common._progress import progress
    from .errors import (
        CellSyntaxError,
        DeadlockError,
        MPIHangError,
        PoolError,
        PoolStartError,
        RankDiedError,
        RankError,
        RunInterrupted,
        RunTimeoutError,
        TransferError,
        TransferTimeoutError,
    )
    from .notebook import current_pool, last_trace, load_ipython_extension, unload_ipython_extension
    from .pool import Pool, RankFailure, RunResult
    from .teach import CheckResult, check
    from .trace import Trace
    from .widgets.compare import compare

__all__ = [
    "CellSyntaxError", "CheckResult", "DeadlockError", "MPIHangError", "PoolError", "PoolStartError",
    "RankDiedError", "RankError", "RankFailure", "RunInterrupted", "RunResult", "RunTimeoutError", "Trace",
    "TransferError", "TransferTimeoutError",
    "breakpoint", "check", "compare", "current_pool",
    "last_trace", "load_ipython_extension", "progress", "set_language", "unload_ipython_extension", "Pool",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mpinb' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
