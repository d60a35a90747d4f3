"""Intercommunicators between groups of the pool's ranks: made, used and merged, traced.

- ``Create_intercomm`` (on a traced intracommunicator) is a collective over the local group whose
  leaders also exchange messages over ``peer_comm``. The local leader first greets the remote one
  in a polled message on mpinb's own copy of the world, then the local members agree as for any
  collective: a side that never comes is diagnosed (who waits, for which leader) and the stop
  button returns control; MPI's call then finds everyone there.
- The result is a traced ``Intercomm``: its point-to-point calls are recorded and polled as on any
  communicator, with ``peer`` a rank of the remote group. Its id (``inter0[0, 2|1, 3]``) names both
  groups alike on every member; each rank also records its remote group (``Recorder.remote``) so
  that the trace puts every message between the right world ranks.
- ``Merge`` waits in a polled ``Ibarrier`` on the intercommunicator's private copy first, then
  makes a traced intracommunicator.
- ``Disconnect``, where MPI's own waits for the other group (Open MPI), waits in a polled
  ``Ibarrier`` on the private copy first (a side that never disconnects is diagnosed), then frees
  the copy.
- ``Spawn`` (see ``_spawn``) makes a traced intercommunicator to traced children.
- Collectives on an intercommunicator (``MPI.ROOT`` semantics) are recorded over both groups;
  the blocking ones wait for every member of both in a polled ``Ibarrier`` first.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from time import perf_counter as _now

from mpi4py import MPI

from ...common._events import COLLECTIVE
from ...common._protocol import WaitState, wait_state
from ...common._ranges import format_ranks
from . import _left_behind
from ._calls import NAN, PlainIntracomm, PlainRequest, arg, call_site, describer, named, nbytes, world_ranks
from ._collectives import ROOTS_LOWER, ROOTS_UPPER, agree, epoch
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._spawn import disconnected, spawn
from ._twins import intercomm_twin, twin_of
from ._waiting import abandon as _abandon
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request
from ._world import housekeeping, traced_world

PlainIntercomm = MPI.Intercomm

# an intercommunicator's two groups -> how many were made between them; an intercommunicator's
# id -> how many were made from it (Merge, Dup)
_made: dict[str, int] = {}
_greetings: dict[tuple[int, int, int, int], int] = {}  # (epoch, leader, leader, tag) -> greetings so far
_GREETINGS_PER_EPOCH = 2**20


def _create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0):
    where = call_site()
    start = _now()
    if self.Get_rank() == local_leader:
        _greet(peer_comm, remote_leader, tag, where)
    agree(self, "Create_intercomm", local_leader, where)
    new = PlainIntracomm.Create_intercomm(self, local_leader, peer_comm, remote_leader, tag)
    if _rec.on:
        end = _now()
        _rec.add(("Create_intercomm", COLLECTIVE, self._mpinb_id, -1, -1, 0, 0, start, end, end, *where))
    local, remote = _rec.comms[self._mpinb_id], world_ranks(new.Get_remote_group())
    first, second = sorted((local, remote))
    groups = f"[{format_ranks(first)}|{format_ranks(second)}]"
    number = _made[groups] = _made.get(groups, -1) + 1
    return intercomm_twin(new, f"inter{number}{groups}", local, remote, where, "Create_intercomm")


def _greet(peer_comm, remote_leader: int, tag: int, where: tuple[str, int]) -> None:
    """The local leader's polled exchange with the remote one, on mpinb's own copy of the world,
    under a tag of this pair's k-th greeting (of this ``tag``) in this epoch: what an interrupted
    greeting leaves in flight matches no later one, and leaders that pass different tags never
    meet (as in MPI's own call, which hangs), so the diagnosis names them."""
    me = MPI.COMM_WORLD.Get_rank()
    them = world_ranks(peer_comm.Get_group())[remote_leader]
    key = (epoch(), min(me, them), max(me, them), tag)  # (an aborted greeting was counted on one side only)
    count = _greetings[key] = _greetings.get(key, -1) + 1
    span = min(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767, 2**30)
    own_tag = (epoch() * _GREETINGS_PER_EPOCH + count * 1024 + tag % 1024) % span
    mine, heard = array("i", [tag]), array("i", [0])
    own = housekeeping()
    pair = [own.Irecv([heard, MPI.INT], them, own_tag), own.Isend([mine, MPI.INT], them, own_tag)]
    world = traced_world()
    try:
        _poll(lambda: PlainRequest.Testall(pair), (_waiting_for_leader, (world._mpinb_id, them, tag, where)))
    except BaseException:
        _abandon(pair[0], cancel=True, keep=heard)
        _abandon(pair[1], keep=mine)
        raise


def _waiting_for_leader(cid: str, leader: int, tag: int, where: tuple[str, int]) -> WaitState:
    return wait_state("Create_intercomm", "recv", where, comm=cid, peer=leader, tag=tag)


def _merge(self, high: bool = False):
    where = call_site()
    start = _now()
    _all_here(self, "Merge", where)  # (not after an abort, whose broken-off barrier would pair with it)
    new = PlainIntercomm.Merge(self, high)
    if _rec.on:
        end = _now()
        _rec.add(("Merge", COLLECTIVE, self._mpinb_id, -1, -1, 0, 0, start, end, end, *where))
    members = world_ranks(new.Get_group())
    number = _made[self._mpinb_id] = _made.get(self._mpinb_id, -1) + 1
    twin = twin_of(new, f"{self._mpinb_id}.{number}@{members[0]}", members)
    _left_behind.made(twin, "Merge", where)
    return twin


def _all_here(self, name: str, where: tuple[str, int], root: int | None = None) -> None:
    """Wait, polled, until every member of both groups is here, on the private copy (made in
    this epoch). A barrier between two groups lets a member go once the *other* group has come
    (Open MPI's does), so it takes two: the second is complete only once the other group has
    left the first, which it left only once all of this group had come."""
    if self._mpinb_shadow is not None and self._mpinb_made_in == epoch():
        describe = describer(self, name, "collective", None, -1, 0, where, root)
        for _ in range(2):
            _poll_request(PlainIntercomm.Ibarrier(self._mpinb_shadow), None, describe)


def _dup(self, info=None):
    where = call_site()
    start = _now()
    _all_here(self, "Dup", where)
    new = PlainIntercomm.Dup(self) if info is None else PlainIntercomm.Dup(self, info)
    cid = self._mpinb_id
    if _rec.on:
        end = _now()
        _rec.add(("Dup", COLLECTIVE, cid, -1, -1, 0, 0, start, end, end, *where))
    remote = _rec.remote.get(cid)
    if remote is None:  # made around mpinb (Idup): its copy is known by its handle alone
        return new
    local = [rank for rank in _rec.comms[cid] if rank not in remote]
    number = _made[cid] = _made.get(cid, -1) + 1
    return intercomm_twin(new, f"{cid}.{number}", local, remote, where, "Dup")


def _disconnect(self) -> None:
    where = call_site()
    start = _now()
    cid = self._mpinb_id
    if (leave := before_disconnect.pop(cid, None)) is not None:  # a spawned process: its recording first
        if _rec.on:
            end = _now()
            _rec.add(("Disconnect", COLLECTIVE, cid, -1, -1, 0, 0, start, end, end, *where))
        leave()
    if DISCONNECT_WAITS:  # MPI's own call would wait for the other group: wait where an interrupt reaches
        _all_here(self, "Disconnect", where)
    if _rec.on:
        end = _now()
        _rec.add(("Disconnect", COLLECTIVE, cid, -1, -1, 0, 0, start, end, end, *where))
    self._free_shadow()
    disconnected(cid)
    PlainIntercomm.Disconnect(self)


def _between_groups(name: str, root_at: int | None):
    """A collective over both groups (``MPI.ROOT`` semantics), recorded. The blocking forms wait
    first until every member of both groups is here (``_all_here``: every member of both takes
    part in each of them), then make MPI's own call: a member that never comes is diagnosed and
    the stop button reaches the others, and results are MPI's to the bit."""
    base = getattr(PlainIntercomm, name)
    nonblocking = name[0] == "I"
    lowercase = name[0].islower()
    bcast = name.lower().lstrip("i") == "bcast"

    def method(self, *args, **kwargs):
        where = call_site()
        start = _now()
        root = -1 if root_at is None else arg(args, kwargs, root_at, "root", 0)
        if not nonblocking:
            _all_here(self, name, where, root if root >= 0 else None)
        result = base(self, *args, **kwargs)
        if not _rec.on:
            return result
        end = _now()
        sent = received = 0
        if not lowercase and root != MPI.PROC_NULL:  # (a member of the root's group that is not the root)
            if bcast:
                size = nbytes(arg(args, kwargs, 0, "buf"))
                sent, received = (size, 0) if root == MPI.ROOT else (0, size)
            else:
                sent, received = nbytes(arg(args, kwargs, 0, "sendbuf")), nbytes(arg(args, kwargs, 1, "recvbuf"))
        if nonblocking:
            event = [name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, NAN, end, *where]
            _rec.add(event)
            return TracedRequest._wrap(result, event)
        _rec.add((name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, end, end, *where))
        return result

    return named(method, base, "Intercomm")


_ROOT_AT = {name: at for name, at in {**ROOTS_LOWER, **ROOTS_UPPER,
                                       **{"I" + name[0].lower() + name[1:]: at for name, at in ROOTS_UPPER.items()}
                                       }.items()
            if hasattr(PlainIntercomm, name)}  # (no scans between two groups)

# Open MPI's Disconnect returns once both groups have called it; MPICH's (and so Intel MPI's)
# returns at once, and so does a traced one there.
DISCONNECT_WAITS = MPI.get_vendor()[0] == "Open MPI"
# a spawned process's parent intercommunicator -> what leaves its recording (see _spawned)
before_disconnect: dict[str, Callable[[], None]] = {}

INTRACOMM_METHODS = {"Create_intercomm": named(_create_intercomm, PlainIntracomm.Create_intercomm, "Intracomm"),
                     "Spawn": named(spawn, PlainIntracomm.Spawn, "Intracomm")}
INTERCOMM_METHODS = {"Merge": named(_merge, PlainIntercomm.Merge, "Intercomm"),
                     "Disconnect": named(_disconnect, PlainIntercomm.Disconnect, "Intercomm"),
                     "Dup": named(_dup, PlainIntercomm.Dup, "Intercomm"),
                     **{name: _between_groups(name, at) for name, at in _ROOT_AT.items()}}
