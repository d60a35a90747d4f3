"""Communicators and requests that record every MPI call user code makes through mpi4py.

``TracedIntracomm`` is a subclass of ``MPI.Intracomm`` sharing the world's handle, installed as
``MPI.COMM_WORLD``: user code needs no change and ``isinstance`` checks hold. Each method calls
mpi4py's own with the user's arguments untouched (so results and exceptions are mpi4py's), and
only when the recorder is on does it time the call and note peer, tag, bytes and source line.
Communicators derived from a traced one (``Dup``, ``Split``, ``Create_cart``...) are traced too.

Blocking calls are carried out as their nonblocking forms, polled (see ``_waiting``), so that the
notebook can interrupt them and learn what each rank waits for. Lowercase collectives, which have
no nonblocking form, first agree on which collective everyone is in (a polled ``Iallgather`` on
the communicator's private shadow), so that mismatched collectives raise instead of hanging.
"""

from __future__ import annotations

import sys
from time import perf_counter as _now

from mpi4py import MPI

from array import array

from .._events import CART_DERIVING_CALLS, COLLECTIVE, DERIVING_CALLS, PROBE, RECV, SEND, WAIT
from ._recorder import RECORDER as _rec
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

_Intracomm = MPI.Intracomm
_Request = MPI.Request  # mpi4py's own class; MPI.Request is replaced by TracedRequest
_iprobe = _Intracomm.iprobe
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
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


def _peer_world(comm, peer) -> int:
    members = _rec.comms.get(comm._mpinb_id)
    if members is not None and isinstance(peer, int) and 0 <= peer < len(members):
        return members[peer]
    return peer if isinstance(peer, int) else -1


def _describer(comm, op: str, kind: str, peer, tag, size: int, where: tuple[str, int], root=None):
    """What a wait is for, built only if the wait lasts (``_waiting`` calls it after spinning)."""
    return _describe, (comm, op, kind, peer, tag, size, where, root)


def _describe(comm, op, kind, peer, tag, size, where, root) -> dict:
    return {"op": op, "kind": kind, "comm": comm._mpinb_id, "members": _rec.comms.get(comm._mpinb_id),
            "peer": _peer_world(comm, peer) if peer is not None else None,
            "any_source": peer == MPI.ANY_SOURCE, "tag": tag, "bytes": size,
            "root": _peer_world(comm, root) if root is not None and root >= 0 else None,
            "file": where[0], "line": where[1]}


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

    def method(self, *args, **kwargs):
        rec = _rec
        recording = rec.on
        before = rec.pickled_out
        start = _now()
        request = post(self, *args, **kwargs)
        posted = _now()
        size = rec.pickled_out - before if lowercase else _nbytes(_arg(args, kwargs, 0, "buf"))
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "tag", 0)
        where = _where()
        if nonblocking:
            event = [name, SEND, self._mpinb_id, dest, tag, size, 0, start, _NAN, posted, *where]
            if recording:
                rec.add(event)
            return TracedRequest._wrap(request, event, False, recording)
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
        describe = _describer(self, name, "recv", source, tag, _nbytes(buf), where)
        before = rec.pickled_in
        start = _now()
        if lowercase and buf is None:
            # Wait until a matching message is there, then receive it: with one thread per rank
            # the first message that matches is the one the probe saw.
            _poll(lambda: _iprobe(self, source, tag, status), describe)
            result = _lower_recv(self, None, source, tag, status)
        elif lowercase:
            request = _Intracomm.irecv(self, buf, source, tag)
            box = []
            _poll(lambda: box.append(request.test(status)) or box[-1][0], describe)
            result = box[-1][1]
        else:
            request = _Intracomm.Irecv(self, buf, source, tag)
            _poll_request(request, status, describe)
            result = None
        if rec.on:
            end = _now()
            size = rec.pickled_in - before if lowercase else status.Get_count(_BYTE)
            rec.add((name, RECV, self._mpinb_id, status.Get_source(), status.Get_tag(), 0, size,
                     start, end, end, *where))
        return result

    return _named(method, base)


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
        return TracedRequest._wrap(request, event, lowercase, rec.on)

    return _named(method, base)


def _sendrecv(name: str, lowercase: bool, replace: bool):
    base = getattr(_Intracomm, name)
    status_at = 5 if replace else 6
    source_at, recvtag_at = (3, 4) if replace else (4, 5)
    post = getattr(_Intracomm, "Isendrecv_replace") if replace else None

    def method(self, *args, **kwargs):
        rec = _rec
        args, kwargs, status = _with_status(args, kwargs, status_at)
        dest, tag = _arg(args, kwargs, 1, "dest"), _arg(args, kwargs, 2, "sendtag", 0)
        source = _arg(args, kwargs, source_at, "source", MPI.ANY_SOURCE)
        recvtag = _arg(args, kwargs, recvtag_at, "recvtag", MPI.ANY_TAG)
        where = _where()
        out, into = rec.pickled_out, rec.pickled_in
        start = _now()
        if lowercase:
            sendobj, recvbuf = _arg(args, kwargs, 0, "sendobj"), _arg(args, kwargs, 3, "recvbuf")
            sending = _Intracomm.isend(self, sendobj, dest, tag)
            sent = rec.pickled_out - out
            describe = _describer(self, name, "recv", source, recvtag, 0, where)
            if recvbuf is None:
                found = []
                _poll(lambda: found.append(_Intracomm.improbe(self, source, recvtag, status))
                      or found[-1] is not None, describe)
                result = found[-1].recv(status)
            else:
                request, box = _Intracomm.irecv(self, recvbuf, source, recvtag), []
                _poll(lambda: box.append(request.test(status)) or box[-1][0], describe)
                result = box[-1][1]
            _poll_request(sending, None, _describer(self, name, "send", dest, tag, sent, where))
            received = rec.pickled_in - into
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

