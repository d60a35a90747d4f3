"""The critical path: the chain of computing and messages that set a run's wall time.

Walk back from the rank that finished last. Where that rank had waited (a wait state: a late
sender, a late receiver, the last rank to arrive at a collective), the time before the wait ended
was set by the rank it waited for, so the path jumps to that rank at the moment it arrived and
walks on back there; where a rank did not wait, its own computing and MPI calls are the path.
Shortening anything off the path cannot shorten the run; shortening the path can.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from .._language import say
from ._arrays import busy_until

if TYPE_CHECKING:
    from ._trace import Trace

# Times closer than this are the same instant (clocks are aligned to microseconds at best).
_SAME = 1e-9


class Step(TypedDict):
    rank: int
    start: float
    end: float
    op: str  # the MPI call, or "computing"
    file: str
    line: int  # the call's line; for computing, the line of the MPI call that ended it (-1: none)


@dataclass
class CriticalPath:
    """``steps`` in time order; ``wall`` is the run's wall time, which the path spans. A run that
    was stopped (``stopped``) has none: what set its time was the stop, not its work."""

    steps: list[Step]
    wall: float
    stopped: bool = False

    def by_rank(self) -> dict[int, float]:
        """Seconds of the path on each rank, the most first."""
        totals: dict[int, float] = {}
        for step in self.steps:
            totals[step["rank"]] = totals.get(step["rank"], 0.0) + step["end"] - step["start"]
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def by_line(self) -> list[tuple[str, float]]:
        """``(what, seconds)`` the most first: ``"line 5: recv"`` for time in an MPI call,
        ``"computing before line 4 (send)"`` for the computing that preceded a call."""
        totals: dict[str, float] = {}
        for step in self.steps:
            label = _label(step)
            totals[label] = totals.get(label, 0.0) + step["end"] - step["start"]
        return sorted(totals.items(), key=lambda item: -item[1])

    def ranks(self) -> list[int]:
        """The ranks the path passes through, in time order (a rank again after a message away)."""
        order: list[int] = []
        for step in self.steps:
            if not order or order[-1] != step["rank"]:
                order.append(step["rank"])
        return order

    def text(self, top: int = 5) -> str:
        """The path in words: its length, the ranks it runs through, and the ``top`` ranks by their
        share of it."""
        if self.stopped:
            return say("critical path: none, the run was stopped before it finished")
        if not self.steps:
            return say("critical path: no MPI calls recorded")
        wall = max(self.wall, 1e-12)
        path = " \u2192 ".join(f"rank {r}" for r in self.ranks())
        lines = [say("critical path ({seconds} s): {path}", seconds=f"{self.wall:.3g}", path=path)]
        lines += [f"  rank {rank}: {seconds:.3g} s ({100 * seconds / wall:.0f}%)"
                  for rank, seconds in list(self.by_rank().items())[:top]]
        lines += [f"  {label}: {seconds:.3g} s ({100 * seconds / wall:.0f}%)"
                  for label, seconds in self.by_line()[:top]]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text())


def _label(step: Step) -> str:
    if step["op"] != "computing":
        return say("line {line}: {op}", line=step["line"], op=step["op"])
    if step["line"] < 0:
        return say("computing after the last MPI call")
    return say("computing before line {line}", line=step["line"])


def critical_path(trace: Trace) -> CriticalPath:
    if not trace.span:
        return CriticalPath([], 0.0)
    began = min(start for start, _ in trace.span.values())
    rank = max(trace.span, key=lambda r: trace.span[r][1])
    wall = trace.span[rank][1] - began
    if len(trace.unfinished()):
        return CriticalPath([], wall, stopped=True)
    # Per rank, its waits by the time each ended: the walk only goes back in time, so the wait it
    # needs is the last one ended by then (a bisection), not a scan of all of them at every step.
    waits_of: dict[int, list] = {}
    for w in sorted(trace.waits(), key=lambda w: w["start"] + w["seconds"]):
        waits_of.setdefault(w["rank"], []).append(w)
    resumed_at = {r: [w["start"] + w["seconds"] for w in ws] for r, ws in waits_of.items()}
    pieces: list[tuple[int, float, float]] = []  # (rank, from, to), latest first
    t = trace.span[rank][1]
    used: set[int] = set()
    while True:
        last = _last_wait_before(waits_of.get(rank, []), resumed_at.get(rank, []), t, used)
        if last is None:
            pieces.append((rank, trace.span[rank][0], t))
            break
        used.add(id(last))
        resumed = last["start"] + last["seconds"]
        pieces.append((rank, resumed, t))
        rank, t = last["peer"], resumed
    on_rank = _calls_by_rank(trace)
    steps: list[Step] = []
    for rank, start, end in reversed(pieces):
        steps += _steps_on(on_rank[rank], rank, start, end)
    return CriticalPath(steps, wall)


def _last_wait_before(waits: list, resumed_at: list[float], t: float, used: set[int]):
    """The wait that ended last at or before ``t`` (and began before it), not yet on the path."""
    for i in range(bisect.bisect_right(resumed_at, t + _SAME) - 1, -1, -1):
        w = waits[i]
        if id(w) not in used and w["start"] < t:
            return w
    return None


def _calls_by_rank(trace: Trace) -> dict[int, tuple]:
    """Per rank: its calls (in start order), when each stopped holding the rank, and the longest."""
    stops = busy_until(trace.events)
    found = {}
    for rank in trace.ranks:
        mine = trace.events["rank"] == rank
        events, until = trace.events[mine], stops[mine]
        found[rank] = (events, until, float((until - events["start"]).max()) if len(events) else 0.0)
    return found


def _steps_on(calls: tuple, rank: int, start: float, end: float) -> list[Step]:
    """``[start, end]`` of one rank cut into its MPI calls and the computing between them."""
    events, stops, longest = calls
    # Only calls that began in [start - longest call, end) can overlap the window.
    lo, hi = np.searchsorted(events["start"], [start - longest - _SAME, end])
    steps: list[Step] = []
    t = start
    for i in range(lo, hi):
        if stops[i] <= start:
            continue
        call_start, call_end = max(float(events["start"][i]), start), min(float(stops[i]), end)
        if call_end <= t:
            continue  # within a call already on the path (sendrecv's two halves)
        if call_start > t + _SAME:
            steps.append(_step(rank, t, call_start, "computing", events[i]))
        steps.append(_step(rank, max(call_start, t), call_end, str(events["op"][i]), events[i]))
        t = call_end
    if end > t + _SAME:
        later = int(np.searchsorted(events["start"], end - _SAME))
        steps.append(_step(rank, t, end, "computing", events[later] if later < len(events) else None))
    return steps


def _step(rank: int, start: float, end: float, op: str, event) -> Step:
    return {"rank": rank, "start": start, "end": end, "op": op,
            "file": "" if event is None else str(event["file"]),
            "line": -1 if event is None else int(event["line"])}
