"""Persistent and partitioned requests, and MPI 4's persistent collectives.

The calls covered are ``Send_init``, ``Recv_init`` (and their Bsend, Ssend, Rsend, Psend, Precv
kin) and the persistent collectives (``Allreduce_init``...).

The init call moves no data and is not recorded; each ``Start`` (or ``Startall``) records the
operation it starts, named after its request (``"Start (Send_init)"``), with the peer, tag and
bytes that the init call gave, and its completion fills the event in as for a nonblocking call:
sends pair with receives and collectives group as usual. Waits on these requests are polled, so a
started request that never completes is diagnosed and interruptible.
"""

from __future__ import annotations

from time import perf_counter as _now

from mpi4py import MPI

from ...common._events import COLLECTIVE, RECV, SEND
from ._calls import (
    NAN,
    PlainRequest,
    StandIn,
    arg,
    call_site,
    converter,
    named,
    nbytes,
    pickle_plain_copies,
    receives_into,
)
from ._collectives import ROOTS_UPPER
from ._recorder import RECORDER as _rec
from ._requests import TRACED_CLASSES, TracedRequest

PlainPrequest = MPI.Prequest  # mpi4py's own class; MPI.Prequest is replaced by TracedPrequest while tracing



class TracedPrequest(TracedRequest, PlainPrequest, metaclass=StandIn):
    """``MPI.Prequest`` while tracing is on: each start of a traced persistent request records
    the operation it starts; its waits are polled (see ``TracedRequest``)."""

    _mpinb_stands_in = True
    _template: tuple | None = None  # (op, kind, comm id, peer, tag, sent, received) of each start
    _mpinb_plain = PlainPrequest
    fromhandle, f2py, fromint = converter("fromhandle"), converter("f2py"), converter("fromint")

    def __new__(cls, request=None):
        # mpi4py's Prequest refuses a non-null request of another kind; the C check is its class's
        # own, which this class (made by Request's constructor: see its bases) does not run
        twin = PlainRequest.__new__(cls, request)
        if twin != MPI.REQUEST_NULL and not isinstance(request, PlainPrequest):
            kind = type(request)
            raise TypeError(f"Cannot convert {kind.__module__}.{kind.__qualname__} to mpi4py.MPI.Prequest")
        return twin

    @classmethod
    def _twin_of(cls, request):
        return TracedPrequest(request)

    def Start(self) -> None:
        start = _now()
        PlainPrequest.Start(self)
        _started(self, start, _now(), call_site())

    @classmethod
    def Startall(cls, requests) -> None:
        start = _now()
        PlainPrequest.Startall(requests)
        returned, where = _now(), call_site()
        for request in requests:
            _started(request, start, returned, where)


def _started(request, start: float, returned: float, where: tuple[str, int]) -> None:
    template = getattr(request, "_template", None)
    if template is None:
        return
    event = [*template, start, NAN, returned, *where]
    request._what = event
    request._event = event if _rec.on else None
    if _rec.on:
        _rec.add(event)


TRACED_CLASSES.add(id(TracedPrequest))
pickle_plain_copies(PlainPrequest)


# name -> (kind, where its peer is (its root for a collective; None: none), where its tag is)
_POINT_TO_POINT = {
    "Send_init": (SEND, 1, 2), "Bsend_init": (SEND, 1, 2), "Ssend_init": (SEND, 1, 2), "Rsend_init": (SEND, 1, 2),
    "Recv_init": (RECV, 1, 2), "Psend_init": (SEND, 2, 3), "Precv_init": (RECV, 2, 3),
}
_PEER_NAME = {SEND: "dest", RECV: "source"}
_PEER_DEFAULT = {SEND: None, RECV: MPI.ANY_SOURCE}
_TAG_DEFAULT = {SEND: 0, RECV: MPI.ANY_TAG}


def _point_to_point_init(name: str):
    base = getattr(MPI.Intracomm, name)
    kind, peer_at, tag_at = _POINT_TO_POINT[name]

    def method(self, *args, **kwargs):
        request = base(self, *args, **kwargs)
        buf = arg(args, kwargs, 0, "buf")
        if kind == RECV:
            receives_into(buf)
        size = nbytes(buf)
        peer = arg(args, kwargs, peer_at, _PEER_NAME[kind], _PEER_DEFAULT[kind])
        tag = arg(args, kwargs, tag_at, "tag", _TAG_DEFAULT[kind])
        return _persistent(request, (f"Start ({name})", kind, self._mpinb_id, peer, tag,
                                     size if kind == SEND else 0, size if kind == RECV else 0))

    return named(method, base)


def _collective_init(name: str):
    base = getattr(MPI.Intracomm, name)
    blocking = name.removesuffix("_init")
    root_at = ROOTS_UPPER[blocking]

    def method(self, *args, **kwargs):
        request = base(self, *args, **kwargs)
        root = -1 if root_at is None else arg(args, kwargs, root_at, "root", 0)
        if blocking == "Bcast":
            size = nbytes(arg(args, kwargs, 0, "buf"))
            sent, received = (size, 0) if self.Get_rank() == root else (0, size)
        else:
            sent, received = nbytes(arg(args, kwargs, 0, "sendbuf")), nbytes(arg(args, kwargs, 1, "recvbuf"))
        return _persistent(request, (f"Start ({name})", COLLECTIVE, self._mpinb_id, root, -1, sent, received))

    return named(method, base)


def _persistent(request, template: tuple) -> TracedPrequest:
    twin = TracedPrequest(request)
    twin._template = template
    return twin


PERSISTENT = {
    **{name: _point_to_point_init(name) for name in _POINT_TO_POINT},
    **{f"{name}_init": _collective_init(f"{name}_init") for name in ROOTS_UPPER},
}

Prequest = TracedPrequest  # its name, as mpi4py's (users read ``MPI.Prequest.__name__``)
Prequest.__name__ = Prequest.__qualname__ = "Prequest"
