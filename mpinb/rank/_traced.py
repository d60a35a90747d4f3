"""Communicators and requests that record every MPI call user code makes through mpi4py.

``TracedIntracomm`` is a subclass of ``MPI.Intracomm`` sharing the world's handle, installed as
``MPI.COMM_WORLD``: user code needs no change and ``isinstance`` checks hold. Each method calls
mpi4py's own with the user's arguments untouched (so results and exceptions are mpi4py's), and
only when the recorder is on does it time the call and note peer, tag, bytes and source line.
Communicators derived from a traced one (``Dup``, ``Split``, ``Create_cart``...) are traced too.
"""

from __future__ import annotations

import sys
from time import perf_counter as _now

from mpi4py import MPI

from .._events import COLLECTIVE, PROBE, RECV, SEND, WAIT
from ._recorder import RECORDER as _rec

_Intracomm = MPI.Intracomm
_Request = MPI.Request  # mpi4py's own class; MPI.Request is replaced by TracedRequest
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


def _named(method, base):
    method.__name__ = base.__name__
    method.__qualname__ = f"TracedIntracomm.{base.__name__}"
    method.__doc__ = base.__doc__
    return method


# -- point to point ----------------------------------------------------------------------------

def _send(name: str, lowercase: bool, nonblocking: bool):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        before = rec.pickled_out
        start = _now()
        result = base(self, *args, **kwargs)
        end = _now()
        size = rec.pickled_out - before if lowercase else _nbytes(_arg(args, kwargs, 0, "buf"))
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "tag", 0)
        frame = sys._getframe(1)
        where = frame.f_code.co_filename, frame.f_lineno
        if nonblocking:
            event = [name, SEND, self._mpinb_id, dest, tag, size, 0, start, _NAN, end, *where]
            rec.add(event)
            return TracedRequest._wrap(result, event, False)
        rec.add((name, SEND, self._mpinb_id, dest, tag, size, 0, start, end, end, *where))
        return result

    return _named(method, base)


def _recv(name: str, lowercase: bool):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        args, kwargs, status = _with_status(args, kwargs, 3)
        before = rec.pickled_in
        start = _now()
        result = base(self, *args, **kwargs)
        end = _now()
        size = rec.pickled_in - before if lowercase else status.Get_count(_BYTE)
        frame = sys._getframe(1)
        rec.add((name, RECV, self._mpinb_id, status.Get_source(), status.Get_tag(), 0, size,
                 start, end, end, frame.f_code.co_filename, frame.f_lineno))
        return result

    return _named(method, base)


def _irecv(name: str, lowercase: bool):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        start = _now()
        request = base(self, *args, **kwargs)
        end = _now()
        source = _arg(args, kwargs, 1, "source", MPI.ANY_SOURCE)
        tag = _arg(args, kwargs, 2, "tag", MPI.ANY_TAG)
        frame = sys._getframe(1)
        event = [name, RECV, self._mpinb_id, source, tag, 0, 0, start, _NAN, end,
                 frame.f_code.co_filename, frame.f_lineno]
        rec.add(event)
        return TracedRequest._wrap(request, event, lowercase)

    return _named(method, base)


def _sendrecv(name: str, lowercase: bool, replace: bool):
    base = getattr(_Intracomm, name)
    status_at = 5 if replace else 6
    source_at, recvtag_at = (3, 4) if replace else (4, 5)

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        args, kwargs, status = _with_status(args, kwargs, status_at)
        out, into = rec.pickled_out, rec.pickled_in
        start = _now()
        result = base(self, *args, **kwargs)
        end = _now()
        if lowercase:
            sent, received = rec.pickled_out - out, rec.pickled_in - into
        else:
            sent = _nbytes(_arg(args, kwargs, 0, "buf" if replace else "sendbuf"))
            received = status.Get_count(_BYTE)
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "sendtag", 0)
        frame = sys._getframe(1)
        where = frame.f_code.co_filename, frame.f_lineno
        cid = self._mpinb_id
        rec.add((name, SEND, cid, dest, tag, sent, 0, start, end, end, *where))
        rec.add((name, RECV, cid, status.Get_source(), status.Get_tag(), 0, received, start, end, end, *where))
        return result

    return _named(method, base)


