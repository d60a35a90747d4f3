"""Processes spawned from a traced run, traced too.

This covers ``Spawn`` on a traced communicator or on ``MPI.COMM_SELF`` (see :func:`trace_spawns`).

A Python program spawned with this interpreter (a script, ``-m module`` or ``-c code``, after
Python's own options: what ``MPIPoolExecutor`` spawns) starts through :mod:`._spawned`, which
traces it as a rank is traced. When it disconnects from its parents, or ends, it leaves its
recording in a private folder of the spawn's root, which adds it to its own recording when the
run ends (``"spawned"``). The trace gives each spawned process a lane after the pool's ranks.

Until the trace numbers them, spawned processes are known by provisional lanes: the root's k-th
spawn counts from ``PROVISIONAL * (root's world rank + 1) + PER_SPAWN * k``, unique without
asking any other rank. Another program (an executable, Python with options mpinb does not read)
is spawned as asked, and its intercommunicator passes through untraced.

Both sides make the intercommunicator's private copy with a polled ``Idup``, so a child that
never starts its tracing (it failed) leaves the parents interruptible. A child leaves its
recording before its ``Disconnect``, which under Open MPI returns only once the parents have
called theirs; under MPICH both return at once, so the root gives the children of a spawn it has
disconnected from a moment (``LATE_CHILD``) at the end of the run.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import pickle
import shutil
import sys
import tempfile
import time
from time import perf_counter as _now
from typing import Any

from mpi4py import MPI

from ...common._events import COLLECTIVE, PER_SPAWN, PROVISIONAL
from ...common._protocol import Recording
from ._calls import PlainIntracomm, call_site, named, world_ranks
from ._collectives import agree, epoch, pickled_collective
from ._python_command import python_program
from ._recorder import RECORDER as _rec
from ._twins import intercomm_twin
from ._waiting import abandon as _abandon
from ._waiting import wait_request as _poll_request

PlainIntercomm = MPI.Intercomm
PlainSelf = MPI.COMM_SELF
BOOTSTRAP = "mpinb.rank.mpi._spawned"

_spawns_made = 0  # on this rank, as a root: numbers its spawns
# This run's spawns rooted here: (intercommunicator, folder, first provisional lane, how many processes)
_pending: list[tuple[str, str, int, int]] = []
_disconnected: set[str] = set()  # intercommunicators this side has disconnected from
LATE_CHILD = 2.0  # seconds, at the end of a run, for children of a spawn disconnected from


def _this_python(command: Any) -> bool:
    if not isinstance(command, str):
        return False
    found = shutil.which(command) or command
    return os.path.abspath(found) == os.path.abspath(sys.executable)


def _plan(command, args, root_world: int, parents: list[int]) -> dict | None:
    """At the root of a traced spawn: how to start the children through the bootstrap."""
    global _spawns_made
    if not _this_python(command):
        return None
    split = python_program([args] if isinstance(args, str) else list(args or ()))
    if split is None:
        return None
    options, program = split
    k = _spawns_made
    _spawns_made += 1
    base = PROVISIONAL * (root_world + 1) + PER_SPAWN * k
    try:
        folder = tempfile.mkdtemp(prefix="mpinb-spawn-")  # mode 0700: this user's only
    except OSError:  # (no room in the temporary folder: the children run untraced)
        return None
    spec = {"cid": f"spawn{k}@{root_world}", "base": base, "parents": parents, "folder": folder,
            "offset": _rec.clock_offset, "capacity": _rec.capacity}
    argv = [*options, "-m", BOOTSTRAP, json.dumps(spec), "--", *program]
    return {"cid": spec["cid"], "base": base, "folder": folder, "argv": argv}


def spawn(self, command, args=None, maxprocs: int = 1, info=MPI.INFO_NULL, root: int = 0, errcodes=None):
    """``Spawn`` on a traced communicator, or on ``MPI.COMM_SELF`` while recording."""
    where = call_site()
    start = _now()
    size = self.Get_size()
    if size > 1:
        agree(self, "Spawn", root, where)
    cid, me = getattr(self, "_mpinb_id", None) or _self_id(), self.Get_rank()
    parents = _rec.comms[cid]  # (registered with the id: every twin's, and COMM_SELF's by _self_id)
    plan = None
    if _rec.on and me == root:
        plan = _plan(command, args, parents[root], parents)
    try:
        new = _PLAIN_SPAWN(self, command, plan["argv"] if plan else args, maxprocs, info, root, errcodes)
    except BaseException:
        if plan is not None:
            shutil.rmtree(plan["folder"], ignore_errors=True)
        raise
    if size > 1:  # the other members learn the root's plan as a traced bcast's are told theirs
        plan, _, _ = pickled_collective(self, "bcast", (plan,), {"root": root}, where, root)
    if _rec.on:
        end = _now()
        _rec.add(("Spawn", COLLECTIVE, cid, root, -1, 0, 0, start, end, end, *where))
    if plan is None:
        return new
    children = list(range(plan["base"], plan["base"] + new.Get_remote_size()))
    if me == root:
        _pending.append((plan["cid"], plan["folder"], plan["base"], len(children)))
    return spawned_intercomm(new, plan["cid"], parents, children, where)


def spawned_intercomm(new, cid: str, local: list[int], remote: list[int], where: tuple[str, int]):
    """The traced twin of a spawn's intercommunicator, on either side, with its private copy
    made in a polled ``Idup`` that the other side makes too."""
    copy, request = PlainIntercomm.Idup(new)
    try:
        _poll_request(request, None, (_waiting_for_children, (cid, local, where)))
    except BaseException:
        _abandon(request)
        raise
    twin = intercomm_twin(new, cid, local, remote, where, "Spawn", shadow=copy)
    twin._mpinb_made_in = epoch()
    return twin


def _waiting_for_children(cid: str, local: list[int], where: tuple[str, int]):
    from ...common._protocol import wait_state

    return wait_state("Spawn", "collective", where, comm=cid, members=local)


def disconnected(cid: str) -> None:
    """This side of intercommunicator ``cid`` called ``Disconnect``."""
    if any(pending[0] == cid for pending in _pending):
        _disconnected.add(cid)


def collect(recording: Recording) -> None:
    """At the end of a run, on a spawn's root: the recordings its children left, by provisional
    lane. Children of a spawn the parents disconnected from leave theirs as they disconnect
    too (MPICH's ``Disconnect`` does not wait for them): they are given ``LATE_CHILD`` seconds.
    A child that has left none is counted as ``spawned_running``."""
    if not _pending:
        return
    spawned: dict[int, Recording] = {}
    running = 0
    deadline = time.monotonic() + LATE_CHILD
    for cid, folder, base, count in _pending:
        for child in range(count):
            path = os.path.join(folder, f"{child}.pickle")
            while not os.path.exists(path) and cid in _disconnected and time.monotonic() < deadline:
                time.sleep(0.005)
            try:
                with open(path, "rb") as file:
                    spawned[base + child] = pickle.load(file)
            except (OSError, EOFError, pickle.UnpicklingError):
                running += 1
        shutil.rmtree(folder, ignore_errors=True)
        _disconnected.discard(cid)
    _pending.clear()
    recording["spawned"] = spawned
    if running:
        recording["spawned_running"] = running


def remove_folders() -> None:
    """The folders of this run's spawns, as the process ends before the run does."""
    for _, folder, _, _ in _pending:
        shutil.rmtree(folder, ignore_errors=True)
    _pending.clear()


def leave_recording(folder: str, rank: int) -> None:
    """In a spawned process: stop recording, and leave the recording where the root reads it
    (nothing if the root has already ended its run and removed the folder)."""
    if not _rec.on:
        return
    recording = _rec.stop()
    path = os.path.join(folder, f"{rank}.pickle")
    try:
        with open(path + ".part", "wb") as file:
            pickle.dump(recording, file)
        os.replace(path + ".part", path)
    except OSError:
        pass


def _self_id() -> str:
    """The id of ``MPI.COMM_SELF`` in this process's recordings (registered once)."""
    global _SELF_ID
    if _SELF_ID is None:
        (lane,) = world_ranks(PlainSelf.Get_group())
        _SELF_ID = f"self@{lane}"
        _rec.comms[_SELF_ID] = [lane]
    return _SELF_ID


_SELF_ID: str | None = None
_PLAIN_SPAWN = PlainIntracomm.__dict__["Spawn"]  # mpi4py's own method


def _spawn_of_plain(self, command, args=None, maxprocs: int = 1, info=MPI.INFO_NULL, root: int = 0,
                    errcodes=None):
    if _rec.on and self == PlainSelf:
        return spawn(self, command, args, maxprocs, info, root, errcodes)
    return _PLAIN_SPAWN(self, command, args, maxprocs, info, root, errcodes)


_TRACED_SPAWN = named(_spawn_of_plain, _PLAIN_SPAWN, "Intracomm")


def trace_spawns(on: bool) -> None:
    """While on, ``Spawn`` of mpi4py's own ``MPI.COMM_SELF`` (and of copies of its handle) is
    traced. mpi4py's constant cannot be replaced by a traced twin (its C API makes objects of
    mpi4py's own class, which a user may compare with ``type(MPI.COMM_SELF)``), and its class is
    read-only, so the method goes into the dict behind that class's read-only view (its other
    objects, and subclasses with a ``Spawn`` of their own, call mpi4py's as before)."""
    method = _TRACED_SPAWN if on else _PLAIN_SPAWN
    if _INTRACOMM_METHODS["Spawn"] is not method:
        _INTRACOMM_METHODS["Spawn"] = method
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(PlainIntracomm))


(_INTRACOMM_METHODS,) = gc.get_referents(PlainIntracomm.__dict__)  # the dict behind the read-only view
