"""``TracedWin``: ``MPI.Win`` while tracing is on.

Each window user code makes is known by the call and line that made it (one dropped without
``Free`` is told when the run ends: see :mod:`._left_behind`), and its one-sided calls are recorded
like every other MPI call.

- Data operations (``Put``, ``Get``, ``Accumulate``, ``Get_accumulate``, ``Fetch_and_op``,
  ``Compare_and_swap`` and the request forms) are kind ``RMA``: ``peer`` is the target rank in
  the window's group, ``tag`` the target displacement, ``sent``/``received`` the bytes that go to
  and come from the target.
- ``Fence`` and ``Win.Free`` are collectives over the window's group (its id is the window's):
  the members first agree on the call in polled messages on mpinb's private copy of the
  window's communicator, as for a barrier, so a member that never comes is diagnosed and the
  stop button returns control; the call itself then finds every member there.
- ``Win.Wait`` is ``Win.Test``, polled: it ends when the origins of the posted group complete.
- The other synchronisation calls (``Lock``, ``Unlock``, ``Lock_all``, ``Flush``..., ``Win.Post``,
  ``Win.Start``, ``Win.Complete``, ``Sync``) are kind ``EPOCH``, with the target as ``peer``
  (``Lock``'s ``tag`` says exclusive (1) or shared (0)). MPI has no form of ``Lock``,
  ``Win.Start`` or ``Win.Complete`` that could be polled: a hang in one is named from the ranks'
  stacks, and the pool restarts.

The calls themselves are mpi4py's, with the user's arguments: results are mpi4py's bit for bit.
"""

from __future__ import annotations

from time import perf_counter as _now
from typing import Literal

from mpi4py import MPI

from ...common._events import COLLECTIVE, EPOCH, RMA
from ...common._protocol import WaitState, wait_state
from ...common._ranges import format_ranks
from . import _left_behind
from ._calls import PlainIntracomm, StandIn, arg, call_site, named, nbytes, pickle_plain_copies, world_ranks
from ._collectives import agree, agreed_code, epoch, release
from ._recorder import RECORDER as _rec
from ._waiting import wait as _poll

PlainWin = MPI.Win  # mpi4py's own class; MPI.Win is replaced by TracedWin while tracing



class PrivateGroup:
    """The members of a window or a file, as the agreement of a collective on it needs them: its
    id, and mpinb's private copy of the communicator it was made on."""

    _mpinb_epoch, _mpinb_calls = -1, 0  # see _collectives._next_tag

    def __init__(self, cid: str, private: MPI.Intracomm, members: list[int]):
        self._mpinb_id, self.members = cid, members
        self._mpinb_shadow: MPI.Intracomm | None = private
        self._made_in = epoch()  # the world it was made in: see free()
        self.posted: list[int] = []  # world ranks of the origins of the last Post (Win.Wait waits for them)

    def Get_size(self) -> int:
        return len(self.members)

    def free(self) -> None:
        """With the window or file (its private copy as a twin's shadow: see _collectives.release)."""
        private, self._mpinb_shadow = self._mpinb_shadow, None
        release(private, self._made_in)
        _rec.forget(self._mpinb_id)


_made_on: dict[str, int] = {}  # per prefix and parent communicator, windows (or files) made on it so far


def private_group(prefix: str, handle_group: MPI.Group, comm, parent: str | None) -> PrivateGroup:
    """Name what ``comm``'s members just made (``"win"``, ``"file"``) alike on all of them (they
    make them on ``comm`` in the same order) and copy ``comm`` for mpinb's own messages (every
    member is in the call that made it). ``handle_group`` (freed here) is its group."""
    members = world_ranks(handle_group)
    parent = parent or f"[{format_ranks(members)}]"
    key = f"{prefix}@{parent}"
    number = _made_on[key] = _made_on.get(key, -1) + 1
    cid = f"{prefix}{number}@{parent}"
    _rec.comms[cid] = members
    return PrivateGroup(cid, PlainIntracomm.Dup(comm), members)


def traced_parent(comm) -> str | None:
    """The id of ``comm`` if it is a traced communicator."""
    return comm._mpinb_id if hasattr(type(comm), "_mpinb_plain") else None


_COMM_AT = {"Create": 3, "Allocate": 3, "Allocate_shared": 3, "Create_dynamic": 1}


