"""Communicators and requests that record every MPI call user code makes through mpi4py.

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
"""

from __future__ import annotations

import copyreg
import sys
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from time import perf_counter as _now

from mpi4py import MPI

from .._events import (
    CART_DERIVING_CALLS,
    COLLECTIVE,
    DERIVING_CALLS,
    LOCAL_DERIVING_CALLS,
    PROBE,
    RECV,
    SEND,
    WAIT,
    world_rank,
)
from .._protocol import WaitKind, WaitState, wait_state
from .._ranges import format_ranks
from . import _objects as _objects_module
from ._recorder import RECORDER as _rec
from ._waiting import abandon as _abandon
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

_Intracomm = MPI.Intracomm
_Request = MPI.Request  # mpi4py's own class; MPI.Request is replaced by TracedRequest
_iprobe = _Intracomm.iprobe
_improbe = _Intracomm.improbe
_lower_recv = _Intracomm.recv
_NAN = float("nan")
_BYTE = MPI.BYTE


def _arg(args: tuple, kwargs: dict, position: int, name: str, default=None):
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _nbytes(spec) -> int:
    """Size of an mpi4py buffer spec: an array, or ``[array, count, type]`` and friends."""
    if spec is None or spec is MPI.IN_PLACE or spec is MPI.BOTTOM:
        return 0
    size = getattr(spec, "nbytes", None)
    if size is not None:
        return int(size)
    if isinstance(spec, (list, tuple)):
        return _nbytes(spec[0]) if spec else 0
    try:
        return memoryview(spec).nbytes
    except TypeError:
        return 0


def _with_status(args: tuple, kwargs: dict, position: int):
    """The user's status argument, or a fresh Status slipped in so that we can read the source."""
    status = _arg(args, kwargs, position, "status")
    if status is not None:
        return args, kwargs, status
    status = MPI.Status()
    if len(args) > position:
        args = args[:position] + (status,) + args[position + 1:]
    else:
        kwargs = dict(kwargs, status=status)
    return args, kwargs, status


def _where(depth: int = 2) -> tuple[str, int]:
    try:
        frame = sys._getframe(depth)
    except ValueError:  # called from the top of a stack
        return "", 0
    return frame.f_code.co_filename, frame.f_lineno


def _peer_world(comm, peer) -> int | None:
    world = world_rank(_rec.comms.get(comm._mpinb_id), peer)
    return world if world >= 0 else None


def _describer(comm, op: str, kind: WaitKind, peer, tag, size: int, where: tuple[str, int], root=None):
    """What a wait is for, built only if the wait lasts (``_waiting`` calls it after spinning)."""
    return _describe, (comm, op, kind, peer, tag, size, where, root)


def _describe(comm, op, kind, peer, tag, size, where, root) -> WaitState:
    return wait_state(op, kind, where, comm=comm._mpinb_id, members=_rec.comms.get(comm._mpinb_id),
                      peer=_peer_world(comm, peer),
                      any_source=peer == MPI.ANY_SOURCE, tag=tag, nbytes=size,
                      root=_peer_world(comm, root))


def _named(method, base):
    method.__name__ = base.__name__
    method.__qualname__ = f"TracedIntracomm.{base.__name__}"
    method.__doc__ = base.__doc__
    return method


# -- point to point ----------------------------------------------------------------------------

_NONBLOCKING_SEND = {"send": "isend", "ssend": "issend", "bsend": "ibsend", "Send": "Isend",
                     "Ssend": "Issend", "Bsend": "Ibsend", "Rsend": "Irsend"}


def _send(name: str, lowercase: bool, nonblocking: bool):
    base = getattr(_Intracomm, name)
    post = base if nonblocking else getattr(_Intracomm, _NONBLOCKING_SEND[name])
    if lowercase:  # the uppercase call that sends the pickle's bytes
        post = getattr(_Intracomm, _NONBLOCKING_SEND.get(name, name).capitalize())

    def method(self, *args, **kwargs):
        rec = _rec
        recording = rec.on
        start = _now()
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "tag", 0)
        if lowercase:
            request, size = _post_object(self, post, _arg(args, kwargs, 0, "obj"), dest, tag)
        else:
            request = post(self, *args, **kwargs)
            size = _nbytes(_arg(args, kwargs, 0, "buf"))
        posted = _now()
        where = _where()
        if nonblocking:
            event = [name, SEND, self._mpinb_id, dest, tag, size, 0, start, _NAN, posted, *where]
            if recording:
                rec.add(event)
            return TracedRequest._wrap(request, event, recording)
        if not request.Test():  # most small sends are done at once: nothing more to set up
            _poll_request(request, None, _describer(self, name, "send", dest, tag, size, where))
        if recording:
            end = _now()
            rec.add((name, SEND, self._mpinb_id, dest, tag, size, 0, start, end, end, *where))

    return _named(method, base)


