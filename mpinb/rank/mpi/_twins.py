"""The traced twin of a communicator that a traced call has just made.

The twin classes are built (in ``_traced``) out of the calls' modules, so those modules cannot
import the builder; ``_traced`` hands its :func:`~mpinb.rank.mpi._traced.traced` here as it is
imported, and the calls that make communicators (intercommunicators, ``Merge``, ``Spawn``) ask
here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _left_behind
from ._recorder import RECORDER as _rec

_make: Callable[..., Any] | None = None


def made_by(make: Callable[..., Any]) -> None:
    """``make(comm, cid, members, shadow=...)`` makes every twin asked for from now on."""
    global _make
    _make = make


def twin_of(comm: Any, cid: str, members: list[int], shadow: Any = None) -> Any:
    """The traced twin of ``comm``, just made with every member there, registered under ``cid``
    (``shadow``: its private copy, if made already)."""
    if _make is None:
        raise RuntimeError("mpinb.rank.mpi._traced is not imported: no twin can be made")
    return _make(comm, cid, members, shadow=shadow)


def intercomm_twin(new: Any, cid: str, local: list[int], remote: list[int], where: tuple[str, int], op: str,
                   shadow: Any = None) -> Any:
    """The traced twin of intercommunicator ``new`` (made with every member there; ``shadow``:
    its private copy, if made already)."""
    twin = twin_of(new, cid, sorted(local + remote), shadow=shadow)
    _rec.remote[cid] = remote
    _left_behind.made(twin, op, where)
    return twin
