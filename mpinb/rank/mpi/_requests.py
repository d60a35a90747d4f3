"""``TracedRequest``: ``MPI.Request`` while tracing is on.

Waits are polled (interruptible, and described on the status channel); a completion fills in the
event of the call that made it."""

from __future__ import annotations

from time import perf_counter as _now

from mpi4py import MPI

from ...common._events import COLLECTIVE, RECV, WAIT, world_rank
from ...common._protocol import WaitState, wait_state
from ._calls import (
    BYTE,
    PlainRequest,
    StandIn,
    call_site,
    converter,
    first_item,
    pickle_plain_copies,
    poll_result,
)
from ._recorder import RECORDER as _rec
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request


def _traced(request) -> bool:
    """Whether ``request`` carries an event to complete. ``MPI.Request.Test(r)`` and the like also
    reach the methods below with plain requests (of untraced calls: intercommunicators...)."""
    return getattr(request, "_event", None) is not None


class TracedRequest(PlainRequest, metaclass=StandIn):
    """``MPI.Request`` while tracing is on: mpi4py's request, whose waits are polled (so they can
    be interrupted), and whose completion fills in its call's event (for a receive: the actual
    source, tag and size). A traced call's request takes over mpi4py's (its handle and the
    buffers mpi4py keeps for it); one that user code makes (``MPI.Request(r)``) is a plain copy."""

    _mpinb_stands_in = True
    _what: list | None = None   # the call that made it, for the status channel
    _event: list | None = None  # its event, until completion fills it in
    _mpinb_plain = PlainRequest
    fromhandle, f2py, fromint = converter("fromhandle"), converter("f2py"), converter("fromint")

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
        what = getattr(self, "_what", None)  # a plain request (an untraced call's) has none
        if what is None:
            return _waiting_on_nothing_known("Wait", where)
        op, kind, comm, peer, tag = what[:5]
        members = _rec.comms.get(comm)
        world_peer = world_rank(members, peer)
        state = wait_state(op, ("send", "recv", "collective")[min(kind, 2)], where, comm=comm, members=members,
                           peer=world_peer if kind != COLLECTIVE and world_peer >= 0 else None,
                           any_source=peer == MPI.ANY_SOURCE and kind == RECV, tag=tag, nbytes=what[5])
        state["via"] = "wait"
        return state

    def _done(self, status) -> None:
        event = getattr(self, "_event", None)
        if event is None:
            return
        self._event = None
        event[8] = _now()
        if event[1] == RECV:  # the status tells source, tag and size (a pickle's, for irecv)
            event[3], event[4], event[6] = status.Get_source(), status.Get_tag(), status.Get_count(BYTE)

    def Free(self) -> None:
        """A send's request freed while pending is MPI's to complete from here (mpi4py.futures
        frees each task's ``issend`` once the worker's answer shows it done): its event ends
        where the program gave it up, and it is no longer told as never completed. A receive's
        stays pending: freeing an active receive is a bug (the data may never be there)."""
        event = getattr(self, "_event", None)
        if event is not None and event[1] != RECV:
            self._event = None
            event[8] = _now()
        PlainRequest.Free(self)

    # single request
    def Wait(self, status=None):
        mine = status if status is not None else MPI.Status()
        start, where, traced = _now(), call_site(), _traced(self)
        what = getattr(self, "_what", None)  # a plain request (an untraced call's) has none
        receive = what is not None and what[1] == RECV
        _poll_request(self, mine, (self._describe, (where,)), cancel=receive)  # its Test() may end the event
        self._finished("Wait", start, mine, where, traced)
        return True

    def wait(self, status=None):
        mine = status if status is not None else MPI.Status()
        start, where, traced = _now(), call_site(), _traced(self)
        _, value = poll_result(lambda: PlainRequest.test(self, mine), first_item, (self._describe, (where,)))
        self._finished("wait", start, mine, where, traced)
        return value

    def _finished(self, name: str, start: float, status, where, traced: bool) -> None:
        if _rec.on and traced:
            self._done(status)
            end = _now()
            _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))

    def Test(self, status=None):
        if not _rec.on or not _traced(self):
            return PlainRequest.Test(self, status)
        mine = status if status is not None else MPI.Status()
        flag = PlainRequest.Test(self, mine)
        if flag:
            self._done(mine)
        return flag

    def test(self, status=None):
        if not _rec.on or not _traced(self):
            return PlainRequest.test(self, status)
        mine = status if status is not None else MPI.Status()
        flag, value = PlainRequest.test(self, mine)
        if flag:
            self._done(mine)
        return flag, value

    # many requests: polled
    @classmethod
    def Waitall(cls, requests, statuses=None):
        start, where = _now(), call_site()
        statuses = _statuses_for(requests, statuses)
        _poll(lambda: PlainRequest.Testall(requests, statuses), _many("Waitall", requests, where))
        _done_all(requests, statuses)
        if _rec.on:
            _log_wait("Waitall", start, where)
        return True

    @classmethod
    def waitall(cls, requests, statuses=None):
        start, where = _now(), call_site()
        statuses = _statuses_for(requests, statuses)
        _, values = poll_result(lambda: PlainRequest.testall(requests, statuses), first_item,
                                 _many("waitall", requests, where))
        _done_all(requests, statuses)
        if _rec.on:
            _log_wait("waitall", start, where)
        return values

    @classmethod
    def Testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag = PlainRequest.Testall(requests, statuses)
        if flag:
            _done_all(requests, statuses)
        return flag

    @classmethod
    def testall(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        flag, values = PlainRequest.testall(requests, statuses)
        if flag:
            _done_all(requests, statuses)
        return flag, values

    @classmethod
    def Waitany(cls, requests, status=None):
        return _wait_any("Waitany", PlainRequest.Testany, requests, status)[0]

    @classmethod
    def waitany(cls, requests, status=None):
        index, _, value = _wait_any("waitany", PlainRequest.testany, requests, status)
        return index, value

    @classmethod
    def Testany(cls, requests, status=None):
        mine = status if status is not None or not _rec.on else MPI.Status()
        index, flag = PlainRequest.Testany(requests, mine)
        if flag:
            _done_at(requests, index, mine)
        return index, flag

    @classmethod
    def testany(cls, requests, status=None):
        mine = status if status is not None or not _rec.on else MPI.Status()
        index, flag, value = PlainRequest.testany(requests, mine)
        if flag:
            _done_at(requests, index, mine)
        return index, flag, value

    @classmethod
    def Waitsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices = poll_result(lambda: PlainRequest.Testsome(requests, statuses), _some_done,
                               _many("Waitsome", requests, call_site()))
        _done_some(requests, indices, statuses)
        return indices

    @classmethod
    def waitsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices, values = poll_result(lambda: PlainRequest.testsome(requests, statuses), _first_some_done,
                                       _many("waitsome", requests, call_site()))
        _done_some(requests, indices, statuses)
        return indices, values

    @classmethod
    def Testsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices = PlainRequest.Testsome(requests, statuses)
        _done_some(requests, indices, statuses)
        return indices

    @classmethod
    def testsome(cls, requests, statuses=None):
        statuses = _statuses_for(requests, statuses)
        indices, values = PlainRequest.testsome(requests, statuses)
        _done_some(requests, indices, statuses)
        return indices, values


Request = TracedRequest  # its name, as mpi4py's (cffi and users read ``MPI.Request.__name__``)
Request.__name__ = Request.__qualname__ = "Request"


pickle_plain_copies(PlainRequest)


def _wait_any(name: str, test_any, requests, status):
    """Poll ``test_any`` (mpi4py's ``Testany`` or ``testany``) until one request completes, and
    record it; returns what the successful test returned. ``call_site(3)``: the user's line."""
    status = status if status is not None else MPI.Status()
    found = poll_result(lambda: test_any(requests, status), _second, _many(name, requests, call_site(3)))
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
            if id(type(request)) in TRACED_CLASSES and request._what is not None and request:
                state = request._describe(where)
                state["op"] = f"{name} ({state['op']})"
                return state
        return _waiting_on_nothing_known(name, where)
    return describe


# The classes of requests that traced calls made (``_verify`` adds its own), by identity: a plain
# request in a list of them (an untraced call's) has no event to complete, and a twin class
# equals (and hashes as) mpi4py's own, so only ``id`` tells them apart in a set.
TRACED_CLASSES = {id(TracedRequest)}


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
            if id(type(request)) in TRACED_CLASSES:
                request._done(_status_at(statuses, index))


def _status_at(statuses, index: int):
    return statuses[index] if statuses is not None and index < len(statuses) else _UNKNOWN_STATUS


_UNKNOWN_STATUS = MPI.Status()  # source and tag ANY, count 0: what an ignored status tells


def _done_at(requests, index, status) -> None:
    if _rec.on and index is not None and index >= 0 and id(type(requests[index])) in TRACED_CLASSES:
        requests[index]._done(status if status is not None else _UNKNOWN_STATUS)


def _done_some(requests, indices, statuses) -> None:
    for k, index in enumerate(indices or []):
        _done_at(requests, index, _status_at(statuses, k))


def _log_wait(name: str, start: float, where) -> None:
    end = _now()
    _rec.add((name, WAIT, "", -1, -1, 0, 0, start, end, end, *where))