def _made_by(name: str) -> classmethod:
    """mpi4py's ``Win.<name>`` for the traced class, noting the window it makes."""
    plain = getattr(PlainWin, name)

    def make(cls, *args, **kwargs):
        comm = arg(args, kwargs, _COMM_AT[name], "comm", MPI.COMM_SELF)
        parent = traced_parent(comm)
        where = call_site()
        start = _now()
        if parent is not None and comm.Get_size() > 1:  # (as for a communicator: see _traced._derived)
            agree(comm, f"Win.{name}", -1, where)
        window = getattr(super(TracedWin, cls), name)(*args, **kwargs)
        if parent is not None and _rec.on:
            end = _now()
            _rec.add((f"Win.{name}", COLLECTIVE, parent, -1, -1, 0, 0, start, end, end, *where))
        window._mpinb_group = private_group("win", window.Get_group(), comm, parent)
        _left_behind.made_window(window, f"Win.{name}")
        return window

    make.__name__, make.__qualname__, make.__doc__ = name, f"Win.{name}", plain.__doc__
    return classmethod(make)


def group_of(window) -> PrivateGroup | None:
    """The members of a window (or file), if a traced run made it (each method may be called
    unbound with one an untraced run made: ``MPI.Win.Fence(w)``, which has no attributes of mpinb's)."""
    return getattr(window, "_mpinb_group", None)


def _target_disp(target) -> int:
    """The displacement of an mpi4py target spec: ``None``, ``disp`` or ``(disp, count, datatype)``."""
    if target is None:
        return 0
    if isinstance(target, (list, tuple)):
        return int(target[0]) if target else 0
    return int(target)


# name -> where its arguments are: (target rank, target, the buffer it sends, the one it receives into)
_DATA_CALLS: dict[str, tuple[int, int, int | None, int | None]] = {
    "Put": (1, 2, 0, None), "Rput": (1, 2, 0, None),
    "Get": (1, 2, None, 0), "Rget": (1, 2, None, 0),
    "Accumulate": (1, 2, 0, None), "Raccumulate": (1, 2, 0, None),
    "Get_accumulate": (2, 3, 0, 1), "Rget_accumulate": (2, 3, 0, 1),
    "Fetch_and_op": (2, 3, 0, 1),
    "Compare_and_swap": (3, 4, 0, 2),
}


def _data_call(name: str):
    plain = getattr(PlainWin, name)
    rank_at, target_at, sent_at, received_at = _DATA_CALLS[name]
    target_name = "target_disp" if name in ("Fetch_and_op", "Compare_and_swap") else "target"

    def method(self, *args, **kwargs):
        if not _rec.on:
            return plain(self, *args, **kwargs)
        start = _now()
        returned = plain(self, *args, **kwargs)
        end = _now()
        group = group_of(self)
        if group is not None:
            sent = nbytes(arg(args, kwargs, sent_at, "origin")) if sent_at is not None else 0
            received = 0
            if received_at is not None:
                received = nbytes(arg(args, kwargs, received_at, "origin" if received_at == 0 else "result"))
            _rec.add((name, RMA, group._mpinb_id, arg(args, kwargs, rank_at, "target_rank"),
                      _target_disp(arg(args, kwargs, target_at, target_name)), sent, received,
                      start, end, end, *call_site()))
        return returned

    return named(method, plain, "Win")


def _epoch_call(name: str, label: str, peer_at: int | None = None):
    """A synchronisation call that MPI gives no pollable form of: recorded as kind ``EPOCH``."""
    plain = getattr(PlainWin, name)

    def method(self, *args, **kwargs):
        group = group_of(self)
        if name == "Post" and group is not None:
            group.posted = world_ranks(arg(args, kwargs, 0, "group"), owned=False)
        if not _rec.on or group is None:
            return plain(self, *args, **kwargs)
        start = _now()
        returned = plain(self, *args, **kwargs)
        end = _now()
        peer = -1 if peer_at is None else arg(args, kwargs, peer_at, "rank")
        tag = -1
        if name == "Lock":
            tag = int(arg(args, kwargs, 1, "lock_type", MPI.LOCK_EXCLUSIVE) == MPI.LOCK_EXCLUSIVE)
        _rec.add((label, EPOCH, group._mpinb_id, peer, tag, 0, 0, start, end, end, *call_site()))
        return returned

    return named(method, plain, "Win")



