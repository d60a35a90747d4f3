"""What every traced call shares.

It reads mpi4py's arguments and the user's line, and holds what a wait is for, polling, and the
class identity of the twins (see :mod:`._traced` for the design)."""

from __future__ import annotations

import copyreg
import os
import site
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from mpi4py import MPI

from ...common._events import world_rank
from ...common._protocol import WaitKind, WaitState, wait_state
from ._recorder import RECORDER as _rec
from ._waiting import abandon as _abandon
from ._waiting import wait as _poll

# mpinb's own code: the folder of the package this module is in, however deep it sits
PACKAGE_DIR = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 2]) + os.sep
PlainIntracomm = MPI.Intracomm
PlainRequest = MPI.Request  # mpi4py's own class; MPI.Request is replaced by TracedRequest
NAN = float("nan")
BYTE = MPI.BYTE


# where a collective's buffers are, as ``arg(args, kwargs, *SEND_BUFFER)`` reads them
SEND_BUFFER, RECEIVE_BUFFER = (0, "sendbuf"), (1, "recvbuf")


def arg(args: tuple, kwargs: dict, position: int, name: str, default=None):
    if len(args) > position:
        return args[position]
    return kwargs.get(name, default)


def _datatypes_not_noted(spec: list | tuple) -> None:
    pass


note_datatypes: Callable[[list | tuple], None] = _datatypes_not_noted


def note_datatypes_with(note: Callable[[list | tuple], None]) -> None:
    """Have every traced call hand its buffer spec to ``note`` (``_left_behind``, which looks
    for derived datatypes left unfreed, registers itself as it is imported)."""
    global note_datatypes
    note_datatypes = note


def receives_into(spec) -> None:
    """A receive's buffer spec: its datatypes are noted (a send's are, by ``nbytes``)."""
    if isinstance(spec, (list, tuple)) and len(spec) > 1:
        note_datatypes(spec)


def nbytes(spec) -> int:
    """Size of an mpi4py buffer spec: an array, or ``[array, count, type]`` and friends (whose
    datatypes are noted: see ``_left_behind.used_datatypes``)."""
    if spec is None or spec is MPI.IN_PLACE or spec is MPI.BOTTOM:
        return 0
    size = getattr(spec, "nbytes", None)
    if size is not None:
        return int(size)
    if isinstance(spec, (list, tuple)):
        if len(spec) > 1:
            note_datatypes(spec)
        return nbytes(spec[0]) if spec else 0
    try:
        return memoryview(spec).nbytes
    except TypeError:
        return 0


def with_status(args: tuple, kwargs: dict, position: int):
    """The user's status argument, or a fresh Status slipped in so that we can read the source."""
    status = arg(args, kwargs, position, "status")
    if status is not None:
        return args, kwargs, status
    status = MPI.Status()
    if len(args) > position:
        args = args[:position] + (status,) + args[position + 1:]
    else:
        kwargs = dict(kwargs, status=status)
    return args, kwargs, status


def _library_roots() -> tuple[str, ...]:
    """Where library code lives: the standard library, installed packages and mpinb itself."""
    paths = sysconfig.get_paths()
    found = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(name)}
    found.update(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    roots = {PACKAGE_DIR}
    for path in found:  # as imported (from sys.path) and resolved
        roots.update({os.path.join(path, ""), os.path.join(os.path.realpath(path), "")})
    return tuple(sorted(roots))


# A call made in library code (mpi4py.futures, the standard library) is told at the user's line
# that led to it, with the library's line as its detail (``RECORDER.via``).
LIBRARY_ROOTS = _library_roots()


def call_site(depth: int = 2) -> tuple[str, int]:
    """The line that made the call ``depth`` frames up: the user's (see :data:`LIBRARY_ROOTS`)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:  # called from the top of a stack
        return "", 0
    if frame.f_code.co_filename.startswith(LIBRARY_ROOTS):
        return _outside_libraries(frame)
    return frame.f_code.co_filename, frame.f_lineno


def _outside_libraries(inner: FrameType) -> tuple[str, int]:
    """The innermost line outside library code from ``inner`` out, the library's line noted
    behind it; ``inner``'s own where no user code is on the stack (a library's thread)."""
    frame = inner.f_back
    while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_ROOTS):
        frame = frame.f_back
    if frame is None:
        return inner.f_code.co_filename, inner.f_lineno
    site_ = frame.f_code.co_filename, frame.f_lineno
    _rec.via.setdefault(site_, (inner.f_code.co_filename, inner.f_lineno))
    return site_


def user_site() -> tuple[str, int]:
    """The innermost line outside mpinb and other libraries: the user's line that led to this call."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_ROOTS):
        frame = frame.f_back
    return ("", 0) if frame is None else (frame.f_code.co_filename, frame.f_lineno)


WORLD_GROUP = MPI.COMM_WORLD.Get_group()
# What this process's world ranks count from in a trace: 0 on the pool's ranks; a spawned
# process's provisional lanes (see _spawn), which the trace numbers after the pool's ranks.
_lane_base = 0


def count_lanes_from(base: int) -> None:
    """Number this process's world ranks from ``base`` in what it records (a spawned process,
    before any of mpinb's code counts world ranks)."""
    global _lane_base
    _lane_base = base


def world_ranks(group: MPI.Group, owned: bool = True) -> list[int]:
    """The world ranks of ``group``'s members, in its order; an ``owned`` group (just made for
    this: ``comm.Get_group()``) is freed, the user's own is not."""
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), WORLD_GROUP)
        if _lane_base:
            return [rank + _lane_base if rank >= 0 else rank for rank in ranks]
        return list(ranks)
    finally:
        if owned:
            group.Free()