def _recv(name: str, lowercase: bool):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        status = _arg(args, kwargs, 3, "status")
        if status is None:
            status = MPI.Status()
        source = _arg(args, kwargs, 1, "source", MPI.ANY_SOURCE)
        tag = _arg(args, kwargs, 2, "tag", MPI.ANY_TAG)
        buf = _arg(args, kwargs, 0, "buf")
        where = _where()
        describe = (_describe_receive, (self, name, source, tag, buf, where))
        start = _now()
        if lowercase:
            result = _receive_object(self, buf, source, tag, status, describe)
        else:
            request = _Intracomm.Irecv(self, buf, source, tag)
            if not request.Test(status):
                _poll_request(request, status, describe)
            result = None
        if rec.on:
            end = _now()
            size = status.Get_count(_BYTE)  # for lowercase calls, the pickle's size
            rec.add((name, RECV, self._mpinb_id, status.Get_source(), status.Get_tag(), 0, size,
                     start, end, end, *where))
        return result

    return _named(method, base)


def _post_object(comm, post, obj, dest, tag):
    """A lowercase send as mpi4py puts it on the wire: the pickle (mpi4py's serializer, as the
    user configured it) sent as bytes. Returns the request and the pickle's size."""
    data = MPI.pickle.dumps(obj) if dest != MPI.PROC_NULL else b""
    return post(comm, [data, _BYTE], dest, tag), len(data)


def _describe_receive(comm, name, source, tag, buf, where) -> WaitState:
    return _describe(comm, name, "recv", source, tag, _nbytes(buf), where, None)


def _receive_object(comm, buf, source, tag, status, describe):
    """mpi4py's lowercase receive, polled: a matched probe, then the receive of that very message
    (as mpi4py's ``recv`` does); with ``buf``, mpi4py's own deprecated form, which warns."""
    if buf is None:
        message = _improbe(comm, source, tag, status)
        if message is None:
            message = _poll_result(lambda: _improbe(comm, source, tag, status), _is_not_none, describe)
        if status.Get_count(_BYTE) <= _objects_module.WHOLE_ON_ARRIVAL:
            return message.recv(status)
        request = message.irecv()  # a large pickle may need its sender's progress: poll
        with _abandoned_if_broken(request):
            return _poll_result(lambda: request.test(status), _first, describe)[1]
    _poll(lambda: _iprobe(comm, source, tag, status), describe)
    return _lower_recv(comm, buf, status.Get_source(), status.Get_tag(), status)


def _poll_result(call, done, describe):
    """Poll ``call()`` until ``done(result)``; return that result."""
    box = [None]

    def test() -> bool:
        box[0] = call()
        return done(box[0])

    _poll(test, describe)
    return box[0]


def _is_not_none(value) -> bool:
    return value is not None


def _first(value) -> bool:
    return value[0]


def _irecv(name: str, lowercase: bool):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        start = _now()
        request = base(self, *args, **kwargs)
        end = _now()
        source = _arg(args, kwargs, 1, "source", MPI.ANY_SOURCE)
        tag = _arg(args, kwargs, 2, "tag", MPI.ANY_TAG)
        event = [name, RECV, self._mpinb_id, source, tag, 0, 0, start, _NAN, end, *_where()]
        if rec.on:
            rec.add(event)
        return TracedRequest._wrap(request, event, rec.on)

    return _named(method, base)


