"""Traced point-to-point calls: sends, receives, sendrecv and probes, blocking ones polled."""

from __future__ import annotations

from time import perf_counter as _now
from typing import NamedTuple

from mpi4py import MPI

from ...common._events import PROBE, RECV, SEND
from ...common._protocol import WaitKind, WaitState
from . import _objects, _verify
from ._calls import (
    BYTE,
    NAN,
    PlainIntracomm,
    PlainRequest,
    abandoned_if_broken,
    arg,
    call_site,
    describe_wait,
    describer,
    first_item,
    is_not_none,
    named,
    nbytes,
    poll_result,
    receives_into,
    revoked,
    with_status,
)
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

_iprobe = PlainIntracomm.iprobe
_improbe = PlainIntracomm.improbe
_lower_recv = PlainIntracomm.recv

_NONBLOCKING_SEND = {"send": "isend", "ssend": "issend", "bsend": "ibsend", "Send": "Isend",
                     "Ssend": "Issend", "Bsend": "Ibsend", "Rsend": "Irsend"}


def _send(name: str, lowercase: bool, nonblocking: bool):
    base = getattr(PlainIntracomm, name)
    post = base if nonblocking else getattr(PlainIntracomm, _NONBLOCKING_SEND[name])
    if lowercase:  # the uppercase call that sends the pickle's bytes
        post = getattr(PlainIntracomm, _NONBLOCKING_SEND.get(name, name).capitalize())

    def method(self, *args, **kwargs):
        if not nonblocking and revoked(self):  # its polled form may not say ERR_REVOKED
            return base(self, *args, **kwargs)
        rec = _rec
        recording = rec.on
        start = _now()
        dest, tag = arg(args, kwargs, 1, "dest"), arg(args, kwargs, 2, "tag", 0)
        buf = None  # (a buffer call's: for a verified run's notes)
        if lowercase:
            request, size = _post_object(self, post, arg(args, kwargs, 0, "obj"), dest, tag)
        else:
            request = post(self, *args, **kwargs)
            buf = arg(args, kwargs, 0, "buf")
            size = nbytes(buf)
        posted = _now()
        where = call_site()
        if _verify.on and buf is not None:
            _verify.typed(start, SEND, buf)
            if not nonblocking:
                _verify.blocking_send(start, buf)
        if nonblocking:
            event = [name, SEND, self._mpinb_id, dest, tag, size, 0, start, NAN, posted, *where]
            if recording:
                rec.add(event)
            twin = TracedRequest._wrap(request, event, recording)
            if _verify.on and buf is not None:
                _verify.posted_send(twin, buf, start)
            return twin
        if not request.Test():  # most small sends are done at once: nothing more to set up
            _poll_request(request, None, describer(self, name, "send", dest, tag, size, where))
        if recording:
            end = _now()
            rec.add((name, SEND, self._mpinb_id, dest, tag, size, 0, start, end, end, *where))

    return named(method, base)


def _recv(name: str, lowercase: bool):
    base = getattr(PlainIntracomm, name)

    def method(self, *args, **kwargs):
        if revoked(self):  # its polled form may not say ERR_REVOKED
            return base(self, *args, **kwargs)
        rec = _rec
        given_status = arg(args, kwargs, 3, "status")
        status = MPI.Status() if given_status is None else given_status
        source = arg(args, kwargs, 1, "source", MPI.ANY_SOURCE)
        tag = arg(args, kwargs, 2, "tag", MPI.ANY_TAG)
        buf = arg(args, kwargs, 0, "buf")
        receives_into(buf)
        where = call_site()
        describe = (_describe_receive, (self, name, source, tag, buf, where))
        start = _now()
        if lowercase:
            result = _receive_object(self, buf, source, tag, status, describe)
        else:
            request = PlainIntracomm.Irecv(self, buf, source, tag)
            if not request.Test(status):
                _poll_request(request, status, describe, cancel=True)
            result = None
        if _verify.on:
            if not lowercase:
                _verify.typed(start, RECV, buf)
                _verify.blocking_receive(start, buf)
            if source == MPI.ANY_SOURCE:
                _verify.wildcard(start, tag, given_status is not None)
        if rec.on:
            end = _now()
            size = status.Get_count(BYTE)  # for lowercase calls, the pickle's size
            rec.add((name, RECV, self._mpinb_id, status.Get_source(), status.Get_tag(), 0, size,
                     start, end, end, *where))
        return result

    return named(method, base)


