"""The world this process runs on, as mpinb keeps it.

It holds the world's traced twin and mpinb's own copy of the world.

``_tracing`` sets both (at start-up, in a spawned process, at each fresh world); the calls'
modules, the runtime and the relay read them here, below the module that builds the twins.
"""

from __future__ import annotations

from typing import Any

from mpi4py import MPI

_twin: Any = None  # the world's twin (it carries mpinb's attributes)
_own: MPI.Intracomm | None = None  # mpinb's own copy of the world, never touched by user code


def traced_world() -> Any:
    """The world's twin (``MPI.COMM_WORLD`` while a traced run runs); ``None`` before tracing is on."""
    return _twin


def housekeeping() -> MPI.Intracomm:
    """mpinb's own copy of the world (for its traffic between cells, such as spreading data)."""
    if _own is None:
        raise RuntimeError("this rank has not been set up by the pool (mpinb.rank.init)")
    return _own


def set_traced_world(twin: Any) -> None:
    """The world's twin from now on (tracing switched on, or a fresh world)."""
    global _twin
    _twin = twin


def set_housekeeping(copy: MPI.Intracomm) -> None:
    """mpinb's own copy of the world from now on (made once, as tracing is switched on)."""
    global _own
    _own = copy