def _sendrecv(name: str, lowercase: bool, replace: bool):
    base = getattr(_Intracomm, name)
    status_at = 5 if replace else 6
    source_at, recvtag_at = (3, 4) if replace else (4, 5)
    post = _Intracomm.Isendrecv_replace if replace else None

    def method(self, *args, **kwargs):
        rec = _rec
        args, kwargs, status = _with_status(args, kwargs, status_at)
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "sendtag", 0)
        source = _arg(args, kwargs, source_at, "source", MPI.ANY_SOURCE)
        recvtag = _arg(args, kwargs, recvtag_at, "recvtag", MPI.ANY_TAG)
        where = _where()
        start = _now()
        if lowercase:
            sendobj, recvbuf = _arg(args, kwargs, 0, "sendobj"), _arg(args, kwargs, 3, "recvbuf")
            sending, sent = _post_object(self, _Intracomm.Isend, sendobj, dest, tag)
            describe = _describer(self, name, "recv", source, recvtag, 0, where)
            with _abandoned_if_broken(sending):
                result = _receive_object(self, recvbuf, source, recvtag, status, describe)
            _poll_request(sending, None, _describer(self, name, "send", dest, tag, sent, where))
            received = status.Get_count(_BYTE)
        elif replace:
            call_args = tuple(a for i, a in enumerate(args) if i != status_at)
            call_kwargs = {k: v for k, v in kwargs.items() if k != "status"}
            request = post(self, *call_args, **call_kwargs)
            sent = _nbytes(_arg(args, kwargs, 0, "buf"))
            _poll_request(request, status, _describer(self, name, "recv", source, recvtag, sent, where))
            received = status.Get_count(_BYTE)
            result = None
        else:
            # A receive and a send posted side by side: their statuses are exact (MPICH's
            # Isendrecv leaves a wrong tag in its status).
            sendbuf, recvbuf = _arg(args, kwargs, 0, "sendbuf"), _arg(args, kwargs, 3, "recvbuf")
            receiving = _Intracomm.Irecv(self, recvbuf, source, recvtag)
            sending = _Intracomm.Isend(self, sendbuf, dest, tag)
            sent = _nbytes(sendbuf)
            both, statuses = [receiving, sending], [status, MPI.Status()]
            with _abandoned_if_broken(*both):
                _poll(lambda: _Request.Testall(both, statuses),
                      _describer(self, name, "recv", source, recvtag, sent, where))
            received = status.Get_count(_BYTE)
            result = None
        if rec.on:
            end = _now()
            cid = self._mpinb_id
            # MPICH's Isendrecv_replace leaves a wrong tag in its status; a requested one is exact.
            got_tag = recvtag if replace and recvtag != MPI.ANY_TAG else status.Get_tag()
            rec.add((name, SEND, cid, dest, tag, sent, 0, start, end, end, *where))
            rec.add((name, RECV, cid, status.Get_source(), got_tag, 0, received, start, end, end, *where))
        return result

    return _named(method, base)


@contextmanager
def _abandoned_if_broken(*requests) -> Iterator[None]:
    """Requests still pending when the block is broken off (an interrupt) are abandoned."""
    try:
        yield
    except BaseException:
        for request in requests:
            _abandon(request)
        raise


def _probe(name: str):
    base = getattr(_Intracomm, name)
    polled = name in ("probe", "Probe")
    check = getattr(_Intracomm, "i" + name if name == "probe" else "Iprobe" if name == "Probe" else name)

    def method(self, *args, **kwargs):
        rec = _rec
        args, kwargs, status = _with_status(args, kwargs, 2)
        where = _where()
        start = _now()
        if polled:
            source = _arg(args, kwargs, 0, "source", MPI.ANY_SOURCE)
            tag = _arg(args, kwargs, 1, "tag", MPI.ANY_TAG)
            _poll(lambda: check(self, source, tag, status), _describer(self, name, "recv", source, tag, 0, where))
            found = True
        else:
            found = base(self, *args, **kwargs)
        if rec.on:
            end = _now()
            peer, tag = (status.Get_source(), status.Get_tag()) if found else (-1, -1)
            rec.add((name, PROBE, self._mpinb_id, peer, tag, 0, 0, start, end, end, *where))
        return found

    return _named(method, base)


# -- collectives -------------------------------------------------------------------------------

def _exchange(comm, name: str, where, root) -> _objects_module.Exchange:
    """The messages of one collective call on ``comm``'s shadow, under a tag of their own.

    Members count their calls alike, so the k-th call has the same tag everywhere. After an
    aborted run (a new epoch) every count starts again: the aborted call may have been counted
    by some members only, and what it left in flight carries the old epoch's tags.
    """
    if comm._mpinb_epoch != _epoch:
        comm._mpinb_epoch, comm._mpinb_calls = _epoch, 0
    comm._mpinb_calls += 1
    tag = 1 + (_epoch * _CALLS_PER_EPOCH + comm._mpinb_calls) % _TAG_SPAN
    return _objects_module.Exchange(_shadow(comm), tag, _describer(comm, name, "collective", None, -1, 0,
                                                                   where, root))


_epoch = 0
_CALLS_PER_EPOCH = 2**20
_TAG_SPAN = min(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767, 2**30) - 1


def new_epoch() -> None:
    """After an aborted run (every rank calls this): mpinb's traffic starts afresh everywhere."""
    global _epoch
    _epoch += 1