def agreed_call(owner, group: PrivateGroup, agreed_as: str, call, where: tuple[str, int], frees: bool,
                label: str, offset: int = -1, sent: int = 0, received: int = 0):
    """A collective on a window or file: every member of ``group`` agrees on ``agreed_as`` first
    (polled, interruptible), then ``call()``, MPI's own; recorded as ``label``. ``frees``: the call
    freed ``owner``, whose private copy goes with it."""
    start = _now()
    if group.Get_size() > 1 and group._mpinb_shadow is not None:
        if _rec.native is not None:  # the same messages in C: a Fence epoch pays a barrier's time, not more
            _rec.native.agree_on(group, agreed_as, agreed_code(agreed_as))
        else:
            agree(group, agreed_as, -1, where)
    returned = call()
    if _rec.on:
        end = _now()
        _rec.add((label, COLLECTIVE, group._mpinb_id, -1, offset, sent, received, start, end, end, *where))
    if frees:
        del owner._mpinb_group
        group.free()
    return returned


_FENCE_CODE = agreed_code("Fence")


def _collective_call(name: str, label: str):
    """``Fence`` and ``Free`` (which mpi4py's ``free()`` calls too): agreed, then MPI's call."""
    plain = getattr(PlainWin, name)

    def method(self, *args, **kwargs):
        group = group_of(self)
        if group is None:
            return plain(self, *args, **kwargs)
        return agreed_call(self, group, label, lambda: plain(self, *args, **kwargs), call_site(), name == "Free",
                           label)

    return named(method, plain, "Win")


_general_fence = _collective_call("Fence", "Fence")


def _fence(self, assertion: int = 0) -> None:
    """``Fence``, the epoch's end: as ``_collective_call``'s, with the C agreement called directly
    (no closure, no argument packing, the line looked up only when recording): an epoch of a
    small ``Put`` pays about one barrier more than MPI's own ``Fence``, not the interpreter's layers."""
    group = group_of(self)
    native = _rec.native
    if group is None or native is None or group._mpinb_shadow is None:
        return _general_fence(self, assertion)
    start = _now()
    if len(group.members) > 1:
        native.agree_on(group, "Fence", _FENCE_CODE)
    PlainWin.Fence(self, assertion)
    if _rec.on:
        end = _now()
        _rec.add(("Fence", COLLECTIVE, group._mpinb_id, -1, -1, 0, 0, start, end, end, *call_site()))


def _wait(self) -> Literal[True]:
    """``Win.Wait``: ``Win.Test`` polled, so that an epoch nobody completes can be interrupted."""
    group = group_of(self)
    if group is None:
        return PlainWin.Wait(self)
    where = call_site()
    start = _now()
    _poll(lambda: PlainWin.Test(self), (_waiting_for_origins, (group._mpinb_id, group.posted, where)))
    if _rec.on:
        end = _now()
        _rec.add(("Win.Wait", EPOCH, group._mpinb_id, -1, -1, 0, 0, start, end, end, *where))
    return True


def _waiting_for_origins(cid: str, origins: list[int], where: tuple[str, int]) -> WaitState:
    """What ``Win.Wait`` waits for, as a hang's diagnosis reads it: the origins of the last Post,
    to call ``Win.Complete`` (none posted: any rank)."""
    return wait_state("Win.Wait", "collective", where, comm=cid, members=list(origins) or None)


class TracedWin(PlainWin, metaclass=StandIn):
    """``MPI.Win`` while tracing is on: mpi4py's window, its calls recorded (see the module)."""

    _mpinb_stands_in = True
    _mpinb_plain = PlainWin
    Create = _made_by("Create")
    Allocate = _made_by("Allocate")
    Allocate_shared = _made_by("Allocate_shared")
    Create_dynamic = _made_by("Create_dynamic")
    Fence = named(_fence, PlainWin.Fence, "Win")
    Free = _collective_call("Free", "Win.Free")
    Wait = _wait
    locals().update({name: _data_call(name) for name in _DATA_CALLS})
    Lock = _epoch_call("Lock", "Lock", 0)
    Unlock = _epoch_call("Unlock", "Unlock", 0)
    Lock_all = _epoch_call("Lock_all", "Lock_all")
    Unlock_all = _epoch_call("Unlock_all", "Unlock_all")
    Flush = _epoch_call("Flush", "Flush", 0)
    Flush_all = _epoch_call("Flush_all", "Flush_all")
    Flush_local = _epoch_call("Flush_local", "Flush_local", 0)
    Flush_local_all = _epoch_call("Flush_local_all", "Flush_local_all")
    Sync = _epoch_call("Sync", "Sync")
    Post = _epoch_call("Post", "Win.Post")
    Start = _epoch_call("Start", "Win.Start")
    Complete = _epoch_call("Complete", "Win.Complete")


pickle_plain_copies(PlainWin)

Win = TracedWin  # its name, as mpi4py's (users read ``MPI.Win.__name__``)
Win.__name__ = Win.__qualname__ = "Win"
