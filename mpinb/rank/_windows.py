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


class TracedWin(PlainWin, metaclass=_WinMeta):
    """``MPI.Win`` while tracing is on: mpi4py's window, noted where it is made."""

    _mpinb_plain = PlainWin

    @classmethod
    def Create(cls, *args, **kwargs):
        window = super().Create(*args, **kwargs)
        _left.made_window(window, "Win.Create")
        return window

    @classmethod
    def Allocate(cls, *args, **kwargs):
        window = super().Allocate(*args, **kwargs)
        _left.made_window(window, "Win.Allocate")
        return window

    @classmethod
    def Allocate_shared(cls, *args, **kwargs):
        window = super().Allocate_shared(*args, **kwargs)
        _left.made_window(window, "Win.Allocate_shared")
        return window

    @classmethod
    def Create_dynamic(cls, *args, **kwargs):
        window = super().Create_dynamic(*args, **kwargs)
        _left.made_window(window, "Win.Create_dynamic")
        return window


pickle_plain_copies(PlainWin)

Win = TracedWin  # its name, as mpi4py's (users read ``MPI.Win.__name__``)
Win.__name__ = Win.__qualname__ = "Win"
