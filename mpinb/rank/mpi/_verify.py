"""What a ``--verify`` run notes on a rank beyond its events, for the notebook's checks.

For the checks, see :mod:`mpinb.trace._findings`. A rank notes the element type of each buffer a
point-to-point call sends or receives, a nonblocking send's buffer changed before the send
completed, what a send sent and what a nonblocking receive's buffer held when it completed (a
digest each), a buffer that shares memory with a pending call's where either receives, and the
bytes and op each member of a polled collective gave (``_collectives.signature``), the counts of
the collectives whose counts differ by member (``counted``), and the blocking receives from
``ANY_SOURCE`` (whether their caller reads the status).

Off, this costs each Python-traced call one test of :data:`on`. On, the C tracer's methods give
way to the Python ones for the run (they note nothing), and each note is keyed by its call's
``start`` time and kind, which the trace keeps with the event.
"""

from __future__ import annotations

import zlib
from typing import Any

from mpi4py import MPI

from ...common._events import COLLECTIVE, RECV, SEND
from ._calls import RECEIVE_BUFFER, SEND_BUFFER, arg, user_site
from ._requests import TRACED_CLASSES, TracedRequest

on = False
notes: list[tuple] = []  # (start, kind, check, *what): see ``typed``, ``_VerifiedRequest``, ``_collectives``

_UNTYPED = frozenset("Bbc")  # bytes: a receive into bytes takes whatever was sent, by design


def start(classes, python_methods: dict) -> dict:
    """Turn the notes on for one run; the twin classes' methods that were replaced (to restore)."""
    global on
    notes.clear()
    _pending.clear()
    on = True
    replaced = {}
    for cls in classes:
        for name, method in python_methods.items():
            current = cls.__dict__.get(name)
            if current is not None and current is not method:
                replaced[(cls, name)] = current
                setattr(cls, name, method)
    return replaced


def stop(replaced: dict) -> list[tuple]:
    """Turn the notes off and put the C methods back; the run's notes."""
    global on
    on = False
    _pending.clear()
    for (cls, name), method in replaced.items():
        setattr(cls, name, method)
    taken = list(notes)
    notes.clear()
    return taken


def typecode(spec) -> str:
    """The element type of an mpi4py buffer spec as a one-character code (``"d"``, ``"i"``), or
    ``""`` where it is not one basic type (derived datatypes, bytes, objects without a format)."""
    if spec is None or spec is MPI.IN_PLACE or spec is MPI.BOTTOM:
        return ""
    if isinstance(spec, (list, tuple)):
        if not spec:
            return ""
        datatype = next((item for item in spec[1:] if isinstance(item, MPI.Datatype)), None)
        if datatype is not None:
            try:
                code = datatype.tocode()
            except (ValueError, MPI.Exception):
                return ""
            return "" if code in _UNTYPED else code
        spec = spec[0]
    try:
        code = memoryview(spec).format.lstrip("@=<>!")
    except (TypeError, ValueError):
        return ""
    return "" if len(code) != 1 or code in _UNTYPED else code


def typed(start: float, kind: int, spec) -> None:
    """Note the element type of the buffer of the call that began at ``start``."""
    code = typecode(spec)
    if code:
        notes.append((start, kind, "type", code))


def wildcard(start: float, tag: int, status_given: bool) -> None:
    """A blocking receive from ``ANY_SOURCE`` (under ``tag``), and whether the caller passed a
    status, to read who sent what it took (then any order is handled by design)."""
    notes.append((start, RECV, "wildcard", tag, status_given))


# per collective whose counts differ by member: (this member's own buffer, the one with counts)
_COUNTED = {"Allgatherv": (SEND_BUFFER, RECEIVE_BUFFER), "Gatherv": (SEND_BUFFER, RECEIVE_BUFFER),
            "Scatterv": (RECEIVE_BUFFER, SEND_BUFFER)}