def _agree(comm, name: str, root: int, where) -> None:
    """Every member says which collective it is in; a mismatch raises on all of them.

    Point-to-point messages, polled: a member that never comes leaves nothing pending that
    could derail a later call. The agreement also synchronizes, so it is all a barrier needs.
    """
    if comm.Get_size() == 1:
        return
    code = _AGREED_CALLS.index(_AGREED_AS.get(name, name))
    with _exchange(comm, name, where, root) as exchange:
        records = _objects_module.allgather_bytes(exchange, array("i", [code, root]).tobytes())
    calls = [tuple(array("i", record)) for record in records]
    if len(set(calls)) > 1:
        groups: dict[str, list[int]] = {}
        members = _rec.comms.get(comm._mpinb_id) or list(range(len(calls)))
        for r, (op, op_root) in enumerate(calls):
            label = _AGREED_CALLS[op] + (f" (root {op_root})" if op_root >= 0 else "")
            groups.setdefault(label, []).append(members[r])
        said = "; ".join(f"{_ranks_text(ranks)} called {label}" for label, ranks in groups.items())
        raise RuntimeError(
            f"mismatched collectives on communicator {comm._mpinb_id!r}: {said}. Every rank of a "
            "communicator must call the same collectives, with the same root, in the same order."
        )


_AGREED_AS = {"Barrier": "barrier"}  # the same MPI call under two names


def _objects(comm, name: str, args: tuple, kwargs: dict, where, root):
    """A lowercase collective, as polled messages of pickles on the shadow (see ``_objects``):
    its result, and the bytes this rank sent and received."""
    lock = MPI._comm_lock(comm, _LOCKED_AS.get(name, "@commctx_intra"))  # mpi4py's thread lock
    with _exchange(comm, name, where, root) as exchange, lock:
        result = _objects_module.COLLECTIVES[name](exchange, *args, **kwargs)
    return result, exchange.sent, exchange.received


# The key under which mpi4py locks a communicator for each lowercase collective.
_LOCKED_AS = {name: name for name in ("bcast", "gather", "scatter", "allgather", "alltoall")}


def _buffer_bytes(comm, args: tuple, kwargs: dict, bcast: bool, root) -> tuple[int, int]:
    """Bytes a buffer collective sends and receives on this rank, from its buffer specs."""
    if bcast:
        size = _nbytes(_arg(args, kwargs, 0, "buf"))
        return (size, 0) if comm.Get_rank() == root else (0, size)
    return _nbytes(_arg(args, kwargs, 0, "sendbuf")), _nbytes(_arg(args, kwargs, 1, "recvbuf"))


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _collective(name: str, root_at: int | None, lowercase: bool, nonblocking: bool):
    base = getattr(_Intracomm, name)
    bcast = name.lower().lstrip("i") == "bcast"
    agreed_only = name in ("barrier", "Barrier")  # a barrier moves no data: the agreement is all
    polled = None if lowercase or nonblocking else getattr(_Intracomm, "I" + name[0].lower() + name[1:])

    def method(self, *args, **kwargs):
        rec = _rec
        root = -1 if root_at is None else _arg(args, kwargs, root_at, "root", 0)
        where = _where()
        start = _now()
        sent = received = 0
        if agreed_only:
            # on mpinb's copy of the communicator: the user's own sequence of collectives stays
            # the program's (MPICH matches nonblocking ones, such as Iagree, by that sequence)
            if args or kwargs:
                raise TypeError(f"{name}() takes no arguments")
            _agree(self, name, root, where)
            result = None
        elif lowercase:
            _agree(self, name, root, where)
            result, sent, received = _objects(self, name, args, kwargs, where, root)
        elif polled is not None:
            request = polled(self, *args, **kwargs)
            _poll_request(request, None, _describer(self, name, "collective", None, -1, 0, where, root))
            result = None
        else:
            result = base(self, *args, **kwargs)
        recording = rec.on
        if not recording and not nonblocking:
            return result
        end = _now()
        if not (lowercase or agreed_only):  # for those, the pickles' bytes were counted above
            sent, received = _buffer_bytes(self, args, kwargs, bcast, root)
        if nonblocking:
            event = [name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, _NAN, end, *where]
            if recording:
                rec.add(event)
            return TracedRequest._wrap(result, event, recording)
        rec.add((name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, end, end, *where))
        return result

    return _named(method, base)


# -- communicators -----------------------------------------------------------------------------

_WORLD_GROUP = MPI.COMM_WORLD.Get_group()
_children: dict[tuple, int] = {}  # (parent id, constructor kind) -> communicators made so far


def _world_ranks(comm) -> list[int]:
    group = comm.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), _WORLD_GROUP))
    finally:
        group.Free()


