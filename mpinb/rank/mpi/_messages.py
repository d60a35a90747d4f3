"""Matched probes and the receive of the message they matched.

The probes are ``mprobe``/``Mprobe`` (polled ``improbe``, so a probe for a message that never
comes is diagnosed and interruptible) and ``improbe``/``Improbe``. The receive (``Message.recv``,
``Recv``, ``irecv``, ``Irecv``) is recorded as a receive from the message's sender at the moment
the probe matched it (MPI matched it then, not at the receive).
"""

from __future__ import annotations

from time import perf_counter as _now

from mpi4py import MPI

from ...common._events import PROBE, RECV
from ._calls import (
    BYTE,
    NAN,
    StandIn,
    abandoned_if_broken,
    arg,
    call_site,
    describer,
    first_item,
    is_not_none,
    named,
    pickle_plain_copies,
    poll_result,
    receives_into,
    with_status,
)
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._waiting import wait_request as _poll_request

PlainMessage = MPI.Message  # mpi4py's own class; MPI.Message is replaced by TracedMessage while tracing



def _probe_of(name: str, comms: str) -> classmethod:
    """``MPI.Message.<name>(comm, ...)``: a traced communicator's ``<comms>`` (recorded, polled),
    mpi4py's own on any other."""
    plain = getattr(PlainMessage, name)

    def probe(cls, comm, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG, status=None):
        if hasattr(comm, "_mpinb_shadow"):
            return getattr(comm, comms)(source, tag, status)
        return plain(comm, source, tag, status)

    probe.__name__, probe.__qualname__, probe.__doc__ = name, f"Message.{name}", plain.__doc__
    return classmethod(probe)


class TracedMessage(PlainMessage, metaclass=StandIn):
    """``MPI.Message`` while tracing is on: a message a traced probe matched, whose receive is
    recorded (and polled: a large message's data may still need its sender's progress)."""

    _mpinb_stands_in = True
    _mpinb_plain = PlainMessage
    _matched: tuple | None = None  # (comm twin, source, tag, bytes, when the probe matched it)

    probe = _probe_of("probe", "mprobe")
    iprobe = _probe_of("iprobe", "improbe")
    Probe = _probe_of("Probe", "Mprobe")
    Iprobe = _probe_of("Iprobe", "Improbe")

    # (each may be called unbound with a plain message: ``MPI.Message.Recv(m, buf)``, as pkl5 does)
    def recv(self, status=None):
        if _matched(self) is None:
            return PlainMessage.recv(self, status)
        mine = status if status is not None else MPI.Status()
        request = PlainMessage.irecv(self)
        with abandoned_if_broken(request):
            value = poll_result(lambda: request.test(mine), first_item, self._describe())[1]
        self._received("recv")
        return value

    def Recv(self, buf, status=None):
        if _matched(self) is None:
            return PlainMessage.Recv(self, buf, status)
        receives_into(buf)
        request = PlainMessage.Irecv(self, buf)
        _poll_request(request, status, self._describe(), cancel=False)
        self._received("Recv")
        return None

    def irecv(self):
        return self._nonblocking("irecv", PlainMessage.irecv(self)) if _matched(self) else PlainMessage.irecv(self)

    def Irecv(self, buf):
        if _matched(self) is None:
            return PlainMessage.Irecv(self, buf)
        receives_into(buf)
        return self._nonblocking("Irecv", PlainMessage.Irecv(self, buf))

    def _describe(self):
        comm, source, tag, size, _ = self._matched  # type: ignore[misc]
        return describer(comm, "Message.recv", "recv", source, tag, size, call_site(3))

    def _received(self, name: str) -> None:
        if _rec.on and self._matched is not None:
            comm, source, tag, size, matched = self._matched
            end = _now()
            _rec.add((f"Message.{name}", RECV, comm._mpinb_id, source, tag, 0, size, matched, end, end,
                      *call_site(3)))
        self._matched = None

    def _nonblocking(self, name: str, request) -> TracedRequest:
        comm, source, tag, size, matched = self._matched  # type: ignore[misc]
        self._matched = None
        event = [f"Message.{name}", RECV, comm._mpinb_id, source, tag, 0, size, matched, NAN, _now(), *call_site(3)]
        if _rec.on:
            _rec.add(event)
        return TracedRequest._wrap(request, event, _rec.on)


def _matched(message) -> tuple | None:
    return getattr(message, "_matched", None)


pickle_plain_copies(PlainMessage)


def _matched_probe(name: str):
    base = getattr(MPI.Intracomm, name)
    check = getattr(MPI.Intracomm, "i" + name if name == "mprobe" else "Improbe" if name == "Mprobe" else name)
    polled = name in ("mprobe", "Mprobe")

    def method(self, *args, **kwargs):
        args, kwargs, status = with_status(args, kwargs, 2)
        where = call_site()
        start = _now()
        source = arg(args, kwargs, 0, "source", MPI.ANY_SOURCE)
        tag = arg(args, kwargs, 1, "tag", MPI.ANY_TAG)
        if polled:
            message = poll_result(lambda: check(self, source, tag, status), is_not_none,
                                  describer(self, name, "recv", source, tag, 0, where))
        else:
            message = base(self, *args, **kwargs)
        end = _now()
        if message is None:
            if _rec.on:
                _rec.add((name, PROBE, self._mpinb_id, -1, -1, 0, 0, start, end, end, *where))
            return None
        if message == MPI.MESSAGE_NO_PROC:
            return message
        found = (status.Get_source(), status.Get_tag())
        if _rec.on:
            _rec.add((name, PROBE, self._mpinb_id, *found, 0, 0, start, end, end, *where))
        twin = TracedMessage(message)
        twin._matched = (self, *found, status.Get_count(BYTE), end)
        return twin

    return named(method, base)


MATCHED_PROBES = {name: _matched_probe(name) for name in ("mprobe", "Mprobe", "improbe", "Improbe")}

Message = TracedMessage  # its name, as mpi4py's (users read ``MPI.Message.__name__``)
Message.__name__ = Message.__qualname__ = "Message"
