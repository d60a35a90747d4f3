"""Traced collectives: the members agree on the call first.

They agree in polled messages on mpinb's copy of the communicator. Lowercase collectives then run
as polled messages of pickles (see ``_objects``), uppercase blocking ones as their nonblocking
forms, polled, except the reductions whose nonblocking forms would change the results
(``BLOCKING_AFTER_AGREEMENT``)."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from time import perf_counter as _now
from typing import Any

from mpi4py import MPI

from ...common._events import (
    CART_DERIVING_CALLS,
    COLLECTIVE,
    FILE_COLLECTIVES,
    NEIGHBORHOOD_COLLECTIVES,
    REDUCTION_OPS,
    WINDOW_COLLECTIVES,
    place_of,
)
from . import _objects, _verify
from ._calls import (
    NAN,
    RECEIVE_BUFFER,
    SEND_BUFFER,
    PlainIntracomm,
    PlainRequest,
    arg,
    call_site,
    describer,
    named,
    nbytes,
    revoked,
)
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._waiting import abandon as _abandon
from ._waiting import wait as _poll
from ._waiting import wait_request as _poll_request

# What a private copy made at a collective's first call is enrolled in once every member has it:
# the board of reductions entered ahead, which sits above this module (over the C tracer) and
# hands its enrolment here as it is imported (_entered_ahead).
_enrol_new_copy: Callable[[Any, MPI.Intracomm], None] | None = None


def enrol_new_copies_with(enrol: Callable[[Any, MPI.Intracomm], None]) -> None:
    """Have ``enrol(comm, copy)`` called, with every member there, on each private copy that
    :func:`_shadow` makes from now on."""
    global _enrol_new_copy
    _enrol_new_copy = enrol


def _shadow(comm) -> MPI.Intracomm:
    """mpinb's private copy of ``comm``: its own traffic never touches the user's communicators.

    Twins made by mpinb get theirs when they are made (see ``traced``); one that reached user code
    around mpinb (``type(comm).fromhandle``, ``Idup``) makes it on first need, with a polled
    ``Idup`` at the first collective, which every member calls in the same order.
    """
    shadow = comm._mpinb_shadow
    if shadow is None:
        copy, request = PlainIntracomm.Idup(comm)
        _poll_request(request, None, describer(comm, "Dup", "collective", None, -1, 0, call_site(3)))
        shadow = comm._mpinb_shadow = PlainIntracomm(copy)  # a plain communicator: untraced
        comm._mpinb_made_in = _epoch
        if BLOCKING_AFTER_AGREEMENT and _REVOCABLE:  # (while every member is here)
            copy, request = PlainIntracomm.Idup(shadow)
            _poll_request(request, None, describer(comm, "Dup", "collective", None, -1, 0, call_site(3)))
            comm._mpinb_rehearsal = _revoked_copy(PlainIntracomm(copy))
        if BLOCKING_AFTER_AGREEMENT and _enrol_new_copy is not None:
            _enrol_new_copy(comm, shadow)
    return shadow


def rehearsal_of(shadow: MPI.Intracomm) -> MPI.Intracomm | None:
    """For a twin made with every member there: the revoked copy that ``rehearse`` needs, where
    it needs one (see ``BLOCKING_AFTER_AGREEMENT``)."""
    if not (BLOCKING_AFTER_AGREEMENT and _REVOCABLE):
        return None
    return _revoked_copy(PlainIntracomm(PlainIntracomm.Dup(shadow)))


def _revoked_copy(copy: MPI.Intracomm) -> MPI.Intracomm:
    copy.Revoke()
    return copy


def _exchange(comm, name: str, where, root) -> _objects.Exchange:
    """The messages of one collective call on ``comm``'s shadow, under a tag of their own.

    Members count their calls alike, so the k-th call has the same tag everywhere. After an
    aborted run (a new epoch) every count starts again: the aborted call may have been counted
    by some members only, and what it left in flight carries the old epoch's tags.
    """
    return _objects.Exchange(_shadow(comm), _next_tag(comm), describer(comm, name, "collective", None,
                                                                               -1, 0, where, root))


def _next_tag(comm) -> int:
    """The tag of mpinb's next collective call on ``comm`` (see ``_exchange``)."""
    if comm._mpinb_epoch != _epoch:
        comm._mpinb_epoch, comm._mpinb_calls = _epoch, 0
    comm._mpinb_calls += 1
    return 1 + (_epoch * _CALLS_PER_EPOCH + comm._mpinb_calls) % _TAG_SPAN


