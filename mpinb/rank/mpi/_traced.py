"""Traced communicators: twins of mpi4py's that record every MPI call user code makes.

The twins are subclasses of mpi4py's classes (``Intracomm``, ``Cartcomm``, ``Graphcomm``,
``Distgraphcomm``, ``Request``) that share the handle of the object they stand for; the world's
twin is installed as ``MPI.COMM_WORLD`` and ``TracedRequest`` as ``MPI.Request``, so user code
needs no change. To user code they are mpi4py's: same names, classes that compare equal,
handles, pickling, ``free()``, statuses, results and exceptions. Only when the recorder is on
does a call note its peer, tag, bytes, times and source line.

Blocking calls are carried out as their nonblocking forms, polled (see ``_waiting``), so that the
notebook can interrupt them and learn what each rank waits for. Lowercase collectives have no
nonblocking form: they run as polled messages of pickles (see ``_objects``) on the twin's private
copy of its communicator (the "shadow"), after the members agree, in messages too, on which call
they are in, so that mismatched collectives raise instead of hanging.

The calls themselves live in ``_p2p`` and ``_collectives``, requests in ``_requests``; the
hottest of them also in C (``_tracer.c``, loaded by ``_native``), which records into the same
buffer and hands every form it does not take to the Python method. This module makes the
communicator classes from them and names communicators alike on all members.
"""

from __future__ import annotations

import copyreg
from collections.abc import Callable
from time import perf_counter as _now
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ...common._events import COLLECTIVE, DERIVING_CALLS, LOCAL_DERIVING_CALLS
from ...common._ranges import format_ranks
from . import _entered_ahead, _left_behind, _native, _twins
from ._calls import PlainIntracomm, TwinClass, call_site, converter, named, world_ranks
from ._collectives import COLLECTIVES, agree, epoch, rehearsal_of, release
from ._intercomms import INTERCOMM_METHODS, INTRACOMM_METHODS, PlainIntercomm
from ._messages import MATCHED_PROBES
from ._neighbors import NEIGHBORHOOD
from ._p2p import P2P
from ._persistent import PERSISTENT
from ._recorder import RECORDER as _rec

_children: dict[tuple, int] = {}  # (parent id, constructor kind) -> communicators made so far


def _world_ranks(comm) -> list[int]:
    return world_ranks(comm.Get_group())


def _derived(name: str, owner=PlainIntracomm):
    base = getattr(owner, name)
    kind = "group" if name in LOCAL_DERIVING_CALLS else ""

    def method(self, *args, **kwargs):
        where = call_site()
        start = _now()
        if not kind:  # every member of self takes part: agree first, so that a mismatch can be seen
            agree(self, name, -1, where)
        new = base(self, *args, **kwargs)
        if _rec.on:
            end = _now()
            _rec.add((name, COLLECTIVE, self._mpinb_id, -1, -1, 0, 0, start, end, end, *where))
        if new == MPI.COMM_NULL or not isinstance(new, _PLAIN_CLASSES):
            return new
        members = _world_ranks(new)
        # Every member makes its communicators from a parent in the same order, so counting them
        # per parent names each one alike on all its members; Create_group is called by the
        # group's members only, so it counts apart and its id names the members.
        key = (self._mpinb_id, kind, tuple(members) if kind else ())
        number = _children[key] = _children.get(key, -1) + 1
        cid = (f"{self._mpinb_id}.group{number}[{format_ranks(members)}]" if kind
               else f"{self._mpinb_id}.{number}@{members[0]}")
        twin = traced(new, cid, members)
        _left_behind.made(twin, name, where)
        return twin

    return named(method, base)


def traced(comm, cid: str | None = None, members: list[int] | None = None, constant: bool = False,
           shadow=None):
    """The traced twin of ``comm`` (sharing its handle), registered under id ``cid``.

    ``constant`` twins stand for a predefined communicator (the world): ``free()`` leaves them,
    ``Free()`` fails as it does on ``MPI.COMM_WORLD``, and they pickle by name. ``shadow`` is a
    private copy to take over (a fresh world takes the old one's: see ``_tracing.fresh_world``)
    instead of making one with a blocking ``Dup``.
    """
    twin_class = _TWIN_OF_CLASS.get(type(comm)) or next(
        (twin for plain, twin in _TWIN_OF_CLASS.items() if isinstance(comm, plain)), None)
    if twin_class is None:
        return comm
    twin: Any = comm if isinstance(comm, _TWINS) else twin_class(comm)  # it grows mpinb's attributes
    twin._mpinb_id = cid if cid is not None else _id_of_handle.get(twin.handle) or _handle_id(twin)
    _id_of_handle[twin.handle] = twin._mpinb_id
    if cid is None:
        _left_behind.also(twin)
    # Made while every member is here: it has just made the communicator (or started the pool).
    if shadow is None and cid is not None:
        twin._mpinb_made_in = epoch()
        if isinstance(twin, PlainIntercomm):
            shadow = PlainIntercomm(PlainIntercomm.Dup(twin))
        else:
            shadow = PlainIntracomm(PlainIntracomm.Dup(twin))
            if (rehearsal := rehearsal_of(shadow)) is not None:
                twin._mpinb_rehearsal = rehearsal
            _entered_ahead.enroll(twin, shadow, polled=False)
    twin._mpinb_shadow = shadow
    if constant:
        twin._mpinb_constant = True
        twin.__module__ = "mpi4py.MPI"  # pickle finds MPI.COMM_WORLD by name: this twin
        _constant_handles.add(twin.handle)
    _rec.comms[twin._mpinb_id] = members if members is not None else _world_ranks(twin)
    return twin


