"""``mpinb.breakpoint``: ``breakpoint()`` for some ranks, or when a condition holds.

On the ranks of a pool it stops for the notebook's debugger (see ``mpinb.rank._debugger``);
anywhere else (a script under plain ``mpiexec``, the notebook itself) it is Python's own pdb, as
``breakpoint()`` would be.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .common._ranges import Targets, parse_ranks


def breakpoint(ranks: Targets = None, condition: str | bool | Callable[[], object] | None = None) -> None:
    """Stop here, in the notebook's debugger on a pool's ranks, or in pdb under plain mpiexec.

    :param ranks: the ranks that stop (every rank by default): ``"0,2-3"``, a list, an int; ranks
        the world does not have are left out, so that a script written for 8 ranks runs on 2.
    :param condition: stop only when it holds: an expression (``"i == 5"``, evaluated where
        ``breakpoint`` is called), a callable, or a truth value. A condition that raises raises
        here, saying so.
    """
    frame = sys._getframe(1)
    if os.environ.get("PYTHONBREAKPOINT") == "0":
        return
    if ranks is not None:
        world = _world()
        # ranks beyond the world are allowed: a script written for 8 ranks also runs on 2
        if world is not None and world[0] not in parse_ranks(ranks, _ANY_RANK):
            return
    if condition is not None:
        try:
            if isinstance(condition, str):
                holds = eval(condition, frame.f_globals, frame.f_locals)
            else:
                holds = condition() if callable(condition) else condition
        except Exception as err:
            raise RuntimeError(f"the breakpoint's condition {condition!r} raised {type(err).__name__}: {err}") from err
        if not holds:
            return
    if getattr(sys.breakpointhook, "__module__", "") == "mpinb.rank._debugger":  # a rank of a pool
        from .rank._debugger import stop_here

        stop_here(frame)
    else:
        import pdb

        pdb.Pdb().set_trace(frame)


_ANY_RANK = 1 << 20


def _world() -> tuple[int, int] | None:
    """This process's rank and the world's size, if it runs MPI (never starts MPI itself)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized():
        return None
    world = mpi.COMM_WORLD
    return world.Get_rank(), world.Get_size()