def _shadow(comm) -> MPI.Intracomm:
    """mpinb's private copy of ``comm``: its own traffic never touches the user's communicators.

    Twins made by mpinb get theirs when they are made (see ``traced``); one that reached user code
    around mpinb (``type(comm).fromhandle``, ``Idup``) makes it on first need, with a polled
    ``Idup`` at the first collective, which every member calls in the same order.
    """
    shadow = comm._mpinb_shadow
    if shadow is None:
        copy, request = _Intracomm.Idup(comm)
        _poll_request(request, None, _describer(comm, "Dup", "collective", None, -1, 0, _where(3)))
        shadow = comm._mpinb_shadow = _Intracomm(copy)  # a plain communicator: untraced
    return shadow


def _derived(name: str, owner=_Intracomm):
    base = getattr(owner, name)
    kind = "group" if name in LOCAL_DERIVING_CALLS else ""

    def method(self, *args, **kwargs):
        where = _where()
        start = _now()
        if not kind:  # every member of self takes part: agree first, so that a mismatch can be seen
            _agree(self, name, -1, where)
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
        return traced(new, cid, members)

    return _named(method, base)


def traced(comm, cid: str | None = None, members: list[int] | None = None, constant: bool = False):
    """The traced twin of ``comm`` (sharing its handle), registered under id ``cid``.

    ``constant`` twins stand for a predefined communicator (the world): ``free()`` leaves them,
    ``Free()`` fails as it does on ``MPI.COMM_WORLD``, and they pickle by name.
    """
    twin_class = _TWIN_OF_CLASS.get(type(comm)) or next(
        (twin for plain, twin in _TWIN_OF_CLASS.items() if isinstance(comm, plain)), None)
    if twin_class is None:
        return comm  # intercommunicators pass through untouched
    twin = comm if isinstance(comm, _TWINS) else twin_class(comm)
    twin._mpinb_id = cid if cid is not None else _id_of_handle.get(twin.handle) or _handle_id(twin)
    _id_of_handle[twin.handle] = twin._mpinb_id
    # Made while every member is here: it has just made the communicator (or started the pool).
    twin._mpinb_shadow = _Intracomm(_Intracomm.Dup(twin)) if cid is not None else None
    if constant:
        twin._mpinb_constant = True
        twin.__module__ = "mpi4py.MPI"  # pickle finds MPI.COMM_WORLD by name: this twin
    _rec.comms[twin._mpinb_id] = members if members is not None else _world_ranks(twin)
    return twin


_id_of_handle: dict[int, str] = {}  # a copy of a twin's handle (``fromhandle``) is the same communicator


def _handle_id(comm) -> str:
    """An id for a communicator that reached user code around mpinb (``Idup``, pickling)."""
    return f"comm{comm.handle:x}@{_world_ranks(comm)[0]}"


class _TwinClass(type):
    """The class of a twin equals (and hashes as) the mpi4py class it stands for, so that
    ``type(comm) == MPI.Cartcomm`` holds; subclasses of a twin class are classes of their own."""

    def __eq__(cls, other) -> bool:
        return other is cls or other is cls.__dict__.get("_mpinb_plain", cls)

    def __ne__(cls, other) -> bool:
        return not cls == other

    def __hash__(cls) -> int:
        return type.__hash__(cls.__dict__.get("_mpinb_plain", cls))


def _converter(name: str):
    def convert(cls, value):
        return cls._twin_of(getattr(cls._mpinb_plain, name)(value))
    convert.__name__ = name
    return classmethod(convert)


class _TwinMixin:
    """What every traced communicator adds to mpi4py's class: its id, and a private copy of
    itself for mpinb's own traffic, freed together with it."""

    _mpinb_shadow = None
    _mpinb_constant = False
    _mpinb_epoch, _mpinb_calls = -1, 0  # collective calls counted for tags (see ``_exchange``)
    fromhandle, f2py, fromint = _converter("fromhandle"), _converter("f2py"), _converter("fromint")

    @classmethod
    def _twin_of(cls, comm):
        return traced(comm)

    def __getattr__(self, name: str):
        # A twin that mpi4py made without mpinb (``Idup``, pickling) is registered the first
        # time a traced call asks for its id.
        if name == "_mpinb_id":
            return traced(self)._mpinb_id
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def Free(self) -> None:
        if self._mpinb_constant:
            return _ORIGINAL_WORLD.Free()  # fails as freeing MPI.COMM_WORLD does
        self._free_shadow()
        super().Free()

    def free(self) -> None:
        if not self._mpinb_constant:  # mpi4py's free() leaves constants alone
            self._free_shadow()
            super().free()

    def Abort(self, errorcode: int = 0):
        from ._deathwatch import report_abort

        report_abort(errorcode)
        return super().Abort(errorcode)

    def Disconnect(self) -> None:
        if self._mpinb_constant:
            return _ORIGINAL_WORLD.Disconnect()
        self._free_shadow()
        super().Disconnect()

    def _free_shadow(self) -> None:
        shadow, self._mpinb_shadow = self._mpinb_shadow, None
        if shadow is not None:
            shadow.Free()
        _id_of_handle.pop(self.handle, None)
        _rec.forget(self.__dict__.get("_mpinb_id"))

    def __reduce__(self):
        if self._mpinb_constant:
            return "COMM_WORLD"  # looked up in mpi4py.MPI (see ``traced``): this twin
        return super().__reduce__()


