"""Wait states: where ranks lost time waiting for each other, and why.

They are the patterns that Scalasca and Vampir name, computed from a trace's events and matched
messages.

- late sender: a blocking receive started before its message was sent, and waited for it;
- late receiver: a blocking send could not complete before its receive was posted (a synchronous
  or large message), and waited for it;
- wait at collective (or at barrier): a rank entered a collective before the last member did
  (a window's ``Fence`` among them);
- lock held: a rank's ``Lock`` of a window's target (or, where the MPI grants locks lazily, the
  first call of the epoch that lasted) waited while another rank held a lock there that excludes
  it (one of the two exclusive);
- late post: an origin's ``Win.Start`` or ``Win.Complete`` waited for a target that exposed its
  window (``Win.Post``) only later.

A nonblocking call waits only in the ``Wait``/``Waitall``... that completed it: the time between
posting and waiting is the rank's own. A wait call that completed several late operations lost
its time once, to the latest of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np

from .._language import say
from ..common._events import EPOCH, WAIT
from ._rma import lock_holds

if TYPE_CHECKING:
    from ._trace import Trace

WAIT_KINDS = ("late sender", "late receiver", "wait at collective", "wait at barrier", "lock held", "late post")
# Shorter waits are noise (a message in flight, clocks aligned to a few microseconds).
SMALLEST_WAIT = 1e-4


class Wait(TypedDict):
    kind: str  # one of WAIT_KINDS
    rank: int  # the rank that waited
    peer: int  # the rank it waited for (the sender, the receiver, the last to arrive, the lock's holder)
    op: str  # the call that waited
    file: str
    line: int
    peer_op: str  # what the peer was late to call
    peer_line: int
    start: float  # when the waiting began (seconds on the trace's clock)
    seconds: float


def waits(trace: Trace) -> list[Wait]:
    """Every wait state of the trace, the longest first."""
    events = trace.events
    waited_in = _waited_in(events)
    found = (_point_to_point(events, waited_in, trace.message_halves())
             + _collective(events, waited_in, trace.collective_groups()) + _lock(events) + _late_post(events))
    longest: dict[tuple[int, float], Wait] = {}  # one loss per waiting call
    for w in found:
        key = (w["rank"], w["start"])
        if w["seconds"] >= SMALLEST_WAIT and (key not in longest or w["seconds"] > longest[key]["seconds"]):
            longest[key] = w
    return sorted(longest.values(), key=lambda w: -w["seconds"])


def _waited_in(events) -> np.ndarray:
    """Per event, the index of the call that blocked its rank until it completed: itself for a
    blocking call, the wait call that saw a nonblocking one complete, or -1 (completed by a test,
    never completed, or broken off)."""
    blocked = np.where(events["end"] == events["returned"], np.arange(len(events)), -1)
    blocked[events["open"] | (events["kind"] == WAIT)] = -1
    for rank in np.unique(events["rank"]):
        mine = np.nonzero(events["rank"] == rank)[0]
        waits_of_rank = mine[events["kind"][mine] == WAIT]
        later = mine[blocked[mine] < 0]
        later = later[(events["kind"][later] != WAIT) & ~events["open"][later]]
        if not len(waits_of_rank) or not len(later):
            continue
        starts = events["start"][waits_of_rank]  # sorted: the trace is
        completed = events["end"][later]
        k = np.searchsorted(starts, completed, side="right") - 1
        inside = (k >= 0) & (events["end"][waits_of_rank[np.maximum(k, 0)]] >= completed)
        blocked[later[inside]] = waits_of_rank[k[inside]]
    return blocked


def _point_to_point(events, waited_in: np.ndarray, halves: dict[int, dict[str, int]]) -> list[Wait]:
    found: list[Wait] = []
    for pair in halves.values():
        send, recv = events[pair["send"]], events[pair["recv"]]
        receiving, sending = waited_in[pair["recv"]], waited_in[pair["send"]]
        if receiving >= 0 and events["start"][receiving] < send["start"]:
            waiting = events[receiving]
            lost = min(float(send["start"]), float(waiting["end"])) - float(waiting["start"])
            found.append(_wait("late sender", waiting, send, lost))
        if sending >= 0 and events["start"][sending] < recv["start"] <= events["end"][sending]:
            waiting = events[sending]
            lost = float(recv["start"]) - float(waiting["start"])
            found.append(_wait("late receiver", waiting, recv, lost))
    return found


def _collective(events, waited_in: np.ndarray, groups: dict[tuple, list[int]]) -> list[Wait]:
    found: list[Wait] = []
    for members in groups.values():
        if len(members) < 2 or events["open"][members].any():
            continue  # a member never arrived: the hang's diagnosis says why
        last = max(members, key=lambda i: float(events["start"][i]))
        arrived = float(events["start"][last])
        for i in members:
            blocker = waited_in[i]
            if i == last or blocker < 0 or events["start"][blocker] >= arrived:
                continue
            waiting = events[blocker]
            lost = min(arrived, float(waiting["end"])) - float(waiting["start"])
            barrier = str(events["op"][i]).lower() in ("barrier", "ibarrier")
            kind = "wait at barrier" if barrier else "wait at collective"
            found.append(_wait(kind, waiting, events[last], lost))
    return found


def _lock(events) -> list[Wait]:
    """Each wait for a window's lock (in ``Lock``, or in the first call of its epoch that lasted
    when the MPI granted it lazily), told as a wait for the rank whose conflicting hold it
    overlapped and released last before the grant."""
    holds_of: dict[tuple, list[tuple[int, int, int]]] = {}  # (window, target) -> its holds
    for hold in lock_holds(events):
        lock = hold[0]
        holds_of.setdefault((events["comm"][lock], events["peer_world"][lock]), []).append(hold)
    found: list[Wait] = []
    for holds in holds_of.values():
        for lock, granted, _ in holds:
            waiting = events[granted]
            if not waiting["open"] and waiting["end"] - waiting["start"] >= SMALLEST_WAIT:
                found += _waited_for_hold(events, lock, waiting, holds)
    return found


def _waited_for_hold(events, lock: int, waiting, holds: list[tuple[int, int, int]]) -> list[Wait]:
    """The wait of a lock's grant for the conflicting hold (of the same target) whose ``Unlock``
    began last before the grant. The ``Unlock``'s start, not its end, bounds the release: a
    holder descheduled on a busy machine may return from ``Unlock`` after the waiter was granted."""
    best, released = None, -np.inf
    granted = float(waiting["end"])
    for other, other_granted, release in holds:
        holder = events[other]
        if holder["rank"] == events["rank"][lock] or not (holder["tag"] or events["tag"][lock]):
            continue  # (two shared locks do not exclude each other)
        began = float(events["start"][release]) if release >= 0 else np.inf
        if events["end"][other_granted] <= granted and began < granted and began > released:
            if release < 0 or events["end"][release] > waiting["start"]:
                best, released = holder, began
    if best is None:
        return []
    return [_wait("lock held", waiting, best, granted - float(waiting["start"]))]


def _late_post(events) -> list[Wait]:
    """Each ``Win.Start`` or ``Win.Complete`` that lasted while another member of its window
    posted only after it began: it waited for the latest such ``Win.Post`` (MPI lets either call
    wait for the targets' posts)."""
    found: list[Wait] = []
    is_epoch = events["kind"] == EPOCH
    posts: dict[str, list[int]] = {}  # window -> its Win.Posts
    for p in np.flatnonzero(is_epoch & (events["op"] == "Win.Post")).tolist():
        posts.setdefault(events["comm"][p], []).append(p)
    if not posts:
        return found
    for i in np.flatnonzero(is_epoch & np.isin(events["op"], ("Win.Start", "Win.Complete"))).tolist():
        waiting = events[i]
        if waiting["open"] or waiting["end"] - waiting["start"] < SMALLEST_WAIT:
            continue
        late = [p for p in posts.get(waiting["comm"], ()) if events["rank"][p] != waiting["rank"]
                and waiting["start"] < events["start"][p] <= waiting["end"]]
        if late:
            post = events[max(late, key=lambda p: float(events["start"][p]))]
            found.append(_wait("late post", waiting, post, float(post["start"]) - float(waiting["start"])))
    return found


def _wait(kind: str, waiting, awaited, lost: float) -> Wait:
    return {"kind": kind, "rank": int(waiting["rank"]), "peer": int(awaited["rank"]), "op": str(waiting["op"]),
            "file": str(waiting["file"]), "line": int(waiting["line"]), "peer_op": str(awaited["op"]),
            "peer_line": int(awaited["line"]), "start": float(waiting["start"]), "seconds": max(lost, 0.0)}


# Waits worth a sentence: shorter ones are listed by waits() but not explained.
WORTH_SAYING = 1e-3


def explain(found: list[Wait], top: int = 3) -> list[str]:
    """The biggest losses (of a millisecond or more) in plain words."""
    lines = []
    for w in [w for w in found if w["seconds"] >= WORTH_SAYING][:top]:
        where = say("{op} (line {line})", op=w["op"], line=w["line"])
        lost = _seconds(w["seconds"])
        peer = {"peer": w["peer"], "peer_op": w["peer_op"], "peer_line": w["peer_line"]}
        if w["kind"] == "late sender":
            why = say("for rank {peer}, which sent only {lost} later ({peer_op}, line {peer_line})", lost=lost, **peer)
        elif w["kind"] == "lock held":
            why = say("for rank {peer}, which held the window's lock since line {peer_line} ({peer_op})", **peer)
        elif w["kind"] == "late post":
            why = say("for rank {peer}, which exposed its window only {lost} later ({peer_op}, line {peer_line})",
                      lost=lost, **peer)
        elif w["kind"] == "late receiver":
            why = say("for rank {peer} to post its receive ({peer_op}, line {peer_line})", **peer)
        else:
            why = say("for rank {peer}, the last to arrive ({peer_op}, line {peer_line}): load imbalance", **peer)
        lines.append(say("rank {rank} waited {lost} in {where} {why}", rank=w["rank"], lost=lost, where=where,
                         why=why))
    return lines


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1e3:.1f} ms"


def waiting_per_rank(found: list[Wait], ranks: list[int]) -> dict[int, float]:
    totals = dict.fromkeys(ranks, 0.0)
    for w in found:
        totals[w["rank"]] = totals.get(w["rank"], 0.0) + w["seconds"]
    return totals