_epoch = 0
_CALLS_PER_EPOCH = 2**20
_TAG_SPAN = min(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767, 2**30) - 1


def epoch() -> int:
    """The pool's count of fresh worlds as this rank last moved to one (see ``set_epoch``)."""
    return _epoch


def release(copy: MPI.Intracomm | None, made_in: int) -> None:
    """Free one of mpinb's private copies of a communicator (a twin's shadow, a window's or a
    file's), unless a run was aborted since it was made (``made_in``, the ``epoch()`` then): an
    agreement or exchange broken off by the abort may have left a message in flight on it, which
    a communicator made later under the freed context would receive (seen: a Split took one from
    a file's copy). Kept, it costs one communicator."""
    if copy is not None and made_in == _epoch:
        copy.Free()


def set_epoch(generation: int) -> None:
    """After an aborted run (every rank, with the same ``generation``, the pool's count of fresh
    worlds): mpinb's traffic starts afresh everywhere."""
    global _epoch
    _epoch = generation


def agree(comm, name: str, root: int, where, detail: tuple[int, ...] = ()) -> None:
    """Every member learns that every other is in the same collective (same root), or a
    mismatch raises on all of them: before each lowercase collective, barrier and call that
    makes a communicator. Once it returns, no member waits for one that never comes, so the
    agreement is also all that a barrier needs. ``detail`` (a verified run's, on every member:
    see ``signature``) is compared too, where both members know it (``-1``: not known).

    A dissemination over tagged, polled messages on the shadow (round k: to rank + 2**k, from
    rank - 2**k), each saying the sender's call and whether it has seen another: after
    ceil(log2 size) rounds every member has heard from every other, through a chain in which
    any difference was noticed and passed on. Messages, not a collective: what an aborted run
    leaves pending carries its epoch's tag and pairs with nothing later (see ``_exchange``).
    """
    size = comm.Get_size()
    if size == 1:
        return
    shadow, tag = _shadow(comm), _next_tag(comm)
    rank = shadow.Get_rank()
    describe = describer(comm, name, "collective", None, -1, 0, where, None if root < 0 else root)
    mine = array("i", [agreed_code(name), root, 0, *detail])
    heard = array("i", mine)
    distance = 1
    while distance < size:
        pair = [PlainIntracomm.Irecv(shadow, [heard, MPI.INT], (rank - distance) % size, tag),
                PlainIntracomm.Isend(shadow, [mine, MPI.INT], (rank + distance) % size, tag)]
        try:
            _poll(lambda: PlainRequest.Testall(pair), describe)  # noqa: B023 - called within this round
        except BaseException:
            _abandon(pair[0], cancel=True)
            _abandon(pair[1])
            raise
        if heard[2] or heard[:2] != mine[:2] or _differ(heard[3:], mine[3:]):
            mine[2] = 1  # (the round's send is complete)
        distance *= 2
    if mine[2]:  # every member knows: all of them say who called what
        raise disagreed(comm, name, root, where[0], where[1], mine[0], detail)


def _differ(theirs, mine) -> bool:
    return any(a != b and a >= 0 and b >= 0 for a, b in zip(theirs, mine))


# What MPI requires alike of every member of a collective but cannot check itself (a mismatch
# hangs, truncates or silently combines wrong values): the bytes each member contributes, and the
# reduction operation. A verified run's collectives that agree anyway (lowercase ones, Open MPI's
# reductions) agree on these too; the others (polled, not synchronizing) note them, for the trace
# to compare (``mpinb.trace._findings``). Where it is not known (a [buffer, count, type] spec,
# IN_PLACE at a root, a user-defined op), -1 compares equal to anything.
_PREDEFINED_OPS = tuple(getattr(MPI, name) for name in REDUCTION_OPS)
_OP_AT = {"Reduce": 2, "Allreduce": 2, "Scan": 2, "Exscan": 2, "Reduce_scatter_block": 2, "Reduce_scatter": 3,
          "reduce": 1, "allreduce": 1, "scan": 1, "exscan": 1}
# where the bytes every member contributes alike are: the send buffer (IN_PLACE: not known)
_BYTES_FROM = {"Bcast": (0, "buf"), "Scatter": RECEIVE_BUFFER,
               **dict.fromkeys(("Allreduce", "Scan", "Exscan", "Reduce", "Reduce_scatter_block", "Allgather",
                                "Alltoall", "Gather"), SEND_BUFFER)}
_INT_MAX = 2**31 - 1


