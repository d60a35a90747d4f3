"""Turning tracing on for a rank (once, at start-up) and recording one run at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mpi4py import MPI

from . import _entered_ahead, _spawn, _verify
from ._calls import PlainRequest
from ._collectives import set_epoch
from ._files import PlainFile, TracedFile
from ._messages import PlainMessage, TracedMessage
from ._persistent import PlainPrequest, TracedPrequest
from ._recorder import RECORDER, align_clock, polite_barrier
from ._requests import TracedRequest
from ._traced import PYTHON_OF_C, TWIN_CLASSES, traced
from ._windows import PlainWin, TracedWin
from ._world import housekeeping, set_housekeeping, set_traced_world, traced_world

_plain_world = MPI.COMM_WORLD


def install(namespace: dict) -> None:
    """Make ``MPI.COMM_WORLD``, the namespace's ``comm``, ``MPI.Request``, ``MPI.Prequest``,
    ``MPI.Message``, ``MPI.File`` and ``MPI.Win`` the traced ones."""
    world = _plain_world
    # Ranks reach this point at different times while they start on shared cores; waiting in a
    # polled barrier first keeps the early ones from spinning in Dup and taking the others' CPU.
    polite_barrier(world)
    set_housekeeping(world.Dup())  # mpinb's own traffic never uses the user's communicators
    _entered_ahead.setup(housekeeping())  # before any twin takes a slot on it
    set_traced_world(traced(world, "world", list(range(world.Get_size())), constant=True))
    align_clock(housekeeping())
    _use(namespace, traced_calls=True)


def install_spawned(spec: dict) -> Any:
    """Trace a process spawned from a traced run (see ``_spawned``), from now until it leaves its
    recording; the traced twin of its parent intercommunicator."""
    world = _plain_world
    polite_barrier(world)
    lanes = [spec["base"] + rank for rank in range(world.Get_size())]
    set_traced_world(traced(world, f"{spec['cid']}.world", lanes, constant=True))
    set_housekeeping(world.Dup())
    RECORDER.clock_offset = spec["offset"]  # a child shares its root's clock (on the root's host)
    _use({}, traced_calls=True)
    RECORDER.start(spec["capacity"])
    return _spawn.spawned_intercomm(MPI.Comm.Get_parent(), spec["cid"], lanes, spec["parents"], ("", 0))


# Collectives that mpinb started and completed on its own copy of the world. Every rank starts
# them in the same order, so the counts are equal on all ranks unless one was broken off: then
# the copy is out of step, and only fresh processes can mend it (see fresh_world).
own_calls = {"started": 0, "completed": 0}
_PAUSE = 0.001  # between tests of mpinb's own pending collective: sleeping, not spinning


def complete_own(request: MPI.Request, timeout: float | None = None) -> bool:
    """Complete a collective that mpinb started on its copy of the world, with short sleeps (an
    idle core stays idle); ``False`` if ``timeout`` seconds pass first (the request stays pending)."""
    own_calls["started"] += 1
    deadline = None if timeout is None else time.monotonic() + timeout
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_PAUSE)
    own_calls["completed"] += 1
    return True


generation = 0  # how many fresh worlds this rank has moved to, as the pool counts them


def fresh_world(namespace: dict, new_generation: int, timeout: float) -> str | None:
    """A fresh world after an aborted run (collective over all ranks); ``None`` when done, else
    why this rank could not make it.

    Messages that the aborted run left in flight belong to the old world's context, so they can
    never match a receive on the new one. Communicators the user derived earlier keep their
    context (their own collectives and messages), but mpinb's traffic on them starts afresh.

    Nothing here blocks: the copy is an ``Idup``, polled until ``timeout``. The pool calls this
    only once every rank is known to be idle, and a rank refuses when its state says the ranks
    are out of step (another generation, or one of mpinb's own collectives broken off), so that
    no call can pair with a call of another reset.
    """
    global _plain_world, generation
    if new_generation != generation + 1:
        return f"this rank is at world {generation}, not {new_generation - 1}"
    if own_calls["started"] != own_calls["completed"]:
        return "one of mpinb's own collectives was broken off on this rank"
    try:
        copy, request = housekeeping().Idup()
    except MPI.Exception as err:  # out of communicators, for one (MPICH has about 2,000)
        return f"MPI could not copy the world: {err}"
    if not complete_own(request, timeout):
        return f"the other ranks did not take part within {timeout:g} s"
    set_epoch(new_generation)
    old_plain, old_traced = _plain_world, traced_world()
    # The old world's private copy carries on: every message on it is tagged by generation.
    shadow, old_traced._mpinb_shadow = old_traced._mpinb_shadow, None
    _plain_world = copy
    new_traced = traced(copy, "world", list(range(copy.Get_size())), constant=True, shadow=shadow)
    set_traced_world(new_traced)
    if (rehearsal := old_traced.__dict__.pop("_mpinb_rehearsal", None)) is not None:
        new_traced._mpinb_rehearsal = rehearsal  # a copy of that shadow (see _collectives.rehearse)
    _entered_ahead.carry(old_traced, new_traced)
    _entered_ahead.reset()
    for name, value in list(namespace.items()):
        if value is old_traced or value is old_plain:
            namespace[name] = new_traced if value is old_traced else _plain_world
    # mpi4py's stubs declare its constants final; mpinb replaces them on purpose, for user code
    if MPI.COMM_WORLD is old_traced:
        MPI.COMM_WORLD = new_traced  # type: ignore[misc]
    elif MPI.COMM_WORLD is old_plain:
        MPI.COMM_WORLD = _plain_world  # type: ignore[misc]
    generation = new_generation
    return None


def _use(namespace: dict, traced_calls: bool) -> None:
    old, new = (_plain_world, traced_world()) if traced_calls else (traced_world(), _plain_world)
    MPI.COMM_WORLD = new  # type: ignore[misc]  # on purpose: user code finds the twin there
    _spawn.trace_spawns(traced_calls)
    MPI.Request = TracedRequest if traced_calls else PlainRequest  # type: ignore[misc]
    MPI.Win = TracedWin if traced_calls else PlainWin  # type: ignore[misc]
    MPI.Prequest = TracedPrequest if traced_calls else PlainPrequest  # type: ignore[misc]
    MPI.Message = TracedMessage if traced_calls else PlainMessage  # type: ignore[misc]
    MPI.File = TracedFile if traced_calls else PlainFile  # type: ignore[misc]
    if namespace.get("comm") is old:
        namespace["comm"] = new


@contextmanager
def recording(namespace: dict, enabled: bool, capacity: int | None = None,
              verify: bool = False) -> Iterator[dict]:
    """Record the MPI calls of one run into the yielded dict's ``"trace"``.

    With ``enabled=False`` the plain mpi4py objects are put back for the run, so that untraced
    runs pay nothing at all; communicators created by earlier traced runs only check a flag.
    With ``verify``, the recording also carries the notes of :mod:`._verify` (``"checks"``).
    """
    box: dict = {"trace": None}
    if traced_world() is None:
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
    replaced = _verify.start(TWIN_CLASSES, PYTHON_OF_C) if verify else None
    try:
        yield box
    finally:
        box["trace"] = RECORDER.stop()
        _spawn.collect(box["trace"])
        if replaced is not None:
            box["trace"]["checks"] = _verify.stop(replaced)
