"""``TracedWin``: ``MPI.Win`` while tracing is on, so that each window user code makes is known
by the call and line that made it, and one dropped without ``Free`` is told when the run ends
(see :mod:`._left`). Its operations are mpi4py's own."""

from __future__ import annotations

from mpi4py import MPI

from . import _left
from ._calls import TwinClass, pickle_plain_copies

PlainWin = MPI.Win  # mpi4py's own class; MPI.Win is replaced by TracedWin while tracing


class _WinMeta(TwinClass):
    """``isinstance(w, MPI.Win)`` stays true for every window once MPI.Win is ours."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, PlainWin) if cls is TracedWin else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, PlainWin) if cls is TracedWin else type.__subclasscheck__(cls, sub)


def _made_by(name: str) -> classmethod:
    """mpi4py's ``Win.<name>`` for the traced class, noting the window it makes."""
    plain = getattr(PlainWin, name)

    def make(cls, *args, **kwargs):
        window = getattr(super(TracedWin, cls), name)(*args, **kwargs)
        _left.made_window(window, f"Win.{name}")
        return window

    make.__name__, make.__qualname__, make.__doc__ = name, f"Win.{name}", plain.__doc__
    return classmethod(make)


class TracedWin(PlainWin, metaclass=_WinMeta):
    """``MPI.Win`` while tracing is on: mpi4py's window, noted where it is made."""

    _mpinb_plain = PlainWin
    Create = _made_by("Create")
    Allocate = _made_by("Allocate")
    Allocate_shared = _made_by("Allocate_shared")
    Create_dynamic = _made_by("Create_dynamic")


pickle_plain_copies(PlainWin)

Win = TracedWin  # its name, as mpi4py's (users read ``MPI.Win.__name__``)
Win.__name__ = Win.__qualname__ = "Win"
