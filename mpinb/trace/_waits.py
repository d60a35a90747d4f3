"""Wait states: where ranks lost time waiting for each other, and why (the patterns that Scalasca
and Vampir name), computed from a trace's events and matched messages.

- late sender: a blocking receive started before its message was sent, and waited for it;
- late receiver: a blocking send could not complete before its receive was posted (a synchronous
  or large message), and waited for it;
- wait at collective (or at barrier): a rank entered a collective before the last member did.

Nonblocking calls are left out for now: the time between posting and waiting is the user's, and
only the wait call itself waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from ._trace import Trace

# Shorter waits are noise (a message in flight, clocks aligned to a few microseconds).
SMALLEST_WAIT = 1e-4


class Wait(TypedDict):
    kind: str  # "late sender", "late receiver", "wait at collective", "wait at barrier"
    rank: int  # the rank that waited
    peer: int  # the rank it waited for (the sender, the receiver, the last to arrive)
    op: str  # the call that waited
    file: str
    line: int
    peer_op: str  # what the peer was late to call
    peer_line: int
    start: float  # when the waiting began (seconds on the trace's clock)
    seconds: float


def waits(trace: Trace) -> list[Wait]:
    """Every wait state of the trace, the longest first."""
    found = _point_to_point(trace) + _collective(trace)
    return sorted((w for w in found if w["seconds"] >= SMALLEST_WAIT), key=lambda w: -w["seconds"])


def _blocking(event) -> bool:
    return float(event["end"]) == float(event["returned"])


def _point_to_point(trace: Trace) -> list[Wait]:
    from ._trace import message_halves

    events = trace.events
    found: list[Wait] = []
    for pair in message_halves(events).values():
        send, recv = events[pair["send"]], events[pair["recv"]]
        if _blocking(recv) and recv["start"] < send["start"]:
            lost = min(float(send["start"]), float(recv["end"])) - float(recv["start"])
            found.append(_wait("late sender", recv, send, lost))
        if _blocking(send) and send["start"] < recv["start"] <= send["end"]:
            lost = float(recv["start"]) - float(send["start"])
            found.append(_wait("late receiver", send, recv, lost))
    return found


def _collective(trace: Trace) -> list[Wait]:
    from ._trace import collective_groups

    events = trace.events
    found: list[Wait] = []
    for members in collective_groups(events).values():
        if len(members) < 2:
            continue
        last = max(members, key=lambda i: float(events["start"][i]))
        arrived = float(events["start"][last])
        for i in members:
            if i == last or not _blocking(events[i]):
                continue
            lost = min(arrived, float(events["end"][i])) - float(events["start"][i])
            barrier = str(events["op"][i]).lower() in ("barrier", "ibarrier")
            kind = "wait at barrier" if barrier else "wait at collective"
            found.append(_wait(kind, events[i], events[last], lost))
    return found


def _wait(kind: str, waiting, awaited, lost: float) -> Wait:
    return {"kind": kind, "rank": int(waiting["rank"]), "peer": int(awaited["rank"]), "op": str(waiting["op"]),
            "file": str(waiting["file"]), "line": int(waiting["line"]), "peer_op": str(awaited["op"]),
            "peer_line": int(awaited["line"]), "start": float(waiting["start"]), "seconds": max(lost, 0.0)}


def explain(found: list[Wait], top: int = 3) -> list[str]:
    """The biggest losses in plain words."""
    lines = []
    for w in found[:top]:
        where = f"{w['op']} (line {w['line']})"
        if w["kind"] == "late sender":
            why = (f"for rank {w['peer']}, which sent only {w['seconds']:.2f} s later "
                   f"({w['peer_op']}, line {w['peer_line']})")
        elif w["kind"] == "late receiver":
            why = f"for rank {w['peer']} to post its receive ({w['peer_op']}, line {w['peer_line']})"
        else:
            why = f"for rank {w['peer']}, the last to arrive ({w['peer_op']}, line {w['peer_line']}): load imbalance"
        lines.append(f"rank {w['rank']} waited {w['seconds']:.2f} s in {where} {why}")
    return lines


def waiting_per_rank(found: list[Wait], ranks: list[int]) -> dict[int, float]:
    totals = dict.fromkeys(ranks, 0.0)
    for w in found:
        totals[w["rank"]] = totals.get(w["rank"], 0.0) + w["seconds"]
    return totals
