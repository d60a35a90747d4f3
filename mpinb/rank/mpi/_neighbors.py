"""Traced neighbourhood collectives of Cartesian and graph communicators.

Blocking ones run as their nonblocking forms (``Ineighbor_...``), polled, so that a member that
never comes is diagnosed and the stop button returns control; the lowercase ones as mpi4py's own
two steps (each neighbour's pickle size, then the pickles: ``msgpickle.pxi``), each polled. Every
call notes this rank's out-neighbours (world ranks) once per communicator, so that the trace can
draw an arrow to each neighbour only.
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from time import perf_counter as _now
from typing import Any

from mpi4py import MPI

from ...common._events import COLLECTIVE, NEIGHBORHOOD_COLLECTIVES
from ...common._protocol import WaitState, wait_state
from . import _objects
from ._calls import NAN, arg, call_site, named, nbytes, peer_world
from ._collectives import ORDER_DIFFERS, agree
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._waiting import wait_request as _poll_request

PlainTopocomm = MPI.Topocomm
BUFFER_CALLS = tuple(name for name in NEIGHBORHOOD_COLLECTIVES if name[0].isupper())


def _note_neighbours(comm) -> None:
    """This rank's out-neighbours on ``comm``, as world ranks (PROC_NULL left out), once."""
    if comm._mpinb_id not in _rec.neighbors:
        _rec.neighbors[comm._mpinb_id] = _in_world(comm, comm.inoutedges[1])


def _in_world(comm, ranks) -> list[int]:
    """``comm``'s ranks as world ranks, in order, without PROC_NULL (from its recorded members)."""
    return [world for world in (peer_world(comm, rank) for rank in ranks) if world is not None]


def _in_neighbours(comm) -> list[int]:
    """The world ranks whose data ``comm``'s neighbourhood collectives wait for on this rank."""
    return sorted(set(_in_world(comm, comm.inoutedges[0])))


def _waiting_for_neighbours(comm, name: str, where: tuple[str, int]) -> WaitState:
    """A neighbourhood collective waits for its in-neighbours only (built once the wait lasts)."""
    return wait_state(name, "collective", where, comm=comm._mpinb_id, members=_in_neighbours(comm))


# Open MPI's nonblocking neighbourhood collectives pair the two edges to one neighbour (a periodic
# dimension of size 2) the other way round from its blocking ones (seen here: neighbor_alltoall's
# items arrive swapped). On such topologies, under MPIs whose nonblocking collectives are other
# algorithms (see _collectives.ORDER_DIFFERS), the members agree first and then make the blocking
# call itself, so results stay the blocking call's and no member waits for one that never comes.
_BLOCKING_WHERE_AMBIGUOUS = ORDER_DIFFERS
_ambiguous: dict[str, bool] = {}


def _blocking_after_agreement(comm) -> bool:
    if not _BLOCKING_WHERE_AMBIGUOUS:
        return False
    cid = comm._mpinb_id
    if cid not in _ambiguous:
        ins, outs = ([rank for rank in edges if rank != MPI.PROC_NULL] for edges in comm.inoutedges)
        _ambiguous[cid] = len(set(ins)) < len(ins) or len(set(outs)) < len(outs)
    return _ambiguous[cid]


def _nonblocking_name(name: str) -> str:
    return "I" + name[0].lower() + name[1:]


def _buffer_call(name: str, nonblocking: bool):
    plain_name = _nonblocking_name(name) if nonblocking else name
    base = getattr(PlainTopocomm, plain_name)
    post = getattr(PlainTopocomm, _nonblocking_name(name))

    def method(self, *args, **kwargs):
        where = call_site()
        start = _now()
        if not nonblocking and _blocking_after_agreement(self):
            agree(self, name, -1, where)
            request = None
            base(self, *args, **kwargs)
        else:
            request = post(self, *args, **kwargs)
        sent, received = nbytes(arg(args, kwargs, 0, "sendbuf")), nbytes(arg(args, kwargs, 1, "recvbuf"))
        recording = _rec.on
        if recording:
            _note_neighbours(self)
        if nonblocking:
            event = [plain_name, COLLECTIVE, self._mpinb_id, -1, -1, sent, received, start, NAN, _now(), *where]
            if recording:
                _rec.add(event)
            return TracedRequest._wrap(request, event, recording)
        if request is not None:
            _poll_request(request, None, (_waiting_for_neighbours, (self, name, where)))
        if recording:
            end = _now()
            _rec.add((name, COLLECTIVE, self._mpinb_id, -1, -1, sent, received, start, end, end, *where))
        return None

    return named(method, base, "Topocomm")


