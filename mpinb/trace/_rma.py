"""One-sided communication in a trace.

Each ``Put``, ``Get`` or ``Accumulate`` becomes a transfer between origin and target inside its
epoch, and the time ranks lost waiting for a window's lock is measured.

An RMA call only starts a transfer; MPI completes it when the origin closes the epoch: at the
next ``Fence`` (then the data is at the target when the target's ``Fence`` returns), at
``Unlock``/``Flush`` of that target (passive target: the target calls nothing), or at
``Win.Complete`` (post/start/complete/wait). So a transfer is drawn from the call on the origin
to the moment its epoch closed on the target's side.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from ..common._events import COLLECTIVE, EPOCH, RMA

# Calls after which an origin's transfers to a target are complete there (with the target, or all).
_CLOSERS = {"Fence": False, "Unlock": True, "Flush": True, "Unlock_all": False, "Flush_all": False,
            "Win.Complete": False, "Win.Free": False}
# Data calls whose data flows back from the target (they also send: both directions are told).
_FETCHING = ("Get", "Rget", "Get_accumulate", "Rget_accumulate", "Fetch_and_op", "Compare_and_swap")


class Transfer(TypedDict):
    op: str
    window: str
    origin: int  # world ranks
    target: int
    source: int  # where the bytes come from: the origin, or the target for what a Get fetches
    dest: int
    disp: int  # the target displacement (in the window's displacement units)
    bytes: int
    epoch: int  # the origin's epoch on this window, counted from 0 in this run
    start: float  # the call on the origin
    end: float  # when its epoch closed where the data went (the start's end if it never closed)
    index: int  # rows of the events: the call,
    closer: int  # and the call that closed its epoch (-1: none did)


def transfers(events: np.ndarray, groups: dict[tuple, list[int]]) -> list[Transfer]:
    """Every one-sided transfer of the trace, in the order the calls began."""
    data_calls = np.flatnonzero(events["kind"] == RMA)
    if not len(data_calls):
        return []
    fence_group: dict[int, list[int]] = {}
    for members in groups.values():
        if events["op"][members[0]] == "Fence":
            for i in members:
                fence_group[i] = members
    closers: dict[tuple[int, str], list[int]] = {}  # (origin, window) -> its closing calls, in order
    closing = np.flatnonzero(np.isin(events["kind"], (COLLECTIVE, EPOCH)))
    for i in closing.tolist():
        if events["op"][i] in _CLOSERS:
            closers.setdefault((int(events["rank"][i]), events["comm"][i]), []).append(i)
    closing_for: dict[tuple, tuple[list[int], np.ndarray]] = {}  # (origin, window, target) -> its closers, starts
    found: list[Transfer] = []
    for i in data_calls.tolist():
        event = events[i]
        rank, window, target = int(event["rank"]), event["comm"], int(event["peer_world"])
        key = (rank, window, target)
        if key not in closing_for:  # the calls that close an epoch to this target: any Fence, its Unlock...
            mine = [c for c in closers.get((rank, window), ())
                    if not _CLOSERS[events["op"][c]] or events["peer_world"][c] == target]
            closing_for[key] = mine, events["start"][mine]
        mine, starts = closing_for[key]
        epoch = int(np.searchsorted(starts, event["start"], side="right"))  # epochs this origin closed before
        closer = mine[epoch] if epoch < len(mine) else -1
        end = float(event["end"])
        if closer >= 0:
            at_target = [m for m in fence_group.get(closer, ()) if events["rank"][m] == target]
            closer = at_target[0] if at_target else closer
            end = max(float(events["end"][closer]), end)
        common = {"op": str(event["op"]), "window": str(window), "origin": rank, "target": target,
                  "disp": int(event["tag"]), "epoch": epoch, "start": float(event["start"]), "end": end,
                  "index": i, "closer": closer}
        if event["sent"] or event["op"] not in _FETCHING:
            found.append({**common, "source": rank, "dest": target, "bytes": int(event["sent"])})  # type: ignore[typeddict-item]
        if event["op"] in _FETCHING:
            found.append({**common, "source": target, "dest": rank, "bytes": int(event["received"])})  # type: ignore[typeddict-item]
    return found


def lock_holds(events: np.ndarray) -> list[tuple[int, int, int]]:
    """``(lock, granted, unlock)`` rows of each ``Lock``: the call in which the rank waited for the
    lock to be granted, and the ``Unlock`` that released it (the same rank, window and target;
    ``unlock`` -1 when the run ended first).

    MPI lets ``Lock`` return at once and acquire the lock lazily, in the epoch's first data call,
    ``Flush`` or the ``Unlock`` (Intel MPI and MPICH may, by load). A ``Lock`` is taken as granted
    when it returned, unless that was while an earlier conflicting hold of the target lasted: then
    it was granted in the first call of its epoch that outlasted the start of that hold's
    ``Unlock``."""
    is_epoch = events["kind"] == EPOCH
    unlocks: dict[tuple, list[int]] = {}  # (rank, window, target) -> its Unlocks, in order
    for u in np.flatnonzero(is_epoch & (events["op"] == "Unlock")).tolist():
        unlocks.setdefault((events["rank"][u], events["comm"][u], events["peer"][u]), []).append(u)
    starts = {key: events["start"][mine] for key, mine in unlocks.items()}  # (sorted: the trace is)
    lasted = events["end"] - events["start"] >= _LASTING
    holds: list[tuple[int, int, int]] = []
    held: dict[tuple, list[tuple[int, int, int]]] = {}  # (window, target) -> its holds so far
    for i in np.flatnonzero(is_epoch & (events["op"] == "Lock")).tolist():
        rank, window, target = events["rank"][i], events["comm"][i], events["peer"][i]
        mine = unlocks.get((rank, window, target), [])
        k = int(np.searchsorted(starts[(rank, window, target)], events["start"][i])) if mine else 0
        release = mine[k] if k < len(mine) else -1
        granted = i
        if not lasted[i] and release >= 0:
            returned = events["end"][i]
            blocking = [events["start"][other_release] if other_release >= 0 else np.inf
                        for other, other_granted, other_release
                        in held.get((window, target), ())
                        if events["rank"][other] != rank and (events["tag"][other] or events["tag"][i])
                        and events["end"][other_granted] <= returned
                        and (other_release < 0 or events["end"][other_release] > returned)]
            if blocking:
                inside = np.flatnonzero((events["rank"] == rank) & (events["comm"] == window) & lasted
                                        & (events["start"] > events["start"][i])
                                        & (events["start"] <= events["start"][release])
                                        & (events["end"] >= max(blocking)))
                granted = int(inside[0]) if len(inside) else i
        holds.append((i, granted, release))
        held.setdefault((window, target), []).append((i, granted, release))
    return holds


# A call shorter than this did not wait for a lock (the cost of a call, not a wait).
_LASTING = 1e-4


class LockEpoch(TypedDict):
    window: str
    holder: int  # world ranks
    target: int
    exclusive: bool
    start: float  # the lock was granted
    end: float  # the Unlock returned (the run's end for a lock never released)


def lock_epochs(events: np.ndarray) -> list[LockEpoch]:
    """Each passive-target epoch: from the ``Lock`` granted to the ``Unlock`` (drawn on the
    target's lane, which takes no part in it)."""
    found: list[LockEpoch] = []
    for lock, granted, release in lock_holds(events):
        held = events[lock]
        if held["peer_world"] < 0:
            continue
        end = float(events["end"][release]) if release >= 0 else float(events["end"].max())
        found.append({"window": str(held["comm"]), "holder": int(held["rank"]), "target": int(held["peer_world"]),
                      "exclusive": bool(held["tag"] == 1), "start": float(events["end"][granted]), "end": end})
    return found