def peer_world(comm, peer) -> int | None:
    """The world rank of ``comm``'s rank ``peer`` (of the remote group on an intercommunicator)."""
    cid = comm._mpinb_id
    world = world_rank(_rec.remote.get(cid) or _rec.comms.get(cid), peer)
    return world if world >= 0 else None


def describer(comm, op: str, kind: WaitKind, peer, tag, size: int, where: tuple[str, int], root=None):
    """What a wait is for, built only if the wait lasts (``_waiting`` calls it after spinning)."""
    return describe_wait, (comm, op, kind, peer, tag, size, where, root)


def describe_wait(comm, op, kind, peer, tag, size, where, root) -> WaitState:
    return wait_state(op, kind, where, comm=comm._mpinb_id, members=_rec.comms.get(comm._mpinb_id),
                      peer=peer_world(comm, peer),
                      any_source=peer == MPI.ANY_SOURCE, tag=tag, nbytes=size,
                      root=peer_world(comm, root),
                      unmatched=unmatched(comm, peer, tag) if kind == "recv" else None)


def unmatched(comm, source: int, tag: int) -> dict[str, int] | None:
    """The first message waiting in ``comm`` from ``source`` under another tag than ``tag``, which
    a receive of ``tag`` never matches: the usual cause of a receive that waits for ever (a tag
    slip). A probe only looks: the message stays for whichever receive matches it."""
    if tag == MPI.ANY_TAG or source == MPI.PROC_NULL:
        return None
    status = MPI.Status()
    try:
        if not PlainIntracomm.Iprobe(comm, source, MPI.ANY_TAG, status) or status.Get_tag() == tag:
            return None  # (one under the awaited tag is about to be taken: the wait ends)
    except MPI.Exception:  # (a communicator freed meanwhile, say: nothing to tell)
        return None
    sender = peer_world(comm, status.Get_source())
    return {"source": status.Get_source() if sender is None else sender, "tag": status.Get_tag(),
            "bytes": status.Get_count(BYTE)}


_can_revoke = True  # whether this MPI implements ULFM's Comm.Revoke (asked once)


def revoked(comm) -> bool:
    """Whether the user revoked ``comm`` (MPI's fault tolerance, ULFM): then the traced calls
    give way to MPI's own, which say ERR_REVOKED where a polled form or mpinb's copy of the
    communicator may not."""
    global _can_revoke
    if not _can_revoke:
        return False
    try:
        return comm.Is_revoked()
    except NotImplementedError:
        _can_revoke = False
        return False


def named(method, base, owner: str = "TracedIntracomm"):
    """``method`` as mpi4py's ``base`` reads to help() and tracebacks: its name and docstring."""
    method.__name__ = base.__name__
    method.__qualname__ = f"{owner}.{base.__name__}"
    method.__doc__ = base.__doc__
    return method


def poll_result(call, done, describe):
    """Poll ``call()`` until ``done(result)``; return that result."""
    box = [None]

    def test() -> bool:
        box[0] = call()
        return done(box[0])

    _poll(test, describe)
    return box[0]


def is_not_none(value) -> bool:
    return value is not None


def first_item(value) -> bool:
    return value[0]


@contextmanager
def abandoned_if_broken(*requests, cancel: bool = False) -> Iterator[None]:
    """Requests still pending when the block is broken off (an interrupt) are abandoned
    (``cancel`` for receives: see ``_waiting.abandon``)."""
    try:
        yield
    except BaseException:
        for request in requests:
            _abandon(request, cancel)
        raise


class TwinClass(type):
    """The class of a twin equals (and hashes as) the mpi4py class it stands for, so that
    ``type(comm) == MPI.Cartcomm`` holds; subclasses of a twin class are classes of their own."""

    def __eq__(cls, other) -> bool:
        return other is cls or other is cls.__dict__.get("_mpinb_plain", cls)

    def __ne__(cls, other) -> bool:
        return not cls == other

    def __hash__(cls) -> int:
        return type.__hash__(cls.__dict__.get("_mpinb_plain", cls))


class StandIn(TwinClass):
    """The class of a traced class that stands in for mpi4py's under its name in ``MPI`` while
    tracing (``MPI.Request``, ``MPI.Prequest``, ``MPI.Message``, ``MPI.Win``, ``MPI.File``): every
    object of mpi4py's class is an instance of it, as under mpiexec. A class marks itself with
    ``_mpinb_stands_in`` in its own body; user subclasses of it are classes of their own."""

    def __instancecheck__(cls, obj) -> bool:
        if cls.__dict__.get("_mpinb_stands_in"):
            return isinstance(obj, cls.__dict__["_mpinb_plain"])
        return type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub) -> bool:
        if cls.__dict__.get("_mpinb_stands_in"):
            return issubclass(sub, cls.__dict__["_mpinb_plain"])
        return type.__subclasscheck__(cls, sub)


_PLAIN_BY_NAME: dict[str, type] = {}


def _plain_copy(name: str, obj):
    return _PLAIN_BY_NAME[name](obj)


def pickle_plain_copies(plain: type) -> None:
    """Copies of mpi4py's own ``plain`` class (``MPI.Request(r)``) pickle while ``MPI`` names a
    traced class in its place (pickle cannot name mpi4py's class then): as a copy, unpickled."""
    _PLAIN_BY_NAME[plain.__name__] = plain

    def reduce(obj):
        reduced = obj.__reduce__()
        if isinstance(reduced, tuple) and len(reduced) == 2 and reduced[1][0] is plain:
            return _plain_copy, (plain.__name__, *reduced[1][1:])
        return reduced

    copyreg.pickle(plain, reduce)


def converter(name: str):
    def convert(cls, value):
        return cls._twin_of(getattr(cls._mpinb_plain, name)(value))
    convert.__name__ = name
    return classmethod(convert)