def _agree(comm, name: str, root: int, where) -> None:
    """Every member says which collective it is in; a mismatch raises on all of them."""
    code = _LOWER_COLLECTIVES.index(name)
    size = comm.Get_size()
    mine, everyone = array("i", [code, root]), array("i", [0] * (2 * size))
    request = comm._mpinb_shadow.Iallgather(mine, everyone)
    _poll_request(request, None, _describer(comm, name, "collective", None, -1, 0, where, root))
    calls = {(everyone[2 * r], everyone[2 * r + 1]) for r in range(size)}
    if len(calls) > 1:
        names = dict(enumerate(_LOWER_COLLECTIVES))
        groups: dict[str, list[int]] = {}
        members = _rec.comms.get(comm._mpinb_id) or list(range(size))
        for r in range(size):
            op, op_root = everyone[2 * r], everyone[2 * r + 1]
            label = names.get(op, "?") + (f" (root {op_root})" if op_root >= 0 else "")
            groups.setdefault(label, []).append(members[r])
        said = "; ".join(f"{_ranks_text(ranks)} called {label}" for label, ranks in groups.items())
        raise RuntimeError(
            f"mismatched collectives on communicator {comm._mpinb_id!r}: {said}. Every rank of a "
            "communicator must call the same collectives, with the same root, in the same order."
        )


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _collective(name: str, root_at: int | None, lowercase: bool, nonblocking: bool):
    base = getattr(_Intracomm, name)
    bcast = name.lower().lstrip("i") == "bcast"
    polled = None if lowercase or nonblocking else getattr(_Intracomm, "I" + name[0].lower() + name[1:])

    def method(self, *args, **kwargs):
        rec = _rec
        root = -1 if root_at is None else _arg(args, kwargs, root_at, "root", 0)
        where = _where()
        out, into = rec.pickled_out, rec.pickled_in
        start = _now()
        if lowercase:
            _agree(self, name, root, where)
            result = base(self, *args, **kwargs)
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
        if lowercase:
            sent, received = rec.pickled_out - out, rec.pickled_in - into
        elif bcast:
            size = _nbytes(_arg(args, kwargs, 0, "buf"))
            sent, received = (size, 0) if self.Get_rank() == root else (0, size)
        else:
            sent = _nbytes(_arg(args, kwargs, 0, "sendbuf"))
            received = _nbytes(_arg(args, kwargs, 1, "recvbuf"))
        if nonblocking:
            event = [name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, _NAN, end, *where]
            if recording:
                rec.add(event)
            return TracedRequest._wrap(result, event, False, recording)
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
    twin._mpinb_shadow = _Intracomm.Dup(comm)  # for mpinb's own agreement traffic
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
_LOWER_COLLECTIVES = tuple(_ROOTS_LOWER)  # the same codes on every rank
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
_CONSTRUCTORS = {n: _derived(n) for n in DERIVING_CALLS}

