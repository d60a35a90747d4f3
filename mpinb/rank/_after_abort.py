"""What a rank does after an aborted run, when the pool asks.

It says that it is idle (and never starts the aborted run late), moves to a fresh world together
with every other rank, and, for a rank that does not return from a call, writes its Python stack
where the pool can read it.

The pool drives the order (see :mod:`mpinb.pool._recover`): it asks for a fresh world only once
every rank has answered :func:`settle`, so no rank enters a collective that another rank is not
about to enter.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from typing import TextIO

from ..common._protocol import STACK_SIGNAL, STACKS_ENVIRONMENT, Settled
from . import _relay
from .mpi import _entered_ahead, _tracing, _waiting


def settle(skip_through: int) -> Settled:
    """This rank's state. Answered only when the rank is idle (its engine runs one request at a
    time), and from then on it never starts a relayed run up to ``skip_through``. First it makes
    the calls that other members entered ahead of it (see :func:`release_blocked`)."""
    _relay.skip_runs_through(skip_through)
    _entered_ahead.release_blocked()
    return {"generation": _tracing.generation, "own_started": _tracing.own_calls["started"],
            "own_completed": _tracing.own_calls["completed"], "held": _waiting.held()}


def release_blocked() -> int:
    """On an idle rank after an aborted run: release the members that entered a call ahead of it
    (see ``_entered_ahead.release_blocked``); how many calls it made for that."""
    return _entered_ahead.release_blocked()


def fresh_world(generation: int, timeout: float) -> str | None:
    """Move the user's namespace to fresh world number ``generation``; ``None`` when done, else why
    not (the pool then starts fresh processes)."""
    from IPython import get_ipython

    return _tracing.fresh_world(get_ipython().user_ns, generation, timeout)


_stack_file: TextIO | None = None  # kept open: faulthandler writes to it from its signal handler


def write_stack_on_request(rank: int) -> None:
    """On ``STACK_SIGNAL``, write every thread's Python stack to ``<$MPINB_STACKS>/<rank>.stack``.

    faulthandler writes from the signal handler itself, in C, so it works while the main thread
    is inside a call that never returns to Python (a blocking MPI call, a long C loop) and needs
    no ptrace rights. The file starts with the main thread's id, to find its stack among others.
    """
    global _stack_file
    folder = os.environ.get(STACKS_ENVIRONMENT)
    if not folder or _stack_file is not None:
        return
    try:
        fd = os.open(os.path.join(folder, f"{rank}.stack"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:  # the folder is gone or not shared with this host: the pool says it could not read it
        return
    _stack_file = os.fdopen(fd, "w")
    _stack_file.write(f"main thread {threading.main_thread().ident:#x}\n")
    _stack_file.flush()
    faulthandler.register(getattr(signal, STACK_SIGNAL), file=_stack_file, all_threads=True, chain=False)
