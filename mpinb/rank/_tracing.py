"""Turning tracing on for a rank (once, at start-up) and recording one run at a time."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mpi4py import MPI

from ._calls import _Request
from ._collectives import new_epoch
from ._recorder import RECORDER, align_clock, polite_barrier
from ._requests import TracedRequest
from ._traced import traced

_plain_world = MPI.COMM_WORLD
_traced_world = None
_housekeeping = None  # mpinb's own copy of the world, never touched by user code


def install(namespace: dict) -> None:
    """Make ``MPI.COMM_WORLD``, the namespace's ``comm`` and ``MPI.Request`` the traced ones."""
    global _traced_world, _housekeeping
    world = _plain_world
    # Ranks reach this point at different times while they start on shared cores; waiting in a
    # polled barrier first keeps the early ones from spinning in Dup and taking the others' CPU.
    polite_barrier(world)
    _traced_world = traced(world, "world", list(range(world.Get_size())), constant=True)
    _housekeeping = world.Dup()  # mpinb's own traffic never uses the user's communicators
    align_clock(_housekeeping)
    _use(namespace, traced_calls=True)


def housekeeping() -> MPI.Intracomm:
    """mpinb's own copy of the world (for its traffic between cells, such as spreading data)."""
    if _housekeeping is None:
        raise RuntimeError("this rank has not been set up by the pool (mpinb.rank.init)")
    return _housekeeping


def reset(namespace: dict) -> None:
    """A fresh world after an aborted run (collective over all ranks).

    Messages that the aborted run left in flight belong to the old world's context, so they can
    never match a receive on the new one. Communicators the user derived earlier keep their
    context (their own collectives and messages), but mpinb's traffic on them starts afresh.
    """
    global _plain_world, _traced_world
    old_plain, old_traced = _plain_world, _traced_world
    polite_barrier(_housekeeping)
    new_epoch()
    _plain_world = _housekeeping.Dup()
    _traced_world = traced(_plain_world, "world", list(range(_plain_world.Get_size())), constant=True)
    for name, value in list(namespace.items()):
        if value is old_traced or value is old_plain:
            namespace[name] = _traced_world if value is old_traced else _plain_world
    if MPI.COMM_WORLD is old_traced:
        MPI.COMM_WORLD = _traced_world
    elif MPI.COMM_WORLD is old_plain:
        MPI.COMM_WORLD = _plain_world


def _use(namespace: dict, traced_calls: bool) -> None:
    old, new = (_plain_world, _traced_world) if traced_calls else (_traced_world, _plain_world)
    MPI.COMM_WORLD = new
    MPI.Request = TracedRequest if traced_calls else _Request
    if namespace.get("comm") is old:
        namespace["comm"] = new


@contextmanager
def recording(namespace: dict, enabled: bool, capacity: int | None = None) -> Iterator[dict]:
    """Record the MPI calls of one run into the yielded dict's ``"trace"``.

    With ``enabled=False`` the plain mpi4py objects are put back for the run, so that untraced
    runs pay nothing at all; communicators created by earlier traced runs only check a flag.
    """
    box: dict = {"trace": None}
    if _traced_world is None:
        yield box
        return
    if not enabled:
        _use(namespace, traced_calls=False)
        try:
            yield box
        finally:
            _use(namespace, traced_calls=True)
        return
    RECORDER.start(capacity)
    try:
        yield box
    finally:
        box["trace"] = RECORDER.stop()
