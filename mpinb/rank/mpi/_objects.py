"""mpi4py's lowercase (pickle-based) collectives, carried out with polled point-to-point messages.

mpi4py runs them inside blocking C calls: a rank whose pickling or reduction raises leaves the
others blocked there for good, beyond the reach of an interrupt. Here each one is a few messages
of pickled bytes on mpinb's private copy of the communicator (the "shadow"), every wait is polled
(interruptible, and described to the notebook), and each call's messages carry a tag of their
own, so that what an aborted call left in flight never matches a later call.

Results are mpi4py's: every rank unpickles its own copy, as mpi4py does, and reductions and scans
apply ``op`` in the order of mpi4py's own binomial algorithms (``msgpickle.pxi``), so that
non-commutative operations give the same answer.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable
from typing import Any

import mpi4py
from mpi4py import MPI

from ._waiting import abandon
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

_BYTE = MPI.BYTE
_Intracomm = MPI.Intracomm
_Request = MPI.Request  # mpi4py's own: mpinb's traffic is not traced


class Exchange:
    """The messages of one collective call: pickled bytes on ``shadow`` with the call's tag.

    Used as a context manager: on the way out it waits until every message this rank sent has
    left, and if the call was broken off (an interrupt), what is still pending is abandoned.
    """

    def __init__(self, shadow: MPI.Intracomm, tag: int, describe):
        self.shadow, self.tag, self.describe = shadow, tag, describe
        self.rank, self.size = shadow.Get_rank(), shadow.Get_size()
        self.sends: list[MPI.Request] = []
        self.sent = self.received = 0  # bytes, for the trace

    def send(self, data: bytes, dest: int) -> None:
        self.sends.append(_Intracomm.Isend(self.shadow, [data, _BYTE], dest, self.tag))
        self.sent += len(data)

    def recv(self, source: int) -> bytearray:
        status = MPI.Status()
        box: list = [None]

        def arrived() -> bool:
            box[0] = _Intracomm.improbe(self.shadow, source, self.tag, status)
            return box[0] is not None

        _poll(arrived, self.describe)
        data = bytearray(status.Get_count(_BYTE))
        receive_matched(box[0], [data, _BYTE], len(data), self.describe)
        self.received += len(data)
        return data

    def __enter__(self) -> Exchange:
        return self

    def __exit__(self, kind, *_) -> None:
        try:
            if kind is None and self.sends:
                sends = self.sends
                _poll(lambda: _Request.Testall(sends), self.describe)
                self.sends = []
        finally:
            for request in self.sends:  # broken off: still pending, they keep their buffers
                abandon(request)


# A matched message this small has arrived whole, so its blocking receive returns at once; a
# larger one may need the sender to progress, and a sender that failed never will.
WHOLE_ON_ARRIVAL = 4096


def receive_matched(message: MPI.Message, buf, nbytes: int, describe) -> None:
    """Receive a message found by a matched probe, polled unless it is small."""
    if nbytes <= WHOLE_ON_ARRIVAL:
        message.Recv(buf)
    else:
        _poll_request(message.Irecv(buf), None, describe)


def dumps(obj: Any) -> bytes:
    return MPI.pickle.dumps(obj)


def loads(data) -> Any:
    return MPI.pickle.loads(data) if len(data) else None


def _check_root(root: object, size: int) -> int:
    root = operator.index(root)  # type: ignore[arg-type]  # as mpi4py's ``int root``: TypeError else
    if not 0 <= root < size:
        raise MPI.Exception(MPI.ERR_ROOT)
    return root


def _items(sendobj: Any, size: int) -> list:
    items = [None] * size if sendobj is None else list(sendobj)
    if len(items) != size:
        raise ValueError(f"expecting {size} items, got {len(items)}")
    return items


# -- the collectives: ``x`` is this call's Exchange ------------------------------------------------

def bcast(x: Exchange, obj: Any, root: int = 0) -> Any:
    root = _check_root(root, x.size)
    return loads(_bcast_bytes(x, dumps(obj) if x.rank == root else b"", root))


def _bcast_bytes(x: Exchange, data: bytes, root: int) -> bytes:
    """Binomial tree from ``root``: each rank receives once and forwards the bytes unchanged."""
    me, size = (x.rank - root) % x.size, x.size
    mask = 1
    while mask < size:
        if me & mask:
            data = bytes(x.recv((me - mask + root) % size))
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if me + mask < size:
            x.send(data, (me + mask + root) % size)
        mask >>= 1
    return data


def gather(x: Exchange, sendobj: Any, root: int = 0) -> list | None:
    root = _check_root(root, x.size)
    data = dumps(sendobj)
    if x.rank != root:
        x.send(data, root)
        return None
    return [loads(data if r == root else x.recv(r)) for r in range(x.size)]


def scatter(x: Exchange, sendobj: Any, root: int = 0) -> Any:
    root = _check_root(root, x.size)
    if x.rank != root:
        return loads(x.recv(root))
    pickled = [dumps(item) for item in _items(sendobj, x.size)]
    for r, data in enumerate(pickled):
        if r != root:
            x.send(data, r)
    return loads(pickled[root])


def allgather(x: Exchange, sendobj: Any) -> list:
    return [loads(data) for data in allgather_bytes(x, dumps(sendobj))]


def allgather_bytes(x: Exchange, data: bytes) -> list[bytes]:
    """Every rank's ``data``: gathered at rank 0, then broadcast as one bundle (sizes, bytes)."""
    if x.rank == 0:
        parts = [data if r == 0 else bytes(x.recv(r)) for r in range(x.size)]
        bundle = array("q", map(len, parts)).tobytes() + b"".join(parts)
    else:
        x.send(data, 0)
        bundle = b""
    bundle = _bcast_bytes(x, bundle, 0)
    sizes = array("q")
    sizes.frombytes(bundle[: 8 * x.size])
    parts, at = [], 8 * x.size
    for size in sizes:
        parts.append(bundle[at:at + size])
        at += size
    return parts


