"""mpinb: a Jupyter environment for MPI.

``Pool`` keeps MPI ranks alive between cells; ``%load_ext mpinb`` adds the ``%mpi``/``%%mpi`` magics.

Names are imported on first use: every rank imports ``mpinb.rank`` at start-up, and must not pay
for the notebook-side modules (ipyparallel's client, widgets) while the other ranks start too.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "CellSyntaxError": ".errors",
    "CheckResult": ".grading",
    "DeadlockError": ".errors",
    "MPIHangError": ".errors",
    "RankDiedError": ".errors",
    "Pool": ".pool",
    "PoolError": ".errors",
    "PoolStartError": ".errors",
    "RankError": ".errors",
    "RankFailure": ".result",
    "RunResult": ".result",
    "Trace": ".trace",
    "check": ".grading",
    "current_pool": ".session",
    "last_trace": ".session",
    "load_ipython_extension": ".magics",
    "unload_ipython_extension": ".magics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mpinb' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
