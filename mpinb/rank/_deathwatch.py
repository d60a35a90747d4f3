"""This rank's end of the pool's death watch (see :mod:`mpinb.pool._deathwatch`).

It has two parts: a socket that only the process's exit closes, and a line before a deliberate
``Abort``."""

from __future__ import annotations

import os
import socket

from ..common._protocol import DEATHWATCH_ENVIRONMENT as ENVIRONMENT


def report_abort(code: int) -> None:
    """On a rank about to call ``Abort``: say so, since mpiexec then kills every rank at once."""
    if _line is not None:
        try:
            _line.sendall(f"abort {code}\n".encode())
        except OSError:
            pass


def report_for_duty(rank: int) -> None:
    """On a rank: connect to the pool's watch (if it has one), to be closed only by our exit."""
    address = os.environ.get(ENVIRONMENT)
    if not address:
        return
    global _line
    try:
        _line = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _line.connect(address)
        _line.sendall(f"{rank}\n".encode())
    except OSError:  # the pidfd still watches this rank
        _line = None


_line: socket.socket | None = None  # kept open for the process's lifetime