def alltoall(x: Exchange, sendobj: Any) -> list:
    pickled = [dumps(item) for item in _items(sendobj, x.size)]
    for r, data in enumerate(pickled):
        if r != x.rank:
            x.send(data, r)
    return [loads(pickled[r] if r == x.rank else x.recv(r)) for r in range(x.size)]


def reduce(x: Exchange, sendobj: Any, op: Callable = MPI.SUM, root: int = 0) -> Any:
    root = _check_root(root, x.size)
    if not mpi4py.rc.fast_reduce:
        return _in_order(gather(x, sendobj, root), op)
    return _reduce_tree(x, sendobj, op, root)


def _reduce_tree(x: Exchange, sendobj: Any, op: Callable, root: int) -> Any:
    """mpi4py's ``PyMPI_reduce_p2p``: a binomial tree towards rank 0, then on to ``root``."""
    rank, size = x.rank, x.size
    result = loads(dumps(sendobj))
    mask = 1
    while mask < size:
        if mask & rank:
            x.send(dumps(result), (rank & ~mask) % size)
        elif (rank | mask) < size:
            result = op(result, loads(x.recv(rank | mask)))
        mask <<= 1
    if root != 0:
        if rank == 0:
            x.send(dumps(result), root)
        elif rank == root:
            result = loads(x.recv(0))
    return result if rank == root else None


def allreduce(x: Exchange, sendobj: Any, op: Callable = MPI.SUM) -> Any:
    if not mpi4py.rc.fast_reduce:
        return _in_order(allgather(x, sendobj), op)
    result = _reduce_tree(x, sendobj, op, 0)
    return loads(_bcast_bytes(x, dumps(result) if x.rank == 0 else b"", 0))


def scan(x: Exchange, sendobj: Any, op: Callable = MPI.SUM) -> Any:
    if not mpi4py.rc.fast_reduce:
        items = gather(x, sendobj, 0)
        return scatter(x, _prefixes(items, op) if items is not None else None, 0)
    return _scan_tree(x, sendobj, op, exclusive=False)


def exscan(x: Exchange, sendobj: Any, op: Callable = MPI.SUM) -> Any:
    if not mpi4py.rc.fast_reduce:
        items = gather(x, sendobj, 0)
        if items is not None:
            items = [None, *_prefixes(items, op)[:-1]]
        return scatter(x, items, 0)
    return _scan_tree(x, sendobj, op, exclusive=True)


def _scan_tree(x: Exchange, sendobj: Any, op: Callable, exclusive: bool) -> Any:
    """mpi4py's ``PyMPI_scan_p2p`` and ``PyMPI_exscan_p2p`` (recursive doubling)."""
    rank, size = x.rank, x.size
    result = loads(dumps(sendobj))
    partial, first = result, True
    mask = 1
    while mask < size:
        peer = rank ^ mask
        if peer < size:
            x.send(dumps(partial), peer)
            other = loads(x.recv(peer))
            if rank > peer:
                partial = op(other, partial)
                if exclusive and first:
                    result = other
                else:
                    result = op(other, result)
                first = False
            else:
                partial = op(partial, other)
        mask <<= 1
    return None if exclusive and rank == 0 else result


def _in_order(items: list | None, op: Callable) -> Any:
    if items is None:
        return None
    result = items[0]
    for item in items[1:]:
        result = op(result, item)
    return result


def _prefixes(items: list, op: Callable) -> list:
    for i in range(1, len(items)):
        items[i] = op(items[i - 1], items[i])
    return items


PICKLED_COLLECTIVES: dict[str, Callable] = {
    "bcast": bcast, "gather": gather, "scatter": scatter, "allgather": allgather,
    "alltoall": alltoall, "reduce": reduce, "allreduce": allreduce, "scan": scan, "exscan": exscan,
}
