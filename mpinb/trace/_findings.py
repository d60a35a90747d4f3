"""What a run left behind that is likely a bug, found in its trace alone (the cheap checks of
MPI correctness, on in every traced run): nonblocking calls that no wait or test saw complete.

Silent under ``mpiexec``: the program may still give the right answer here, and lose a message,
read a buffer early or hang on another MPI or at another size.

Messages that no receive took are not told yet: a message received by a form mpinb does not trace
(a matched probe's ``Message.recv``, a persistent ``Recv_init``) would look unreceived, and a
finding must never be false.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._language import say

if TYPE_CHECKING:
    from ._trace import Trace


@dataclass(frozen=True)
class Finding:
    """One thing a run did that works only by accident: ``check`` names the kind
    (``"never-completed"``), ``text`` says what and the fix."""

    check: str
    rank: int
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return self.text


def findings(trace: Trace) -> list[Finding]:
    """The run's findings, in the order of their calls; none for a run that was stopped or whose
    trace lost calls (what would have completed is not known)."""
    if not _complete(trace):
        return []
    events = trace.events
    found = []
    for i in np.flatnonzero(events["pending"]):
        event = events[i]
        found.append(_finding(event, "never-completed", say(
            "rank {rank}: {op} at line {line} was never completed (no wait or test saw it finish): until it is, "
            "its buffer belongs to MPI, and the run may end before the message moves. Wait for it "
            "(req.wait(), MPI.Request.Waitall) before the cell ends.",
            rank=int(event["rank"]), op=event["op"], line=int(event["line"]))))
    return found


def _complete(trace: Trace) -> bool:
    """Whether every call of the run is in the trace: none dropped, none broken off."""
    return not trace.dropped and not bool(trace.events["open"].any())


def _finding(event, check: str, text: str) -> Finding:
    return Finding(check, int(event["rank"]), str(event["file"]), int(event["line"]), text)