def _post_object(comm, post, obj, dest, tag):
    """A lowercase send as mpi4py puts it on the wire: the pickle (mpi4py's serializer, as the
    user configured it) sent as bytes. Returns the request and the pickle's size."""
    data = MPI.pickle.dumps(obj) if dest != MPI.PROC_NULL else b""
    return post(comm, [data, BYTE], dest, tag), len(data)


def _describe_receive(comm, name, source, tag, buf, where) -> WaitState:
    return describe_wait(comm, name, "recv", source, tag, nbytes(buf), where, None)


def _receive_object(comm, buf, source, tag, status, describe):
    """mpi4py's lowercase receive, polled: a matched probe, then the receive of that very message
    (as mpi4py's ``recv`` does); with ``buf``, mpi4py's own deprecated form, which warns."""
    if buf is None:
        message = _improbe(comm, source, tag, status)
        if message is None:
            message = poll_result(lambda: _improbe(comm, source, tag, status), is_not_none, describe)
        if status.Get_count(BYTE) <= _objects.WHOLE_ON_ARRIVAL:
            return message.recv(status)
        request = message.irecv()  # a large pickle may need its sender's progress: poll
        with abandoned_if_broken(request):
            return poll_result(lambda: request.test(status), first_item, describe)[1]
    _poll(lambda: _iprobe(comm, source, tag, status), describe)
    return _lower_recv(comm, buf, status.Get_source(), status.Get_tag(), status)


def _irecv(name: str, lowercase: bool):
    base = getattr(PlainIntracomm, name)

    def method(self, *args, **kwargs):
        rec = _rec
        start = _now()
        request = base(self, *args, **kwargs)
        end = _now()
        source = arg(args, kwargs, 1, "source", MPI.ANY_SOURCE)
        tag = arg(args, kwargs, 2, "tag", MPI.ANY_TAG)
        event = [name, RECV, self._mpinb_id, source, tag, 0, 0, start, NAN, end, *call_site()]
        buf = None if lowercase else arg(args, kwargs, 0, "buf")
        receives_into(buf)
        twin = TracedRequest._wrap(request, event, rec.on)
        if _verify.on and buf is not None:
            _verify.typed(start, RECV, buf)
            _verify.posted_receive(twin, buf, start)
        if rec.on:
            rec.add(event)
        return twin

    return named(method, base)


class _Pair(NamedTuple):
    """One sendrecv call, its arguments read as mpi4py reads them."""

    comm: MPI.Intracomm
    name: str
    args: tuple
    kwargs: dict
    status: MPI.Status
    dest: int
    tag: int
    source: int
    recvtag: int
    where: tuple[str, int]

    def describe(self, kind: WaitKind, size: int):
        peer, tag = (self.dest, self.tag) if kind == "send" else (self.source, self.recvtag)
        return describer(self.comm, self.name, kind, peer, tag, size, self.where)


def _sendrecv(name: str, lowercase: bool, replace: bool):
    base = getattr(PlainIntracomm, name)
    status_at = 5 if replace else 6
    source_at, recvtag_at = (3, 4) if replace else (4, 5)
    exchange = _exchange_objects if lowercase else _exchange_in_place if replace else _exchange_buffers

    def method(self, *args, **kwargs):
        args, kwargs, status = with_status(args, kwargs, status_at)
        call = _Pair(self, name, args, kwargs, status, dest=arg(args, kwargs, 1, "dest"),
                     tag=arg(args, kwargs, 2, "sendtag", 0),
                     source=arg(args, kwargs, source_at, "source", MPI.ANY_SOURCE),
                     recvtag=arg(args, kwargs, recvtag_at, "recvtag", MPI.ANY_TAG), where=call_site())
        if not lowercase and not replace:
            receives_into(arg(args, kwargs, 3, "recvbuf"))
        start = _now()
        result, sent = exchange(call, status_at)
        if _verify.on and not lowercase:
            _verify.typed(start, SEND, arg(args, kwargs, 0, "buf" if replace else "sendbuf"))
            if not replace:  # (a replaced buffer holds what arrived by now)
                _verify.sent(start, arg(args, kwargs, 0, "sendbuf"))
            _verify.typed(start, RECV, arg(args, kwargs, 0, "buf") if replace else arg(args, kwargs, 3, "recvbuf"))
        if _rec.on:
            end, cid, received = _now(), self._mpinb_id, status.Get_count(BYTE)
            # MPICH's Isendrecv_replace leaves a wrong tag in its status; a requested one is exact.
            got_tag = call.recvtag if replace and call.recvtag != MPI.ANY_TAG else status.Get_tag()
            _rec.add((name, SEND, cid, call.dest, call.tag, sent, 0, start, end, end, *call.where))
            _rec.add((name, RECV, cid, status.Get_source(), got_tag, 0, received, start, end, end, *call.where))
        return result

    return named(method, base)


