"""A traced ``Allreduce`` that enters MPI ahead of its members.

It serves Open MPI's and Intel MPI's ``Allreduce``, where the pool's ranks share one host. Also
here: how members that never come release the ones inside.

Those MPIs' reductions run as the blocking call itself (their nonblocking forms add in another
order: see ``_collectives.BLOCKING_AFTER_AGREEMENT``). Waiting first for every member to say that
it is there cost about a barrier per call: with more ranks than cores most of a 16 kB reduction's
time. Here a rank instead writes on a board in shared memory which call it is in, and enters
the blocking call at once unless another member may be inside a call that it does not know to
be complete (``_tracer.c``, ``speculate``). A rank inside MPI therefore only ever waits for ranks
that are not; when one of those never comes (a hang, a member that raised first), the pool's
recovery has every idle rank make, with placeholder values, the calls that members entered ahead
of it (:func:`release_blocked`). The members inside then return, see that they were released,
and raise as an interrupted wait does, naming the call. Their receive buffers hold the
placeholders' sums: what an interrupted call leaves there is undefined under MPI too.

Everything here is per pool and collective at the points named: :func:`setup` at start-up,
:func:`enroll` when a communicator's private copy is made (every member is there), :func:`reset`
in a fresh world.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from array import array

from mpi4py import MPI

from ...common._events import REDUCTION_OPS
from ...common._protocol import WaitState
from . import _native, _waiting
from ._calls import PlainIntracomm, describer
from ._collectives import BLOCKING_AFTER_AGREEMENT as _BLOCKING_REDUCTIONS
from ._collectives import enrol_new_copies_with
from ._windows import PlainWin

_OPS = tuple(getattr(MPI, name) for name in REDUCTION_OPS)
ENVIRONMENT = "MPINB_ENTER_AHEAD"  # "0": every traced reduction agrees first (for comparison)

_window: MPI.Win | None = None
_board_group: MPI.Group | None = None
_board_id = 0  # the same on every rank of the board's pool, 0 where there is no board
_comms: dict[int, weakref.ref] = {}


def setup(housekeeping: MPI.Intracomm) -> None:
    """At start-up, on every rank (collective over ``housekeeping``, mpinb's copy of the world):
    the board, where every rank is on one host and each has the C tracer; otherwise none."""
    global _window, _board_group, _board_id
    size, rank = housekeeping.Get_size(), housekeeping.Get_rank()
    if not _BLOCKING_REDUCTIONS or size == 1:  # (MPICH's reductions are polled: nothing to enter)
        return
    tracer = _native.load()
    wanted = tracer is not None and os.environ.get(ENVIRONMENT, "1") != "0"
    node = housekeeping.Split_type(MPI.COMM_TYPE_SHARED)
    one_host = node.Get_size() == size
    node.Free()
    if not housekeeping.allreduce(wanted and one_host, op=MPI.LAND):
        return
    assert tracer is not None
    nbytes = 8 * (size * tracer.BOARD_WORDS_PER_RANK + 1)  # (and the next slot's number)
    window = PlainWin.Allocate_shared(nbytes if rank == 0 else 0, 1, comm=housekeeping)
    memory, _ = window.Shared_query(0)
    if rank == 0:
        memory[:nbytes] = bytes(nbytes)
    identity = housekeeping.bcast(int.from_bytes(os.urandom(7), "little") or 1, root=0)
    housekeeping.Barrier()
    tracer.speculation(memory, size, rank, _OPS, MPI.IN_PLACE, released, unpublish, wait_arrivals)
    _window, _board_group, _board_id = window, housekeeping.Get_group(), identity
    threading.Thread(target=_publish_long_waits, name="mpinb-waits", daemon=True).start()


def enroll(twin, shadow: MPI.Intracomm, polled: bool) -> None:
    """While every member of ``twin`` is here (its private copy ``shadow`` was just made): a slot
    on the board for it, the same on every member and never another communicator's, or none
    (``_mpinb_slot`` -1) where a member has no board or another pool's, or the slots are used
    up. ``polled`` waits as mpinb's waits do (a copy made at a collective's first call, where a
    member may be missing)."""
    if not _BLOCKING_REDUCTIONS or not isinstance(shadow, MPI.Intracomm):  # (an Intercomm is not one)
        twin._mpinb_slot = -1  # (MPICH's reductions are polled: no rank has a board, none asks)
        return
    tracer = _tracer()
    first = _board_id and tracer is not None and shadow.Get_rank() == 0
    mine = array("q", [tracer.speculation_new_slot() if first else -1, _board_id, -_board_id])
    agreed = array("q", [0, 0, 0])
    if polled:
        request = PlainIntracomm.Iallreduce(shadow, mine, agreed, MPI.MAX)
        _waiting.wait_request(request, None, describer(twin, "Dup", "collective", None, -1, 0, ("", 0)))
    else:
        PlainIntracomm.Allreduce(shadow, mine, agreed, MPI.MAX)
    slot, highest, lowest = agreed
    if not _board_id or tracer is None or highest != _board_id or -lowest != _board_id or \
            not 0 <= slot < tracer.BOARD_SLOTS:  # (more communicators than slots: they agree first)
        twin._mpinb_slot = -1
        return
    members = MPI.Group.Translate_ranks(twin.Get_group(), list(range(twin.Get_size())), _board_group)
    tracer.speculation_comm(slot, tuple(members))
    _comms[slot] = weakref.ref(twin)
    twin._mpinb_slot = slot


def carry(old, new) -> None:
    """A fresh world's twin takes the old one's slot (and its private copy: see ``_tracing``);
    the old twin, should user code still hold it, agrees first from now on (on every rank)."""
    slot = getattr(old, "_mpinb_slot", -1)
    old._mpinb_slot, new._mpinb_slot = -1, slot
    if slot >= 0:
        _comms[slot] = weakref.ref(new)


def reset() -> None:
    """In a fresh world, on every rank: the calls are counted afresh (see ``_collectives._next_tag``)."""
    tracer = _tracer()
    if _board_id and tracer is not None:
        tracer.speculation_reset()


def counts() -> dict:
    """Whether this rank has a board, and its calls entered ahead and those that waited first."""
    tracer = _tracer()
    if tracer is None:
        return {"on": False, "ahead": 0, "waited": 0}
    return tracer.speculation_counts()


def _tracer():
    return _native.tracer


def _inside(comm, name: str, file: str, line: int):
    """What a rank in this Allreduce waits for, as the notebook describes a collective's wait."""
    return describer(comm, name, "collective", None, -1, 0, (file, line))