_id_of_handle: dict[int, str] = {}  # a copy of a twin's handle (``fromhandle``) is the same communicator
# The handles that stand for the world (a fresh world's too, which is a copy): a copy of such a
# twin (``type(comm)(comm)``, ``fromhandle``) is as constant as the twin, as a copy of mpi4py's
# COMM_WORLD is. Never freed, so never given to another communicator.
_constant_handles: set[int] = set()


def _set_null(comm) -> None:
    """Make this object stand for ``MPI.COMM_NULL`` without freeing its communicator: what mpi4py's
    ``free()`` does to a copy of a predefined one (here: a copy of a fresh world, which is not
    predefined to MPI)."""
    import ctypes
    import sys

    size = MPI._sizeof(comm)
    ctypes.memmove(MPI._addressof(comm), MPI._handleof(MPI.COMM_NULL).to_bytes(size, sys.byteorder), size)


def _handle_id(comm) -> str:
    """An id for a communicator that reached user code around mpinb (``Idup``, pickling)."""
    return f"comm{comm.handle:x}@{_world_ranks(comm)[0]}"


if TYPE_CHECKING:  # each twin class puts mpi4py's class after the mixin (see _twin_class)
    _MixedInto = MPI.Intracomm
else:
    _MixedInto = object


class _TwinMixin(_MixedInto):
    """What every traced communicator adds to mpi4py's class: its id, and a private copy of
    itself for mpinb's own traffic, freed together with it."""

    _mpinb_shadow = None
    _mpinb_constant = False
    _mpinb_epoch, _mpinb_calls = -1, 0  # collective calls counted for tags (see ``_exchange``)
    _mpinb_made_in = -1  # the epoch its shadow was made in (see _collectives.release); -1: none made
    _mpinb_slot = -1  # on the board of calls entered ahead (see _entered_ahead); -1: none
    fromhandle, f2py, fromint = converter("fromhandle"), converter("f2py"), converter("fromint")

    @classmethod
    def _twin_of(cls, comm):
        return traced(comm)

    def __getattr__(self, name: str):
        # A twin that mpi4py made without mpinb (``Idup``, pickling) is registered the first
        # time a traced call asks for its id.
        if name == "_mpinb_id":
            return traced(self)._mpinb_id
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _mpinb_is_world(self) -> bool:
        return self.handle in _constant_handles  # (the world's twin's among them)

    def Free(self) -> None:
        if self._mpinb_is_world:
            return _ORIGINAL_WORLD.Free()  # fails as freeing MPI.COMM_WORLD does
        self._free_shadow()
        super().Free()

    def free(self) -> None:
        if self._mpinb_constant:  # mpi4py's free() leaves MPI.COMM_WORLD alone
            return
        if self.handle in _constant_handles:  # a copy of the world: now null, as mpi4py's copy would be
            _set_null(self)
            return
        self._free_shadow()
        super().free()

    def Abort(self, errorcode: int = 0):
        _announce_abort(errorcode)
        return super().Abort(errorcode)

    def Disconnect(self) -> None:
        if self._mpinb_is_world:
            return _ORIGINAL_WORLD.Disconnect()
        self._free_shadow()
        super().Disconnect()

    def _free_shadow(self) -> None:
        shadow, self._mpinb_shadow = self._mpinb_shadow, None
        release(shadow, self._mpinb_made_in)
        release(self.__dict__.pop("_mpinb_rehearsal", None), self._mpinb_made_in)  # see _collectives.rehearse
        _id_of_handle.pop(self.handle, None)
        _rec.forget(self.__dict__.get("_mpinb_id"))
        _left_behind.freed(self.__dict__.get("_mpinb_id"))

    def __reduce__(self):
        if self._mpinb_is_world:
            return "COMM_WORLD"  # looked up in mpi4py.MPI (see ``traced``): this twin
        return super().__reduce__()

    def py2f(self) -> int:
        if self._mpinb_is_world:  # the constant's value, as under mpiexec (a fresh world is a copy)
            return _ORIGINAL_WORLD.py2f()
        return super().py2f()