TracedIntracomm = type("TracedIntracomm", (_Intracomm,), {
    **_P2P, **_COLLECTIVES, **_CONSTRUCTORS,
    "__doc__": "An ``MPI.Intracomm`` that records the MPI calls made through it.",
    "__module__": __name__,
})
TracedCartcomm = type("TracedCartcomm", (MPI.Cartcomm,), {
    **_P2P, **_COLLECTIVES, **{n: _derived(n) for n in CART_DERIVING_CALLS},
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
    holds the buffers of lowercase calls); waits are polled, so they can be interrupted, and
    completing a recorded request fills in its event (for a receive: actual source, tag, size)."""

    @classmethod
    def _wrap(cls, request, event, lowercase: bool, recorded: bool = True) -> TracedRequest:
        twin = cls(request)
        twin._orig = request
        twin._what = event            # what the request is, for the status channel
        twin._event = event if recorded else None
        twin._lowercase = lowercase
        return twin

    def _describe(self, where) -> dict:
        op, kind, comm, peer, tag = self._what[:5]
        members = _rec.comms.get(comm)
        world_peer = members[peer] if members and isinstance(peer, int) and 0 <= peer < len(members) else peer
        return {"op": op, "kind": ("send", "recv", "collective")[min(kind, 2)], "comm": comm,
                "members": members, "peer": world_peer if kind != COLLECTIVE else None,
                "any_source": peer == MPI.ANY_SOURCE and kind == RECV, "tag": tag, "bytes": self._what[5],
                "root": None, "file": where[0], "line": where[1], "via": "wait"}

    def _done(self, status, received: int | None = None) -> None:
        event = self._event
        if event is None:
            return
        self._event = None
        event[8] = _now()
        if event[1] == RECV:
            event[3], event[4] = status.Get_source(), status.Get_tag()
            event[6] = received if received is not None else status.Get_count(_BYTE)

    # single request
    def Wait(self, status=None):
        status = status if status is not None else MPI.Status()
        start, where = _now(), _where()
        _poll_request(self._orig, status, lambda: self._describe(where))
        self._finished("Wait", start, status, None, where)
        return True

    def wait(self, status=None):
        status = status if status is not None else MPI.Status()
        start, where, before = _now(), _where(), _rec.pickled_in
        box = []
        _poll(lambda: box.append(self._orig.test(status)) or box[-1][0], lambda: self._describe(where))
        self._finished("wait", start, status, _rec.pickled_in - before if self._lowercase else None, where)
        return box[-1][1]

    def _finished(self, name: str, start: float, status, received, where) -> None:
        if _rec.on and self._event is not None:
            self._done(status, received)
            end = _now()
            _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))

    def Test(self, status=None):
        status = status if status is not None else MPI.Status()
        flag = self._orig.Test(status)
        if flag and _rec.on:
            self._done(status)
        return flag

    def test(self, status=None):
        status = status if status is not None else MPI.Status()
        before = _rec.pickled_in
        flag, value = self._orig.test(status)
        if flag and _rec.on:
            self._done(status, _rec.pickled_in - before if self._lowercase else None)
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

    # many requests: polled through the originals
    @classmethod
    def Waitall(cls, requests, statuses=None):
        start, where = _now(), _where()
        statuses = _statuses_for(requests, statuses)
        originals = _originals(requests)
        _poll(lambda: _Request.Testall(originals, statuses), _many("Waitall", requests, where))
        _done_all(requests, statuses)
        if _rec.on:
            _log_wait("Waitall", start, where)
        return True

    @classmethod
    def waitall(cls, requests, statuses=None):
        start, where = _now(), _where()
        values = []
        for i, request in enumerate(requests):
            status = statuses[i] if statuses is not None and i < len(statuses) else MPI.Status()
            if type(request) is TracedRequest:
                values.append(request.wait(status))
            else:
                box = []
                _poll(lambda: box.append(request.test(status)) or box[-1][0], _many("waitall", requests, where))
                values.append(box[-1][1])
        if _rec.on:
            _log_wait("waitall", start, where)
        return values

    @classmethod
    def Testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag = _Request.Testall(_originals(requests), statuses)
        if flag:
            _done_all(requests, statuses)
        return flag

    @classmethod
    def testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag, values = _Request.testall(_originals(requests), statuses)
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
        originals, box = _originals(requests), []
        _poll(lambda: box.append(_Request.Testsome(originals, statuses)) or bool(box[-1]) or box[-1] is None,
              _many("Waitsome", requests, _where()))
        indices = box[-1]
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


def _wait_any(name: str, test_any, requests, status):
    """Poll ``test_any`` (mpi4py's ``Testany`` or ``testany``) until one request completes, and
    record it; returns what the successful test returned. ``_where(3)``: the user's line."""
    status = status if status is not None else MPI.Status()
    originals, box = _originals(requests), []
    _poll(lambda: box.append(test_any(originals, status)) or box[-1][1], _many(name, requests, _where(3)))
    _done_at(requests, box[-1][0], status)
    return box[-1]


def _many(name: str, requests, where):
    """Describe a wait on several requests by the first one still pending."""
    def describe() -> dict:
        for request in requests:
            if type(request) is TracedRequest and request._orig:
                state = request._describe(where)
                state["op"] = f"{name} ({state['op']})"
                return state
        return {"op": name, "kind": "wait", "comm": None, "members": None, "peer": None, "any_source": False,
                "tag": -1, "bytes": 0, "root": None, "file": where[0], "line": where[1]}
    return describe


def _statuses_for(requests, statuses) -> list:
    """The caller's statuses, topped up so that every request's completion can be read."""
    statuses = statuses if statuses is not None else []
    while len(statuses) < len(requests):
        statuses.append(MPI.Status())
    return statuses


def _done_all(requests, statuses) -> None:
    """Fill in the events of the traced requests of a completed Waitall/Testall."""
    if _rec.on:
        for request, status in zip(requests, statuses):
            if type(request) is TracedRequest:
                request._done(status)


def _done_at(requests, index, status) -> None:
    if _rec.on and index is not None and index >= 0 and type(requests[index]) is TracedRequest:
        requests[index]._done(status)


def _log_wait(name: str, start: float, where) -> None:
    end = _now()
    _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))