_ORIGINAL_WORLD = MPI.COMM_WORLD


def _world():
    """Unpickles mpi4py's own ``COMM_WORLD`` object, which pickle cannot find by name while
    ``MPI.COMM_WORLD`` is the twin: the same handle, in whatever ``MPI.COMM_WORLD`` is now."""
    return MPI.COMM_WORLD


def _copy_of_world():
    """Unpickles ``MPI.Intracomm(MPI.COMM_WORLD)``, also once the world is a fresh one."""
    return _Intracomm(MPI.COMM_WORLD)


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


copyreg.pickle(_Intracomm, _reduce_plain_intracomm)


_P2P = {
    **{n: _send(n, True, False) for n in ("send", "ssend", "bsend")},
    **{n: _send(n, False, False) for n in ("Send", "Ssend", "Bsend", "Rsend")},
    **{n: _send(n, True, True) for n in ("isend", "issend", "ibsend")},
    **{n: _send(n, False, True) for n in ("Isend", "Issend", "Ibsend", "Irsend")},
    "recv": _recv("recv", True),
    "Recv": _recv("Recv", False),
    "irecv": _irecv("irecv", True),
    "Irecv": _irecv("Irecv", False),
    "sendrecv": _sendrecv("sendrecv", True, False),
    "Sendrecv": _sendrecv("Sendrecv", False, False),
    "Sendrecv_replace": _sendrecv("Sendrecv_replace", False, True),
    **{n: _probe(n) for n in ("probe", "iprobe", "Probe", "Iprobe")},
}

_ROOTS_LOWER = {"barrier": None, "bcast": 1, "gather": 1, "scatter": 1, "allgather": None,
                "alltoall": None, "reduce": 2, "allreduce": None, "scan": None, "exscan": None}
_AGREED_CALLS = (*_ROOTS_LOWER, *CART_DERIVING_CALLS)  # the same codes on every rank
_ROOTS_UPPER = {"Barrier": None, "Bcast": 1, "Gather": 2, "Gatherv": 2, "Scatter": 2, "Scatterv": 2,
                "Allgather": None, "Allgatherv": None, "Alltoall": None, "Alltoallv": None,
                "Alltoallw": None, "Reduce": 3, "Allreduce": None, "Reduce_scatter": None,
                "Reduce_scatter_block": None, "Scan": None, "Exscan": None}
_COLLECTIVES = {
    **{n: _collective(n, r, True, False) for n, r in _ROOTS_LOWER.items()},
    **{n: _collective(n, r, False, False) for n, r in _ROOTS_UPPER.items()},
    **{"I" + n[0].lower() + n[1:]: _collective("I" + n[0].lower() + n[1:], r, False, True)
       for n, r in _ROOTS_UPPER.items()},
}
_METHODS = {**_P2P, **_COLLECTIVES, **{n: _derived(n) for n in DERIVING_CALLS}}


def _twin_class(plain: type, extra: dict) -> type:
    # Named as mpi4py's own class (``type(comm).__name__`` is what it is under mpiexec); pickle
    # finds it by that name in this module (see the aliases below).
    return _TwinClass(plain.__name__, (_TwinMixin, plain), {
        **_METHODS, **extra, "_mpinb_plain": plain,
        "__doc__": f"An ``MPI.{plain.__name__}`` that records the MPI calls made through it.",
        "__module__": __name__,
    })


TracedIntracomm = _twin_class(_Intracomm, {})
TracedCartcomm = _twin_class(MPI.Cartcomm, {"Sub": _derived("Sub", MPI.Cartcomm)})
TracedGraphcomm = _twin_class(MPI.Graphcomm, {})
TracedDistgraphcomm = _twin_class(MPI.Distgraphcomm, {})
# most derived first: a Cartcomm is an Intracomm too
_TWIN_OF_CLASS = {MPI.Cartcomm: TracedCartcomm, MPI.Graphcomm: TracedGraphcomm,
                  MPI.Distgraphcomm: TracedDistgraphcomm, _Intracomm: TracedIntracomm}
