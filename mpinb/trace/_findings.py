"""What a run left behind that is likely a bug, found in its trace alone (the cheap checks of
MPI correctness, on in every traced run): nonblocking calls that no wait or test saw complete,
and messages that no receive of the run took.

Both are silent under ``mpiexec``: the program may still give the right answer here, and lose a
message, read a buffer early or hang on another MPI or at another size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._events import SEND
from .._language import say

if TYPE_CHECKING:
    from ._trace import Trace


@dataclass(frozen=True)
class Finding:
    """One thing a run did that works only by accident: ``check`` names the kind
    (``"never-completed"``, ``"never-received"``), ``text`` says what and the fix."""

    check: str
    rank: int
    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return self.text


def findings(trace: Trace) -> list[Finding]:
    """The run's findings, in the order of their calls."""
    events = trace.events
    found: list[tuple[float, Finding]] = []
    for i in np.flatnonzero(events["pending"]):
        event = events[i]
        found.append((float(event["start"]), _finding(event, "never-completed", say(
            "rank {rank}: {op} at line {line} was never completed (no wait or test saw it finish): until it is, "
            "its buffer belongs to MPI, and the run may end before the message moves. Wait for it "
            "(req.wait(), MPI.Request.Waitall) before the cell ends.",
            rank=int(event["rank"]), op=event["op"], line=int(event["line"])))))
    if _complete(trace):
        ran = set(trace.ranks)
        unreceived = (events["kind"] == SEND) & (events["msg"] < 0) & ~events["pending"] & ~events["open"]
        for i in np.flatnonzero(unreceived & (events["peer_world"] >= 0)):
            event = events[i]
            if int(event["peer_world"]) not in ran:
                continue
            found.append((float(event["start"]), _finding(event, "never-received", say(
                "rank {rank}: the message that {op} at line {line} sent to rank {dest} (tag {tag}) was never received "
                "in this run: a later receive from rank {rank} with that tag takes it, perhaps not the one meant. "
                "Receive it in the same cell, or check the tag and the destination.",
                rank=int(event["rank"]), op=event["op"], line=int(event["line"]), dest=int(event["peer_world"]),
                tag=int(event["tag"])))))
    return [finding for _, finding in sorted(found, key=lambda pair: pair[0])]


def _complete(trace: Trace) -> bool:
    """Whether every call of the run is in the trace: none dropped, none broken off."""
    return not trace.dropped and not bool(trace.events["open"].any())


def _finding(event, check: str, text: str) -> Finding:
    return Finding(check, int(event["rank"]), str(event["file"]), int(event["line"]), text)