_ORIGINAL_WORLD = MPI.COMM_WORLD
_announce_abort: Callable[[int], None] = lambda errorcode: None


def announce_aborts_with(announce: Callable[[int], None]) -> None:
    """Have every ``Abort`` call ``announce(errorcode)`` first: the runtime's death watch learns that
    mpiexec is about to kill every rank, and this layer never imports the runtime."""
    global _announce_abort
    _announce_abort = announce


def _world():
    """Unpickles mpi4py's own ``COMM_WORLD`` object, which pickle cannot find by name while
    ``MPI.COMM_WORLD`` is the twin: the same handle, in whatever ``MPI.COMM_WORLD`` is now."""
    return MPI.COMM_WORLD


def _copy_of_world():
    """Unpickles ``MPI.Intracomm(MPI.COMM_WORLD)``, also once the world is a fresh one."""
    return PlainIntracomm(MPI.COMM_WORLD)


def _reduce_plain_intracomm(comm):
    # Twins reach here too: their class equals (and hashes as) mpi4py's, so pickle's
    # dispatch table finds this entry for them.
    if isinstance(comm, _TwinMixin):
        return comm.__reduce__()
    if comm is _ORIGINAL_WORLD:
        return _world, ()
    if comm == MPI.COMM_WORLD:  # a plain copy of the world's handle (after a reset, not named)
        return _copy_of_world, ()
    return comm.__reduce__()


copyreg.pickle(PlainIntracomm, _reduce_plain_intracomm)


_METHODS = {**P2P, **COLLECTIVES, **PERSISTENT, **MATCHED_PROBES, **{n: _derived(n) for n in DERIVING_CALLS}}
# The hottest calls in C where the C tracer loads (each falls back to the method it replaces).
_IN_C = _native.methods(_METHODS)
PYTHON_OF_C = {name: _METHODS[name] for name in _IN_C}  # what a --verify run uses instead (see _verify)
_METHODS.update(_IN_C)
_rec.native = _native.tracer


def _twin_class(plain: type, extra: dict, methods: dict = _METHODS) -> type:
    # Named as mpi4py's own class (``type(comm).__name__`` is what it is under mpiexec); pickle
    # finds it by that name in this module (see the aliases below).
    return TwinClass(plain.__name__, (_TwinMixin, plain), {
        **methods, **extra, "_mpinb_plain": plain,
        "__doc__": f"An ``MPI.{plain.__name__}`` that records the MPI calls made through it.",
        "__module__": __name__,
    })


TracedIntracomm = _twin_class(PlainIntracomm, INTRACOMM_METHODS)
TracedCartcomm = _twin_class(MPI.Cartcomm, {**NEIGHBORHOOD, **INTRACOMM_METHODS, "Sub": _derived("Sub", MPI.Cartcomm)})
TracedGraphcomm = _twin_class(MPI.Graphcomm, {**NEIGHBORHOOD, **INTRACOMM_METHODS})
TracedDistgraphcomm = _twin_class(MPI.Distgraphcomm, {**NEIGHBORHOOD, **INTRACOMM_METHODS})
# Between two groups: messages (``peer`` in the remote group) and Merge; collectives pass through.
_BETWEEN_GROUPS = {**P2P, **MATCHED_PROBES,
                   **{n: m for n, m in PERSISTENT.items() if n.removesuffix("_init") not in COLLECTIVES}}
TracedIntercomm = _twin_class(PlainIntercomm, INTERCOMM_METHODS,
                              {**_BETWEEN_GROUPS, **{n: m for n, m in _IN_C.items() if n in _BETWEEN_GROUPS}})
# most derived first: a Cartcomm is an Intracomm too
_TWIN_OF_CLASS = {MPI.Cartcomm: TracedCartcomm, MPI.Graphcomm: TracedGraphcomm,
                  MPI.Distgraphcomm: TracedDistgraphcomm, PlainIntracomm: TracedIntracomm,
                  PlainIntercomm: TracedIntercomm}
_PLAIN_CLASSES, _TWINS = tuple(_TWIN_OF_CLASS), tuple(_TWIN_OF_CLASS.values())
TWIN_CLASSES = _TWINS
Intracomm, Cartcomm, Graphcomm, Distgraphcomm = TracedIntracomm, TracedCartcomm, TracedGraphcomm, TracedDistgraphcomm
Intercomm = TracedIntercomm
_twins.made_by(traced)  # (the calls that make intercommunicators ask _twins for their twins)
