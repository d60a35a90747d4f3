"""``TracedFile``: ``MPI.File`` while tracing is on.

A file opened on a traced communicator is named alike on its members (``file0@world``) and its
calls are recorded:

- independent reads and writes (``Read``, ``Write_at``, ``Iwrite``...) as kind ``IO``, with the
  explicit offset as ``tag`` (-1: the file pointer's), the bytes written as ``sent`` and read as
  ``received``;
- collective ones (``Write_at_all``, ``Read_all``..., ``File.Open``, ``Close``, ``Set_view``,
  ``Set_size``, ``Preallocate``, ``Sync``, ``Set_atomicity``, the ordered ones) as collectives over
  the file's group: their members agree first (in polled messages on mpinb's private copy of the
  communicator), so that a member that never comes is diagnosed and the stop button returns
  control, then MPI's own call finds them all. Not the nonblocking forms, polled: Open MPI's
  ``Iwrite_at_all`` completes without the members that never call it, where its blocking one
  (and so the program under ``mpiexec``) hangs.

The split collectives (``Write_all_begin``...) pass through untraced.
"""

from __future__ import annotations

import os
from time import perf_counter as _now

from mpi4py import MPI

from ...common._events import COLLECTIVE, FILE_COLLECTIVES, IO
from ._calls import NAN, StandIn, arg, call_site, named, nbytes, pickle_plain_copies, receives_into
from ._collectives import agree
from ._recorder import RECORDER as _rec
from ._requests import TracedRequest
from ._windows import agreed_call, group_of, private_group, traced_parent

PlainFile = MPI.File  # mpi4py's own class; MPI.File is replaced by TracedFile while tracing



def _open(cls, comm, filename, amode: int = MPI.MODE_RDONLY, info=MPI.INFO_NULL):
    parent = traced_parent(comm)
    where = call_site()
    start = _now()
    if parent is not None and comm.Get_size() > 1:
        agree(comm, "File.Open", -1, where)
    file = super(TracedFile, cls).Open(comm, filename, amode, info)
    if parent is not None:
        if _rec.on:
            end = _now()
            _rec.add(("File.Open", COLLECTIVE, parent, -1, -1, 0, 0, start, end, end, *where))
        file._mpinb_group = private_group("file", file.Get_group(), comm, parent)
        _rec.files[file._mpinb_group._mpinb_id] = os.fsdecode(filename)
    return file


def _agreed(name: str, label: str):
    """A collective on the file: the members agree, then MPI's call (see the module)."""
    plain = getattr(PlainFile, name)
    at = "_at" in name

    def method(self, *args, **kwargs):
        group = group_of(self)
        if group is None:
            return plain(self, *args, **kwargs)
        sent, received = _io_bytes(name, args, kwargs, 1 if at else 0) if _rec.on else (0, 0)
        offset = int(arg(args, kwargs, 0, "offset")) if at else -1
        return agreed_call(self, group, f"File.{name}", lambda: plain(self, *args, **kwargs), call_site(),
                           name == "Close", label, offset, sent, received)

    return named(method, plain, "File")


def _io_bytes(name: str, args: tuple, kwargs: dict, buf_at: int) -> tuple[int, int]:
    """(written, read) by an I/O call whose buffer is argument ``buf_at``."""
    if "Write" not in name and "Read" not in name:
        return 0, 0
    buf = arg(args, kwargs, buf_at, "buf")
    if "Read" in name:
        receives_into(buf)
        return 0, nbytes(buf)
    return nbytes(buf), 0


def _independent(name: str):
    """A read or write by this rank alone: recorded (a nonblocking one when it is posted)."""
    plain = getattr(PlainFile, name)
    at = "_at" in name
    nonblocking = name.startswith("I")

    def method(self, *args, **kwargs):
        group = group_of(self)
        if not _rec.on or group is None:
            return plain(self, *args, **kwargs)
        where = call_site()
        start = _now()
        returned = plain(self, *args, **kwargs)
        end = _now()
        sent, received = _io_bytes(name, args, kwargs, 1 if at else 0)
        offset = int(arg(args, kwargs, 0, "offset")) if at else -1
        event = [name, IO, group._mpinb_id, -1, offset, sent, received, start, NAN if nonblocking else end, end,
                 *where]
        _rec.add(event)
        return TracedRequest._wrap(returned, event) if nonblocking else returned

    return named(method, plain, "File")



_AGREED = tuple(name.removeprefix("File.") for name in FILE_COLLECTIVES if name != "File.Open")
_INDEPENDENT = ("Read", "Write", "Read_at", "Write_at", "Read_shared", "Write_shared",
                "Iread", "Iwrite", "Iread_at", "Iwrite_at", "Iread_shared", "Iwrite_shared")


class TracedFile(PlainFile, metaclass=StandIn):
    """``MPI.File`` while tracing is on: mpi4py's file, its calls recorded (see the module)."""

    _mpinb_stands_in = True
    _mpinb_plain = PlainFile
    Open: classmethod = classmethod(named(_open, PlainFile.Open, "File"))
    locals().update({name: _agreed(name, name if "_all" in name else f"File.{name}") for name in _AGREED})
    locals().update({name: _independent(name) for name in _INDEPENDENT})


pickle_plain_copies(PlainFile)

File = TracedFile  # its name, as mpi4py's (users read ``MPI.File.__name__``)
File.__name__ = File.__qualname__ = "File"