_PLAIN_CLASSES, _TWINS = tuple(_TWIN_OF_CLASS), tuple(_TWIN_OF_CLASS.values())
Intracomm, Cartcomm, Graphcomm, Distgraphcomm = TracedIntracomm, TracedCartcomm, TracedGraphcomm, TracedDistgraphcomm


# -- requests ----------------------------------------------------------------------------------

class _RequestMeta(_TwinClass):
    """``isinstance(r, MPI.Request)`` stays true for every request once MPI.Request is ours."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _Request) if cls is TracedRequest else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _Request) if cls is TracedRequest else type.__subclasscheck__(cls, sub)


class TracedRequest(_Request, metaclass=_RequestMeta):
    """``MPI.Request`` while tracing is on: mpi4py's request, whose waits are polled (so they can
    be interrupted), and whose completion fills in its call's event (for a receive: the actual
    source, tag and size). A traced call's request takes over mpi4py's (its handle and the
    buffers mpi4py keeps for it); one that user code makes (``MPI.Request(r)``) is a plain copy."""

    _what: list | None = None   # the call that made it, for the status channel
    _event: list | None = None  # its event, until completion fills it in
    _mpinb_plain = _Request
    fromhandle, f2py, fromint = _converter("fromhandle"), _converter("f2py"), _converter("fromint")

    @classmethod
    def _twin_of(cls, request):
        return TracedRequest(request)

    @classmethod
    def _wrap(cls, request, event, recorded: bool = True) -> TracedRequest:
        twin = cls(request)
        twin._what = event
        twin._event = event if recorded else None
        return twin

    def _describe(self, where) -> WaitState:
        if self._what is None:
            return _waiting_on_nothing_known("Wait", where)
        op, kind, comm, peer, tag = self._what[:5]
        members = _rec.comms.get(comm)
        world_peer = world_rank(members, peer)
        state = wait_state(op, ("send", "recv", "collective")[min(kind, 2)], where, comm=comm, members=members,
                           peer=world_peer if kind != COLLECTIVE and world_peer >= 0 else None,
                           any_source=peer == MPI.ANY_SOURCE and kind == RECV, tag=tag, nbytes=self._what[5])
        state["via"] = "wait"
        return state

    def _done(self, status) -> None:
        event = self._event
        if event is None:
            return
        self._event = None
        event[8] = _now()
        if event[1] == RECV:  # the status tells source, tag and size (a pickle's, for irecv)
            event[3], event[4], event[6] = status.Get_source(), status.Get_tag(), status.Get_count(_BYTE)

    # single request
    def Wait(self, status=None):
        mine = status if status is not None else MPI.Status()
        start, where = _now(), _where()
        _poll_request(self, mine, (self._describe, (where,)))
        self._finished("Wait", start, mine, where)
        return True

    def wait(self, status=None):
        mine = status if status is not None else MPI.Status()
        start, where = _now(), _where()
        _, value = _poll_result(lambda: _Request.test(self, mine), _first, (self._describe, (where,)))
        self._finished("wait", start, mine, where)
        return value

    def _finished(self, name: str, start: float, status, where) -> None:
        if _rec.on and self._event is not None:
            self._done(status)
            end = _now()
            _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))

    def Test(self, status=None):
        if self._event is None or not _rec.on:
            return _Request.Test(self, status)
        mine = status if status is not None else MPI.Status()
        flag = _Request.Test(self, mine)
        if flag:
            self._done(mine)
        return flag

    def test(self, status=None):
        if self._event is None or not _rec.on:
            return _Request.test(self, status)
        mine = status if status is not None else MPI.Status()
        flag, value = _Request.test(self, mine)
        if flag:
            self._done(mine)
        return flag, value

    # many requests: polled
    @classmethod
    def Waitall(cls, requests, statuses=None):
        start, where = _now(), _where()
        statuses = _statuses_for(requests, statuses)
        _poll(lambda: _Request.Testall(requests, statuses), _many("Waitall", requests, where))
        _done_all(requests, statuses)
        if _rec.on:
            _log_wait("Waitall", start, where)
        return True

    @classmethod
    def waitall(cls, requests, statuses=None):
        start, where = _now(), _where()
        statuses = _statuses_for(requests, statuses)
        _, values = _poll_result(lambda: _Request.testall(requests, statuses), _first,
                                 _many("waitall", requests, where))
        _done_all(requests, statuses)
        if _rec.on:
            _log_wait("waitall", start, where)
        return values

    @classmethod
    def Testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag = _Request.Testall(requests, statuses)
        if flag:
            _done_all(requests, statuses)
        return flag

    @classmethod
    def testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag, values = _Request.testall(requests, statuses)
        if flag:
            _done_all(requests, statuses)
        return flag, values

    @classmethod
    def Waitany(cls, requests, status=None):
        return _wait_any("Waitany", _Request.Testany, requests, status)[0]

    @classmethod
    def waitany(cls, requests, status=None):
        index, _, value = _wait_any("waitany", _Request.testany, requests, status)
        return index, value

    @classmethod
    def Testany(cls, requests, status=None):
        mine = status if status is not None or not _rec.on else MPI.Status()
        index, flag = _Request.Testany(requests, mine)
        if flag:
            _done_at(requests, index, mine)
        return index, flag

    @classmethod
    def testany(cls, requests, status=None):
        mine = status if status is not None or not _rec.on else MPI.Status()
        index, flag, value = _Request.testany(requests, mine)
        if flag:
            _done_at(requests, index, mine)
        return index, flag, value

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices = _poll_result(lambda: _Request.Testsome(requests, statuses), _some_done,
                               _many("Waitsome", requests, _where()))
        _done_some(requests, indices, statuses)
        return indices

    @classmethod
    def waitsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices, values = _poll_result(lambda: _Request.testsome(requests, statuses), _first_some_done,
                                       _many("waitsome", requests, _where()))
        _done_some(requests, indices, statuses)
        return indices, values

    @classmethod
    def Testsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices = _Request.Testsome(requests, statuses)
        _done_some(requests, indices, statuses)
        return indices

    @classmethod
    def testsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices, values = _Request.testsome(requests, statuses)
        _done_some(requests, indices, statuses)
        return indices, values


Request = TracedRequest  # its name, as mpi4py's (cffi and users read ``MPI.Request.__name__``)
Request.__name__ = Request.__qualname__ = "Request"


def _plain_request(request) -> MPI.Request:
    """Unpickles a copy of mpi4py's own Request class (pickle cannot name that class while
    ``MPI.Request`` is the traced one)."""
    return _Request(request)


def _reduce_plain_request(request):
    reduced = request.__reduce__()
    if isinstance(reduced, tuple) and len(reduced) == 2 and reduced[1][0] is _Request:
        return _plain_request, reduced[1][1:]
    return reduced


copyreg.pickle(_Request, _reduce_plain_request)


def _wait_any(name: str, test_any, requests, status):
    """Poll ``test_any`` (mpi4py's ``Testany`` or ``testany``) until one request completes, and
    record it; returns what the successful test returned. ``_where(3)``: the user's line."""
    status = status if status is not None else MPI.Status()
    found = _poll_result(lambda: test_any(requests, status), _second, _many(name, requests, _where(3)))
    _done_at(requests, found[0], status)
    return found


def _second(value) -> bool:
    return value[1]


def _some_done(indices) -> bool:
    """Testsome's answer: indices of completed requests, or None when none is active."""
    return indices is None or bool(indices)


def _first_some_done(value) -> bool:
    return _some_done(value[0])


def _waiting_on_nothing_known(name: str, where) -> WaitState:
    return wait_state(name, "wait", where)


def _many(name: str, requests, where):
    """Describe a wait on several requests by the first one still pending."""
    def describe() -> WaitState:
        for request in requests:
            if type(request) is TracedRequest and request._what is not None and request:
                state = request._describe(where)
                state["op"] = f"{name} ({state['op']})"
                return state
        return _waiting_on_nothing_known(name, where)
    return describe


def _statuses_for(requests, statuses):
    """The caller's statuses, untouched (mpi4py extends a short list, not a tuple); when the
    caller passes none, statuses of our own while recording, to read each completion from."""
    if statuses is None and _rec.on:
        return [MPI.Status() for _ in requests]
    return statuses


def _done_all(requests, statuses) -> None:
    """Fill in the events of the traced requests of a completed Waitall/Testall."""
    if _rec.on:
        for index, request in enumerate(requests):
            if type(request) is TracedRequest:
                request._done(_status_at(statuses, index))


def _status_at(statuses, index: int):
    return statuses[index] if statuses is not None and index < len(statuses) else _UNKNOWN_STATUS


_UNKNOWN_STATUS = MPI.Status()  # source and tag ANY, count 0: what an ignored status tells


def _done_at(requests, index, status) -> None:
    if _rec.on and index is not None and index >= 0 and type(requests[index]) is TracedRequest:
        requests[index]._done(status if status is not None else _UNKNOWN_STATUS)


def _done_some(requests, indices, statuses) -> None:
    for k, index in enumerate(indices or []):
        _done_at(requests, index, _status_at(statuses, k))


def _log_wait(name: str, start: float, where) -> None:
    end = _now()
    _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))