def _probe(name: str):
    base = getattr(_Intracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        args, kwargs, status = _with_status(args, kwargs, 2)
        start = _now()
        found = base(self, *args, **kwargs)
        end = _now()
        peer, tag = (status.Get_source(), status.Get_tag()) if found else (-1, -1)
        frame = sys._getframe(1)
        rec.add((name, PROBE, self._mpinb_id, peer, tag, 0, 0, start, end, end,
                 frame.f_code.co_filename, frame.f_lineno))
        return found

    return _named(method, base)


# -- collectives -------------------------------------------------------------------------------

def _collective(name: str, root_at: int | None, lowercase: bool, nonblocking: bool):
    base = getattr(_Intracomm, name)
    bcast = name.lower().lstrip("i") == "bcast"

    def method(self, *args, **kwargs):
        rec = _rec
        if not rec.on:
            return base(self, *args, **kwargs)
        out, into = rec.pickled_out, rec.pickled_in
        start = _now()
        result = base(self, *args, **kwargs)
        end = _now()
        root = -1 if root_at is None else _arg(args, kwargs, root_at, "root", 0)
        if lowercase:
            sent, received = rec.pickled_out - out, rec.pickled_in - into
        elif bcast:
            size = _nbytes(_arg(args, kwargs, 0, "buf"))
            sent, received = (size, 0) if self.Get_rank() == root else (0, size)
        else:
            sent = _nbytes(_arg(args, kwargs, 0, "sendbuf"))
            received = _nbytes(_arg(args, kwargs, 1, "recvbuf"))
        frame = sys._getframe(1)
        where = frame.f_code.co_filename, frame.f_lineno
        if nonblocking:
            event = [name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, _NAN, end, *where]
            rec.add(event)
            return TracedRequest._wrap(result, event, False)
        rec.add((name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, end, end, *where))
        return result

    return _named(method, base)


# -- communicators -----------------------------------------------------------------------------

_WORLD_GROUP = MPI.COMM_WORLD.Get_group()


def _world_ranks(comm) -> list[int]:
    group = comm.Get_group()
    try:
        return list(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), _WORLD_GROUP))
    finally:
        group.Free()


def _derived(name: str):
    base = getattr(_Intracomm, name) if hasattr(_Intracomm, name) else getattr(MPI.Cartcomm, name)

    def method(self, *args, **kwargs):
        new = base(self, *args, **kwargs)
        # Every member calls a constructor in the same order, so the k-th child of a parent is
        # the same communicator everywhere; its rank 0's world rank tells apart Split colours.
        self._mpinb_children += 1
        if new == MPI.COMM_NULL:
            return new
        members = _world_ranks(new)
        cid = f"{self._mpinb_id}.{self._mpinb_children - 1}@{members[0]}"
        return traced(new, cid, members)

    return _named(method, base)


def traced(comm, cid: str, members: list[int] | None = None):
    """The traced twin of ``comm`` (sharing its handle), registered under id ``cid``."""
    if isinstance(comm, MPI.Cartcomm):
        twin = comm if isinstance(comm, TracedCartcomm) else TracedCartcomm(comm)
    elif isinstance(comm, _Intracomm):
        twin = comm if isinstance(comm, TracedIntracomm) else TracedIntracomm(comm)
    else:
        return comm  # intercommunicators and graph topologies are not traced
    twin._mpinb_id = cid
    twin._mpinb_children = 0
    twin._mpinb_plain = comm  # keep mpi4py's object alive alongside the twin
    _rec.comms[cid] = members if members is not None else _world_ranks(comm)
    return twin


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
_CONSTRUCTORS = {n: _derived(n) for n in ("Dup", "Clone", "Split", "Split_type", "Create",
                                          "Create_group", "Create_cart")}

TracedIntracomm = type("TracedIntracomm", (_Intracomm,), {
    **_P2P, **_COLLECTIVES, **_CONSTRUCTORS,
    "__doc__": "An ``MPI.Intracomm`` that records the MPI calls made through it.",
    "__module__": __name__,
})
TracedCartcomm = type("TracedCartcomm", (MPI.Cartcomm,), {
    **_P2P, **_COLLECTIVES, **_CONSTRUCTORS, "Sub": _derived("Sub"),
    "__doc__": "An ``MPI.Cartcomm`` that records the MPI calls made through it.",
    "__module__": __name__,
})


# -- requests ----------------------------------------------------------------------------------