def counted(start: float, name: str, args: tuple, kwargs: dict) -> None:
    """For a collective whose counts differ by member (``Allgatherv``, ``Gatherv``, ``Scatterv``):
    the bytes this member gives (or, scattered, takes) and the bytes per member its counts say
    (the root's or every member's); for ``Alltoallv`` and ``Alltoallw``, the bytes it sends to and receives from
    each member. The trace compares them. Forms not read here are not noted."""
    if name in _EXCHANGES:
        read = _EXCHANGES[name]
        sends = _unless_unreadable(read, arg(args, kwargs, *SEND_BUFFER))
        receives = _unless_unreadable(read, arg(args, kwargs, *RECEIVE_BUFFER))
        if sends is not None and receives is not None:
            notes.append((start, COLLECTIVE, "exchange-counts", sends, receives))
        return
    if name not in _COUNTED:
        return
    mine, counts = _COUNTED[name]
    own = _unless_unreadable(_plain_bytes, arg(args, kwargs, *mine))
    expected = _unless_unreadable(_counted_bytes, arg(args, kwargs, *counts))
    if own is not None or expected is not None:
        notes.append((start, COLLECTIVE, "counts", -1 if own is None else own, expected or ()))


def _unless_unreadable(read, spec):
    """``read(spec)``, or ``None`` for a spec it cannot read (a non-root's ``[None, counts]``)."""
    try:
        return read(spec)
    except (TypeError, ValueError, IndexError, MPI.Exception):
        return None


def _plain_bytes(spec) -> int | None:
    """The bytes of a buffer given alone or with its datatype (``[buf, MPI.DOUBLE]``)."""
    if isinstance(spec, (list, tuple)):
        if len(spec) != 2 or not isinstance(spec[1], MPI.Datatype):
            return None
        spec = spec[0]
    if spec is None or spec is MPI.IN_PLACE or spec is MPI.BOTTOM:
        return None
    return memoryview(spec).nbytes


def _counted_bytes(spec) -> tuple[int, ...] | None:
    """Bytes per member from ``[buf, counts]``, ``[buf, (counts, displs)]``, ``[buf, counts,
    displs]``, each with or without a datatype."""
    if not isinstance(spec, (list, tuple)) or len(spec) < 2:
        return None
    datatype = next((item for item in spec[1:] if isinstance(item, MPI.Datatype)), None)
    counts = [item for item in spec[1:] if not isinstance(item, MPI.Datatype)][0]
    if isinstance(counts, tuple) and len(counts) == 2 and all(hasattr(part, "__len__") for part in counts):
        counts = counts[0]  # (counts, displacements)
    if not hasattr(counts, "__len__"):
        return None
    size = datatype.Get_size() if datatype is not None else memoryview(spec[0]).itemsize
    return tuple(int(count) * size for count in counts)


def _weighted_bytes(spec) -> tuple[int, ...] | None:
    """Bytes per member from an ``Alltoallw`` spec: ``[buf, counts, displs, datatypes]`` or
    ``[buf, (counts, displs), datatypes]`` (a datatype per member)."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (3, 4):
        return None
    counts = spec[1][0] if len(spec) == 3 else spec[1]
    return tuple(int(count) * datatype.Get_size() for count, datatype in zip(counts, spec[-1], strict=True))


# per collective where each member sends to and receives from every other: how to read its specs
_EXCHANGES = {"Alltoallv": _counted_bytes, "Alltoallw": _weighted_bytes}


def _digest(spec) -> tuple[memoryview, int] | None:
    if isinstance(spec, (list, tuple)):
        spec = spec[0] if spec else None
    try:
        view = memoryview(spec).cast("B")
    except (TypeError, ValueError):
        return None
    return view, zlib.crc32(view)


def _message_bytes(spec) -> memoryview | None:
    """The bytes a send takes from (a receive puts into) a buffer given alone or with a basic
    datatype, from its start; ``None`` where a datatype, count or offset says otherwise."""
    if isinstance(spec, (list, tuple)):
        if len(spec) != 2 or not isinstance(spec[1], MPI.Datatype) or not spec[1].is_predefined:
            return None
        spec = spec[0]
    if spec is None or spec is MPI.IN_PLACE or spec is MPI.BOTTOM:
        return None
    try:
        return memoryview(spec).cast("B")
    except (TypeError, ValueError):  # (not contiguous, or not a buffer)
        return None


def sent(start: float, spec: object) -> None:
    """A digest of what a send sends, to compare with what its receive's buffer holds at completion."""
    view = _message_bytes(spec)
    if view is not None:
        _note_digest(start, view)