def signature(name: str, args: tuple, kwargs: dict) -> tuple[int, int]:
    """(bytes this member contributes, the reduction op's index in ``REDUCTION_OPS``): -1 where not known."""
    at = _OP_AT.get(name)
    op = -1
    if at is not None:
        given = arg(args, kwargs, at, "op", MPI.SUM)
        op = next((i for i, known in enumerate(_PREDEFINED_OPS) if given is known or
                   (isinstance(given, MPI.Op) and given == known)), -1)
    where = _BYTES_FROM.get(name)
    spec = None if where is None else arg(args, kwargs, *where)
    if spec is None or isinstance(spec, (list, tuple)) or spec is MPI.BOTTOM or spec is MPI.IN_PLACE:
        return -1, op
    return min(nbytes(spec), _INT_MAX), op


def rehearse(comm, blocking, *args, **kwargs) -> None:
    """Raise what ``blocking(comm, *args, **kwargs)`` would raise before it communicates (mpi4py's
    and MPI's checks of the arguments), without communicating: the same call on a revoked copy
    of ``comm`` (same size, same rank), which MPI refuses only once the arguments are read. A
    member whose call is refused so never joins the agreement: the others wait in it, where an
    interrupt reaches them, and never in a blocking call that it will not join.

    Where MPI cannot revoke (Intel MPI), the rehearsal is local, for the reductions whose checks
    depend on neither the rank nor the size (``Allreduce``, ``Scan``, ``Exscan``): arguments that
    mpi4py looks set to refuse (not a buffer, send and receive buffers that differ) are handed to
    the same call on ``COMM_SELF``, which raises mpi4py's own error before any message (or, if
    they were fine after all, reduces this rank's values alone, which the real call overwrites).
    What only MPI refuses, and the other reductions' arguments, on some members only, leave the
    others in the blocking call: the pool then restarts, naming the call from their stacks (but
    an ``Allreduce`` entered ahead is made by the refused member when the pool recovers, which
    releases them: see ``_entered_ahead``)."""
    if comm.Get_size() == 1:  # (no one to wait for)
        return
    if not _REVOCABLE:
        if blocking.__name__ in _LOCAL_REHEARSALS and _refused_by_mpi4py(args, kwargs):
            blocking(PlainIntracomm(MPI.COMM_SELF), *args, **kwargs)
        return
    try:
        blocking(_rehearsal(comm), *args, **kwargs)
    except MPI.Exception as err:
        if err.Get_error_class() != MPI.ERR_REVOKED:
            raise


_LOCAL_REHEARSALS = frozenset({"Allreduce", "Scan", "Exscan"})


def _refused_by_mpi4py(args: tuple, kwargs: dict) -> bool:
    """Whether mpi4py looks set to refuse these buffers of ``Allreduce``, ``Scan`` or ``Exscan``:
    a message that is not a buffer (nor ``[buffer, ...]``, ``IN_PLACE``, ``BOTTOM`` or ``None``,
    nor an array of a device: DLPack, CUDA's interface), a buffer that is not contiguous, a
    receive buffer that is read-only, or bare send and receive buffers of different sizes or
    types. A guess on the safe side: ``rehearse`` lets mpi4py decide. (A numpy array has
    ``__dlpack__`` too, and is read here as the buffer that it also is.)"""
    views: list[memoryview | None] = []
    for position, message in enumerate((arg(args, kwargs, 0, "sendbuf"), arg(args, kwargs, 1, "recvbuf"))):
        first = message[0] if isinstance(message, (list, tuple)) and message else message
        if first is None or first is MPI.IN_PLACE or first is MPI.BOTTOM:
            views.append(None)
            continue
        try:
            view = memoryview(first)
        except TypeError:
            if hasattr(first, "__dlpack__") or hasattr(first, "__cuda_array_interface__"):
                views.append(None)  # an array of a device
                continue
            return True
        if not view.contiguous or (position == 1 and view.readonly):
            return True
        views.append(view if first is message else None)  # ([buffer, count, type]: mpi4py's to read)
    send, receive = views
    return send is not None and receive is not None and (send.nbytes != receive.nbytes or send.format != receive.format)


def _rehearsal(comm) -> MPI.Intracomm:
    """The revoked copy of ``comm`` for ``rehearse``, made with its shadow (see ``_shadow`` and
    ``rehearsal_of``: never later, when a member may be missing, as in a deadlock) and freed with it."""
    copy = comm.__dict__.get("_mpinb_rehearsal")
    if copy is None:
        _shadow(comm)
        copy = comm.__dict__.get("_mpinb_rehearsal")
    if copy is None:
        raise RuntimeError(f"mpinb made communicator {comm._mpinb_id!r}'s private copy without its revoked "
                           "twin (a bug in mpinb: please report it)")
    return copy