def _exchange_pickles(comm, name: str, outgoing: list[bytes], alltoall: bool, where) -> tuple[list, int, int]:
    """mpi4py's lowercase neighbourhood collective: sizes first, then the pickles, each step
    polled. Returns what each in-neighbour sent (``None`` from PROC_NULL) and the bytes moved."""
    indegree = comm.indegree
    describe = (_waiting_for_neighbours, (comm, name, where))
    counts = array("i", [0] * indegree)
    lengths = array("i", [len(data) for data in outgoing])
    if alltoall:
        request = PlainTopocomm.Ineighbor_alltoall(comm, [lengths, MPI.INT], [counts, MPI.INT])
    else:
        request = PlainTopocomm.Ineighbor_allgather(comm, [lengths, MPI.INT], [counts, MPI.INT])
    _poll_request(request, None, describe)
    places = array("i", [0, *accumulate(counts)][:-1])
    incoming = bytearray(sum(counts))
    if alltoall:
        shifts = array("i", [0, *accumulate(lengths)][:-1])
        request = PlainTopocomm.Ineighbor_alltoallv(comm, [b"".join(outgoing), (lengths, shifts), MPI.BYTE],
                                                   [incoming, (counts, places), MPI.BYTE])
    else:
        request = PlainTopocomm.Ineighbor_allgatherv(comm, [outgoing[0], MPI.BYTE],
                                                    [incoming, (counts, places), MPI.BYTE])
    _poll_request(request, None, describe)
    view = memoryview(incoming)
    received = [_objects.loads(view[at:at + count]) for at, count in zip(places, counts)]
    return received, sum(lengths), len(incoming)  # (as for the other collectives: the send buffer's bytes)


def neighbor_allgather(self, sendobj: Any) -> list:
    return _lowercase(self, "neighbor_allgather", sendobj, [_objects.dumps(sendobj)], False)


def neighbor_alltoall(self, sendobj: Any) -> list:
    outdegree = self.outdegree
    items = list(sendobj) if sendobj is not None else [None] * outdegree
    if len(items) != outdegree:
        raise ValueError(f"expecting {outdegree} items, got {len(items)}")  # (mpi4py's own words)
    return _lowercase(self, "neighbor_alltoall", sendobj, [_objects.dumps(item) for item in items], True)


def _lowercase(comm, name: str, sendobj: Any, outgoing: list[bytes], alltoall: bool) -> list:
    where = call_site(3)
    start = _now()
    if _blocking_after_agreement(comm):
        agree(comm, name, -1, where)
        received = getattr(PlainTopocomm, name)(comm, sendobj)
        sent, got = sum(map(len, outgoing)), 0  # (what arrived is not known: mpi4py's own call)
    else:
        with MPI._comm_lock(comm, name):  # mpi4py's thread lock for the call
            received, sent, got = _exchange_pickles(comm, name, outgoing, alltoall, where)
    if _rec.on:
        _note_neighbours(comm)
        end = _now()
        _rec.add((name, COLLECTIVE, comm._mpinb_id, -1, -1, sent, got, start, end, end, *where))
    return received


for _method in (neighbor_allgather, neighbor_alltoall):
    named(_method, getattr(PlainTopocomm, _method.__name__), "Topocomm")

NEIGHBORHOOD = {
    **{name: _buffer_call(name, False) for name in BUFFER_CALLS},
    **{_nonblocking_name(name): _buffer_call(name, True) for name in BUFFER_CALLS},
    "neighbor_allgather": neighbor_allgather,
    "neighbor_alltoall": neighbor_alltoall,
}