class _RequestMeta(type):
    """``isinstance(r, MPI.Request)`` stays true for every request once MPI.Request is ours."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _Request) if cls is TracedRequest else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _Request) if cls is TracedRequest else type.__subclasscheck__(cls, sub)


def _originals(requests) -> list:
    return [r._orig if type(r) is TracedRequest else r for r in requests]


class TracedRequest(_Request, metaclass=_RequestMeta):
    """A request of a traced call. Every operation goes to mpi4py's own request object (which
    holds the buffers of lowercase calls); completing it fills in the event's end, and for a
    receive the actual source, tag and size."""

    @classmethod
    def _wrap(cls, request, event, lowercase: bool) -> TracedRequest:
        twin = cls(request)
        twin._orig = request
        twin._event = event
        twin._lowercase = lowercase
        return twin

    def _done(self, status, received: int | None = None) -> None:
        event = self._event
        if event is None:
            return
        self._event = None
        event[8] = _now()
        if event[1] == RECV:
            event[3], event[4] = status.Get_source(), status.Get_tag()
            event[6] = received if received is not None else status.Get_count(_BYTE)

    def _waiting(self, name: str, start: float) -> None:
        frame = sys._getframe(2)
        _rec.add((name, WAIT, "", -1, -1, 0, 0, start, _now(), _now(),
                  frame.f_code.co_filename, frame.f_lineno))

    # single request
    def Wait(self, status=None):
        if not _rec.on or self._event is None:
            return self._orig.Wait(status)
        status = status if status is not None else MPI.Status()
        start = _now()
        result = self._orig.Wait(status)
        self._done(status)
        self._waiting("Wait", start)
        return result

    def wait(self, status=None):
        if not _rec.on or self._event is None:
            return self._orig.wait(status)
        status = status if status is not None else MPI.Status()
        before, start = _rec.pickled_in, _now()
        result = self._orig.wait(status)
        self._done(status, _rec.pickled_in - before if self._lowercase else None)
        self._waiting("wait", start)
        return result

    def Test(self, status=None):
        if not _rec.on or self._event is None:
            return self._orig.Test(status)
        status = status if status is not None else MPI.Status()
        start = _now()
        flag = self._orig.Test(status)
        if flag:
            self._done(status)
            self._waiting("Test", start)
        return flag

    def test(self, status=None):
        if not _rec.on or self._event is None:
            return self._orig.test(status)
        status = status if status is not None else MPI.Status()
        before, start = _rec.pickled_in, _now()
        flag, value = self._orig.test(status)
        if flag:
            self._done(status, _rec.pickled_in - before if self._lowercase else None)
            self._waiting("test", start)
        return flag, value

    def Get_status(self, status=None):
        return self._orig.Get_status(status)

    def get_status(self, status=None):
        return self._orig.get_status(status)

    def Cancel(self):
        return self._orig.Cancel()

    def Free(self):
        return self._orig.Free()

    def __bool__(self) -> bool:
        return bool(self._orig)

    def __eq__(self, other) -> bool:
        return self._orig == (other._orig if type(other) is TracedRequest else other)

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._orig)

    # many requests: completed one by one through the originals, which keeps the per-request
    # status and size exact and is equivalent (MPI progresses every request during each wait)
    @classmethod
    def Waitall(cls, requests, statuses=None):
        if not _rec.on:
            return _Request.Waitall(_originals(requests), statuses)
        start = _now()
        statuses = statuses if statuses is not None else [MPI.Status() for _ in requests]
        while len(statuses) < len(requests):
            statuses.append(MPI.Status())
        result = _Request.Waitall(_originals(requests), statuses)
        for request, status in zip(requests, statuses):
            if type(request) is TracedRequest:
                request._done(status)
        _log_wait("Waitall", start)
        return result

    @classmethod
    def waitall(cls, requests, statuses=None):
        if not _rec.on:
            return _Request.waitall(_originals(requests), statuses)
        start = _now()
        values = []
        for i, request in enumerate(requests):
            status = statuses[i] if statuses is not None and i < len(statuses) else MPI.Status()
            if type(request) is TracedRequest:
                before = _rec.pickled_in
                values.append(request._orig.wait(status))
                request._done(status, _rec.pickled_in - before if request._lowercase else None)
            else:
                values.append(request.wait(status))
        _log_wait("waitall", start)
        return values

    @classmethod
    def Testall(cls, requests, statuses=None):
        flag = _Request.Testall(_originals(requests), statuses)
        if flag and _rec.on:
            for request in requests:
                if type(request) is TracedRequest:
                    request._done(MPI.Status())
        return flag

    @classmethod
    def testall(cls, requests, statuses=None):
        flag, values = _Request.testall(_originals(requests), statuses)
        if flag and _rec.on:
            for request in requests:
                if type(request) is TracedRequest:
                    request._done(MPI.Status())
        return flag, values

    @classmethod
    def Waitany(cls, requests, status=None):
        status = status if status is not None else MPI.Status()
        index = _Request.Waitany(_originals(requests), status)
        _done_at(requests, index, status)
        return index

    @classmethod
    def waitany(cls, requests, status=None):
        status = status if status is not None else MPI.Status()
        index, value = _Request.waitany(_originals(requests), status)
        _done_at(requests, index, status)
        return index, value

    @classmethod
    def Testany(cls, requests, status=None):
        status = status if status is not None else MPI.Status()
        index, flag = _Request.Testany(_originals(requests), status)
        if flag:
            _done_at(requests, index, status)
        return index, flag

    @classmethod
    def testany(cls, requests, status=None):
        status = status if status is not None else MPI.Status()
        index, flag, value = _Request.testany(_originals(requests), status)
        if flag:
            _done_at(requests, index, status)
        return index, flag, value

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        statuses = statuses if statuses is not None else [MPI.Status() for _ in requests]
        indices = _Request.Waitsome(_originals(requests), statuses)
        for k, index in enumerate(indices or []):
            _done_at(requests, index, statuses[k])
        return indices

    @classmethod
    def Testsome(cls, requests, statuses=None):
        statuses = statuses if statuses is not None else [MPI.Status() for _ in requests]
        indices = _Request.Testsome(_originals(requests), statuses)
        for k, index in enumerate(indices or []):
            _done_at(requests, index, statuses[k])
        return indices


def _done_at(requests, index, status) -> None:
    if _rec.on and index is not None and index >= 0 and type(requests[index]) is TracedRequest:
        requests[index]._done(status)


def _log_wait(name: str, start: float) -> None:
    frame = sys._getframe(2)
    end = _now()
    _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, frame.f_code.co_filename, frame.f_lineno))