def agreement_channel(comm) -> tuple[MPI.Intracomm, int] | None:
    """Where the C tracer's agreement on ``comm``'s next call goes (the shadow, and the tag that
    ``agree`` would take), or ``None`` for a communicator of one."""
    if comm.Get_size() == 1:
        return None
    return _shadow(comm), _next_tag(comm)


def agreed_code(name: str) -> int:
    """The number that stands for collective ``name`` in the agreement's messages."""
    return _AGREED_CODES[_AGREED_AS.get(name, name)]


def disagreed(comm, name: str, root: int, file: str, line: int, code: int,
              detail: tuple[int, ...] = ()) -> RuntimeError:
    """After an agreement that found a difference (every member knows): all of them say who
    called what, and each gets the error that names it."""
    with _exchange(comm, name, (file, line), root) as exchange:
        records = _objects.allgather_bytes(exchange, array("i", [code, root, *detail]).tobytes())
    calls = [array("i", record) for record in records]
    return _mismatched(comm, [(_AGREED_CALLS[call[0]], call[1], tuple(call[2:])) for call in calls])


_AGREED_AS = {"Barrier": "barrier"}  # the same MPI call under two names


def _mismatched(comm, calls: list[tuple[str, int, tuple[int, ...]]]) -> RuntimeError:
    """The error for members that called different collectives: ``calls[r]`` is member r's (name,
    root, detail), the detail a verified run's (see ``signature``)."""
    groups: dict[str, list[int]] = {}
    members = _rec.comms.get(comm._mpinb_id) or list(range(len(calls)))
    for r, (op, op_root, detail) in enumerate(calls):
        label = op + (f" (root {op_root})" if op_root >= 0 else "")
        if detail:
            size, reduction = detail
            label += (f" of {size} bytes" if size >= 0 else "") + (f" with {REDUCTION_OPS[reduction]}"
                                                                    if reduction >= 0 else "")
        groups.setdefault(label, []).append(members[r])
    said = "; ".join(f"{_ranks_text(ranks)} called {label}" for label, ranks in groups.items())
    alike = ", the same amount of data, the same operation" if any(call[2] for call in calls) else ""
    what = place_of(comm._mpinb_id)
    return RuntimeError(
        f"mismatched collectives on {what} {comm._mpinb_id!r}: {said}. Every rank of a "
        f"{what} must call the same collectives, with the same root{alike}, in the same order."
    )


def pickled_collective(comm, name: str, args: tuple, kwargs: dict, where, root):
    """A lowercase collective, as polled messages of pickles on the shadow (see ``_objects``):
    its result, and the bytes this rank sent and received."""
    lock = MPI._comm_lock(comm, _LOCKED_AS.get(name, "@commctx_intra"))  # mpi4py's thread lock
    with _exchange(comm, name, where, root) as exchange, lock:
        result = _objects.PICKLED_COLLECTIVES[name](exchange, *args, **kwargs)
    return result, exchange.sent, exchange.received


# The key under which mpi4py locks a communicator for each lowercase collective.
_LOCKED_AS = {name: name for name in ("bcast", "gather", "scatter", "allgather", "alltoall")}


def _buffer_bytes(comm, args: tuple, kwargs: dict, bcast: bool, root) -> tuple[int, int]:
    """Bytes a buffer collective sends and receives on this rank, from its buffer specs."""
    if bcast:
        size = nbytes(arg(args, kwargs, 0, "buf"))
        return (size, 0) if comm.Get_rank() == root else (0, size)
    return nbytes(arg(args, kwargs, 0, "sendbuf")), nbytes(arg(args, kwargs, 1, "recvbuf"))