def _note_digest(start: float, view: memoryview) -> int:
    digest = zlib.crc32(view)
    notes.append((start, SEND, "digest", digest, len(view)))
    return digest


def blocking_send(start: float, spec: object) -> None:
    """A blocking send: its digest, and its buffer checked against pending receives'."""
    view = _message_bytes(spec)
    if view is not None:
        _note_digest(start, view)
        _overlap(start, SEND, view)


def blocking_receive(start: float, spec: object) -> None:
    """A blocking receive: its buffer checked against pending calls'."""
    view = _message_bytes(spec)
    if view is not None:
        _overlap(start, RECV, view)


# memory of nonblocking calls still pending on this rank: id(request) -> (first address, end,
# whether it receives, its op, its line)
_pending: dict[int, tuple[int, int, bool, str, int]] = {}


def _overlap(start: float, kind: int, view: memoryview) -> tuple[int, int] | None:
    """Note a call whose buffer shares memory with a pending nonblocking call's, where either
    receives (MPI may write one over the other: erroneous, says the standard); its memory."""
    if not len(view):
        return None
    low = MPI.buffer(view).address
    high = low + len(view)
    for other_low, other_high, other_receives, op, line in _pending.values():
        if low < other_high and other_low < high and (kind == RECV or other_receives):
            notes.append((start, kind, "overlap", op, line, other_receives))
            break
    return low, high


def posted_send(request: Any, spec: object, start: float) -> None:
    """A nonblocking send's request: its digest noted, its buffer checked against pending calls',
    and checked again, when it completes, for a change meanwhile."""
    view = _message_bytes(spec)
    region: tuple[int, int] | None = None
    posted: tuple[memoryview, int] | None
    if view is not None:
        region, posted = _overlap(start, SEND, view), (view, _note_digest(start, view))
    else:
        posted = _digest(spec)
    if posted is None or type(request) is not TracedRequest:
        return
    request.__class__ = _VerifiedRequest
    vars(request)["_mpinb_sent"] = (*posted, start)
    _pend(request, region, receives=False)


def posted_receive(request: Any, spec: object, start: float) -> None:
    """A nonblocking receive's request: what its buffer holds when it completes is noted, for the
    trace to compare with what the matched send sent (a write to the buffer meanwhile shows)."""
    view = _message_bytes(spec)
    if view is None or type(request) is not TracedRequest:
        return
    region = _overlap(start, RECV, view)
    request.__class__ = _VerifiedRequest
    vars(request)["_mpinb_receiving"] = (view, start)
    _pend(request, region, receives=True)


def _pend(request: Any, region: tuple[int, int] | None, receives: bool) -> None:
    what = request._what
    if region is not None and what is not None:
        _pending[id(request)] = (*region, receives, what[0], what[-1])


class _VerifiedRequest(TracedRequest):
    """A nonblocking call's request whose buffer is looked at when it completes: a send's is
    compared with what was posted, a receive's digest is noted."""

    _mpinb_plain = TracedRequest._mpinb_plain

    def _done(self, status) -> None:
        _pending.pop(id(self), None)
        posted = self.__dict__.pop("_mpinb_sent", None)
        receiving = self.__dict__.pop("_mpinb_receiving", None)
        if getattr(self, "_event", None) is not None:
            if posted is not None:
                view, digest, begun = posted
                if zlib.crc32(view) != digest:
                    notes.append((begun, SEND, "touched", *user_site()))
            if receiving is not None:
                view, begun = receiving
                count = status.Get_count(MPI.BYTE)
                if 0 < count <= len(view):
                    notes.append((begun, RECV, "delivered", zlib.crc32(view[:count]), count, *user_site()))
        super()._done(status)


_VerifiedRequest.__name__ = _VerifiedRequest.__qualname__ = TracedRequest.__name__
TRACED_CLASSES.add(id(_VerifiedRequest))