def _waiting_inside(comm, name: str, file: str, line: int, seconds: float) -> WaitState:
    """The wait of a rank ``seconds`` inside this Allreduce, as the notebook describes one."""
    return _waiting.described(_inside(comm, name, file, line), time.time() - seconds)


def wait_arrivals(comm, name: str, file: str, line: int, slot: int, k: int) -> None:
    """Until every member has arrived at call ``k`` on ``slot`` (slot -1: until one of this
    rank's lanes is free), as mpinb's waits wait: interruptible, and described to the notebook."""
    tracer = _tracer()
    assert tracer is not None
    _waiting.wait(lambda: tracer.speculation_arrived(slot, k), _inside(comm, name, file, line))


def released(comm, name: str, file: str, line: int, seconds: float) -> BaseException:
    """The error of a member that was released from a call it entered ``seconds`` ago (see
    :func:`release_blocked`): an interrupted wait in that call, as the notebook describes one."""
    _waiting.broken_off(_waiting_inside(comm, name, file, line, seconds))
    return KeyboardInterrupt()


def unpublish() -> None:
    _waiting.publish(None)


def release_blocked(seconds: float = 3.0) -> int:
    """On an idle rank after an aborted run: make each call that members entered ahead of this
    rank, which this rank never made, with placeholder values of the same count, format and
    operation, so that they return. In an order in which no call waits for a member that is
    inside another (the rule of entering); calls it cannot make within ``seconds`` are left (the
    pool then finds those members stuck, and starts fresh processes). How many were made."""
    tracer = _tracer()
    if not _board_id or tracer is None:
        return 0
    import numpy as np

    made, deadline = 0, time.monotonic() + seconds
    while True:
        progressed = False
        for slot, k, count, form, op in sorted(tracer.speculation_duties()):
            comm = _comms[slot]() if slot in _comms else None
            if comm is None or count < 0 or not 0 <= op < len(_OPS):
                continue
            try:
                placeholder = np.zeros(count, dtype=np.dtype(form))
            except TypeError:
                continue
            lane = tracer.speculation_try_proxy(slot, k)
            if lane < 0:
                continue
            try:
                PlainIntracomm.Allreduce(comm, MPI.IN_PLACE, placeholder, _OPS[op])
            finally:
                tracer.speculation_left(slot, k, lane)
            made += 1
            progressed = True
        if not progressed:
            if not tracer.speculation_duties() or time.monotonic() > deadline:
                return made
            time.sleep(0.001)


def _publish_long_waits() -> None:
    """A thread: a call entered ahead that lasts (a member does not come) is published as any
    long wait is (``_waiting.REPORT_AFTER``), so that the notebook sees the hang while the rank's
    main thread is inside MPI."""
    tracer = _tracer()
    assert tracer is not None
    while True:
        comm, name, file, line, seconds = tracer.speculation_wait_inside(_waiting.REPORT_AFTER)
        try:
            _waiting.publish(_waiting_inside(comm, name, file, line, seconds))
        except Exception:  # noqa: BLE001 - a description that fails must not end the thread
            continue


# A copy made at a collective's first call is enrolled as every other is (polled: a member may be
# missing), in a pool's rank and in a spawned program alike: set as this module is imported,
# before any copy is made.
enrol_new_copies_with(lambda twin, shadow: enroll(twin, shadow, polled=True))