def _exchange_objects(call: _Pair, status_at: int) -> tuple[object, int]:
    """``sendrecv``: the pickle sent as bytes while the receive is polled, as in ``send``/``recv``."""
    sendobj, recvbuf = arg(call.args, call.kwargs, 0, "sendobj"), arg(call.args, call.kwargs, 3, "recvbuf")
    sending, sent = _post_object(call.comm, PlainIntracomm.Isend, sendobj, call.dest, call.tag)
    with abandoned_if_broken(sending):
        result = _receive_object(call.comm, recvbuf, call.source, call.recvtag, call.status,
                                 call.describe("recv", 0))
    _poll_request(sending, None, call.describe("send", sent))
    return result, sent


def _exchange_in_place(call: _Pair, status_at: int) -> tuple[None, int]:
    """``Sendrecv_replace``: its nonblocking form, polled."""
    args = tuple(a for i, a in enumerate(call.args) if i != status_at)
    kwargs = {k: v for k, v in call.kwargs.items() if k != "status"}
    request = PlainIntracomm.Isendrecv_replace(call.comm, *args, **kwargs)
    sent = nbytes(arg(call.args, call.kwargs, 0, "buf"))
    _poll_request(request, call.status, call.describe("recv", sent))
    return None, sent


def _exchange_buffers(call: _Pair, status_at: int) -> tuple[None, int]:
    """``Sendrecv``: a receive and a send posted side by side, whose statuses are exact (MPICH's
    Isendrecv leaves a wrong tag in its status)."""
    sendbuf, recvbuf = arg(call.args, call.kwargs, 0, "sendbuf"), arg(call.args, call.kwargs, 3, "recvbuf")
    receiving = PlainIntracomm.Irecv(call.comm, recvbuf, call.source, call.recvtag)
    sending = PlainIntracomm.Isend(call.comm, sendbuf, call.dest, call.tag)
    sent = nbytes(sendbuf)
    both, statuses = [receiving, sending], [call.status, MPI.Status()]
    with abandoned_if_broken(receiving, cancel=True), abandoned_if_broken(sending):
        _poll(lambda: PlainRequest.Testall(both, statuses), call.describe("recv", sent))
    return None, sent


def _probe(name: str):
    base = getattr(PlainIntracomm, name)
    polled = name in ("probe", "Probe")
    check = getattr(PlainIntracomm, "i" + name if name == "probe" else "Iprobe" if name == "Probe" else name)

    def method(self, *args, **kwargs):
        rec = _rec
        args, kwargs, status = with_status(args, kwargs, 2)
        where = call_site()
        start = _now()
        if polled:
            source = arg(args, kwargs, 0, "source", MPI.ANY_SOURCE)
            tag = arg(args, kwargs, 1, "tag", MPI.ANY_TAG)
            _poll(lambda: check(self, source, tag, status), describer(self, name, "recv", source, tag, 0, where))
            found = True
        else:
            found = base(self, *args, **kwargs)
        if rec.on:
            end = _now()
            peer, tag = (status.Get_source(), status.Get_tag()) if found else (-1, -1)
            rec.add((name, PROBE, self._mpinb_id, peer, tag, 0, 0, start, end, end, *where))
        return found

    return named(method, base)


P2P = {
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