def _ranks_text(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _collective(name: str, root_at: int | None, lowercase: bool, nonblocking: bool):
    base = getattr(PlainIntracomm, name)
    bcast = name.lower().lstrip("i") == "bcast"
    agreed_only = name in ("barrier", "Barrier")  # a barrier moves no data: the agreement is all
    blocking_after_agreement = name in BLOCKING_AFTER_AGREEMENT
    polled = None if lowercase or nonblocking else getattr(PlainIntracomm, "I" + name[0].lower() + name[1:])

    def method(self, *args, **kwargs):
        rec = _rec
        root = -1 if root_at is None else arg(args, kwargs, root_at, "root", 0)
        where = call_site()
        start = _now()
        sent = received = 0
        if (agreed_only or lowercase) and revoked(self):
            # mpinb's copy of the communicator knows nothing of it: MPI's own call says ERR_REVOKED
            return base(self, *args, **kwargs)
        if agreed_only:
            # on mpinb's copy of the communicator: the user's own sequence of collectives stays
            # the program's (MPICH matches nonblocking ones, such as Iagree, by that sequence)
            if args or kwargs:
                raise TypeError(f"{name}() takes no arguments")
            agree(self, name, root, where)
            result = None
        elif lowercase:
            agree(self, name, root, where, signature(name, args, kwargs) if _verify.on else ())
            result, sent, received = pickled_collective(self, name, args, kwargs, where, root)
        elif blocking_after_agreement:
            if not revoked(self):
                rehearse(self, base, *args, **kwargs)
                agree(self, name, root, where, signature(name, args, kwargs) if _verify.on else ())
            result = base(self, *args, **kwargs)
        elif polled is not None:
            if _verify.on:  # compared in the trace, afterwards: an agreement first would make it synchronizing
                _verify.notes.append((start, COLLECTIVE, "signature", *signature(name, args, kwargs)))
                _verify.counted(start, name, args, kwargs)
            request = polled(self, *args, **kwargs)
            _poll_request(request, None, describer(self, name, "collective", None, -1, 0, where, root))
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
            event = [name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, NAN, end, *where]
            if recording:
                rec.add(event)
            return TracedRequest._wrap(result, event, recording)
        rec.add((name, COLLECTIVE, self._mpinb_id, root, -1, sent, received, start, end, end, *where))
        return result

    return named(method, base)


# Reductions whose nonblocking forms combine the members' values in another order than the
# blocking ones do (Open MPI's libnbc against its tuned algorithms: a float sum of 7 values on 3
# ranks differs in the last bits; Intel MPI's likewise, from 7 values on 4 ranks), so that
# polling the nonblocking form would change the program's results. Traced, they run as the
# blocking call itself, once its arguments passed MPI's checks (``rehearse``) and every member
# has agreed that it is there: the call then cannot wait for a member that never comes. (The C
# tracer's ``Allreduce``, in a pool on one host, enters without that agreement, and a member
# that never comes is made to release the others instead: see ``_entered_ahead``.) MPICH's
# forms give the same bits (tests/test_trace.py checks each MPI), and the polled form is faster
# there.
_REDUCTIONS = frozenset({"Reduce", "Allreduce", "Reduce_scatter", "Reduce_scatter_block", "Scan", "Exscan"})
ORDER_DIFFERS = MPI.get_vendor()[0] in ("Open MPI", "Intel MPI")
BLOCKING_AFTER_AGREEMENT = _REDUCTIONS if ORDER_DIFFERS else frozenset()
# Open MPI 5's fault tolerance revokes a communicator, which ``rehearse`` needs; Intel MPI's
# mpi4py raises NotImplementedError there.
_REVOCABLE = MPI.get_vendor()[0] == "Open MPI" and hasattr(MPI.Comm, "Revoke")

ROOTS_LOWER = {"barrier": None, "bcast": 1, "gather": 1, "scatter": 1, "allgather": None,
                "alltoall": None, "reduce": 2, "allreduce": None, "scan": None, "exscan": None}
ROOTS_UPPER = {"Barrier": None, "Bcast": 1, "Gather": 2, "Gatherv": 2, "Scatter": 2, "Scatterv": 2,
                "Allgather": None, "Allgatherv": None, "Alltoall": None, "Alltoallv": None,
                "Alltoallw": None, "Reduce": 3, "Allreduce": None, "Reduce_scatter": None,
                "Reduce_scatter_block": None, "Scan": None, "Exscan": None}
# the same codes on every rank; the uppercase collectives agree in verified runs (see ``signature``)
_AGREED_CALLS = (*ROOTS_LOWER, *CART_DERIVING_CALLS, *sorted(_REDUCTIONS),
                 *sorted(set(ROOTS_UPPER) - _REDUCTIONS - set(_AGREED_AS)), *WINDOW_COLLECTIVES,
                 *NEIGHBORHOOD_COLLECTIVES, *FILE_COLLECTIVES, "Create_intercomm", "Spawn")
_AGREED_CODES = {name: code for code, name in enumerate(_AGREED_CALLS)}
COLLECTIVES = {
    **{n: _collective(n, r, True, False) for n, r in ROOTS_LOWER.items()},
    **{n: _collective(n, r, False, False) for n, r in ROOTS_UPPER.items()},
    **{"I" + n[0].lower() + n[1:]: _collective("I" + n[0].lower() + n[1:], r, False, True)
       for n, r in ROOTS_UPPER.items()},
}
