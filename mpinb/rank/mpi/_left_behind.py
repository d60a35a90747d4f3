"""What a traced run leaves behind on a rank, looked for when the run ends.

The search is cheap: it is on in every traced run that ended without an error. It finds messages
that arrived here and that no receive took, and communicators, windows and derived datatypes that
user code made and dropped without freeing.

A message left waiting is taken by the next receive that matches it, in a later cell, instead of
the message that receive waits for. A dropped communicator stays in MPI until the pool stops
(mpi4py frees none when its object goes), and MPI has room for a few thousand (MPICH: 2,048
context ids): a cell that splits a communicator and is run again and again runs out of them.

Only what MPI says is reported: a probe finds the waiting messages (a message received by a
form mpinb does not trace is gone, so it is never told), and a communicator counts as dropped
only when no object of user code holds it any more.

Windows (made while ``MPI.Win`` is :class:`._windows.TracedWin`) and derived datatypes (seen
when a traced call first uses one: a datatype never used in a traced call is not known) are
held here until the end of the run: one that nothing else refers to by then was dropped, one
that ``Free`` made null is forgotten. (mpi4py frees neither when its object goes.)
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from mpi4py import MPI

from . import _calls
from ._calls import PlainIntracomm, user_site
from ._recorder import RECORDER as _rec

# communicator id -> (the call that made it, file, line, the objects that stand for it)
_made: dict[str, tuple[str, str, int, list[weakref.ref]]] = {}
dropped_so_far = 0  # communicators that user code dropped without freeing, in this process

# id of a window or derived datatype -> (kind, the object, the call that made it or first used it, file, line)
_held: dict[int, tuple[str, Any, str, str, int]] = {}
_predefined: dict[int, Any] = {}  # datatypes seen that are MPI's own (held: their ids stay theirs)
held_dropped = {"window": 0, "datatype": 0}  # dropped without freeing, in this process
_ONLY_HERE = 3  # references to a held object while ``look`` checks it: its entry, a local, the argument


def made_window(window: Any, op: str) -> None:
    """User code made ``window`` by ``op`` (``Create``, ``Allocate``...)."""
    _held[id(window)] = ("window", window, op, *user_site())


def used_datatypes(spec: list | tuple) -> None:
    """Note the derived datatypes of a buffer spec (``[buf, count, vector]``) a traced call uses,
    where first used."""
    for item in spec[1:]:
        if isinstance(item, MPI.Datatype) and id(item) not in _held and id(item) not in _predefined:
            if item.is_predefined or not item:
                _predefined[id(item)] = item
            else:
                _held[id(item)] = ("datatype", item, "", *user_site())


_calls.note_datatypes_with(used_datatypes)


def made(twin: Any, op: str, where: tuple[str, int]) -> None:
    """User code made ``twin`` (a traced communicator) by ``op`` at ``where``."""
    _made[twin._mpinb_id] = (op, where[0], where[1], [weakref.ref(twin)])


def also(twin: Any) -> None:
    """Another object that stands for a communicator made before (``fromhandle``, unpickling)."""
    entry = _made.get(twin.__dict__.get("_mpinb_id", ""))
    if entry is not None:
        entry[3].append(weakref.ref(twin))


def freed(cid: str | None) -> None:
    _made.pop(cid or "", None)


def look(world: Any) -> list[tuple]:
    """What this rank's run left: ``("unreceived", comm id, world source, tag, bytes)`` for each
    sender whose message waits here, and ``("dropped-communicator", op, file, line, so far)`` for
    each communicator no object holds any more (told once; windows and datatypes alike)."""
    global dropped_so_far
    left: list[tuple] = []
    live: list[Any] = [world]
    for cid, (op, file, line, refs) in list(_made.items()):
        objects = [ref() for ref in refs]
        holder = next((obj for obj in objects if obj is not None), None)
        if holder is None:
            del _made[cid]
            dropped_so_far += 1
            left.append(("dropped-communicator", op, file, line, dropped_so_far))
        elif holder:  # (not one that Free() made null without mpinb: mpi4py's Comm.free of a copy)
            live.append(holder)
    left += _held_dropped()
    status = MPI.Status()
    for comm in live:
        try:
            if not PlainIntracomm.Iprobe(comm, MPI.ANY_SOURCE, MPI.ANY_TAG):
                continue
            members = _rec.comms.get(comm._mpinb_id) or list(range(comm.Get_size()))
            for source in range(len(members)):
                if PlainIntracomm.Iprobe(comm, source, MPI.ANY_TAG, status):
                    left.append(("unreceived", comm._mpinb_id, members[source], status.Get_tag(),
                                 status.Get_count(MPI.BYTE)))
        except MPI.Exception:  # (a communicator that MPI no longer knows: nothing waits on it)
            continue
    return left


def _held_dropped() -> list[tuple]:
    """``("dropped-window" or "dropped-datatype", op, file, line, so far)`` for each held object
    nothing else refers to (and no other object of the same handle does)."""
    for key, datatype in list(_predefined.items()):
        if sys.getrefcount(datatype) <= _ONLY_HERE + 1:  # (+ the item of the list)
            del _predefined[key]
    if not _held:
        return []
    unreferenced, referenced_handles = [], set()
    for key, entry in list(_held.items()):
        obj = entry[1]
        if not obj:  # freed
            del _held[key]
        elif sys.getrefcount(obj) <= _ONLY_HERE:
            unreferenced.append(key)
        else:
            referenced_handles.add((entry[0], obj.handle))
    left = []
    for key in unreferenced:
        kind, obj, op, file, line = _held.pop(key)
        if (kind, obj.handle) not in referenced_handles:
            held_dropped[kind] += 1
            left.append((f"dropped-{kind}", op, file, line, held_dropped[kind]))
    return left
