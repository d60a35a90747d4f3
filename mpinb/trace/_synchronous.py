"""Whether the run would still finish if no MPI call relied on buffering.

It replays a complete trace in which every standard send completes only once its receive is posted
(as ``Ssend`` does, and as every MPI's sends do beyond their eager limit) and every collective only
once all members have joined it (MPI lets a correct program rely on neither).

Each rank replays its calls in program order, one step per call (a ``Sendrecv``'s two halves are
one step); a step completes once what it needs has been posted by the other ranks:

- a blocking send (``Send``, ``send``, ``Ssend``, ``Rsend``; not ``Bsend``): its receive;
- a blocking receive: its send (as in the real run);
- a blocking collective: every member's call of it;
- a wait: for each request it saw complete, what that request's call needs.

Only what the trace knows is needed: a message with no known half, a collective not traced on
every member, a probe, a test: none of them holds a step. So a rank left behind holds only
through a chain of sends or collectives that completed early: a deadlock the run escaped by luck.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict, deque

import numpy as np

from ..common._events import COLLECTIVE, LOCAL_DERIVING_CALLS, PROBE, RECV, SEND, WAIT

BUFFERED_SENDS = frozenset({"Bsend", "bsend", "Ibsend", "ibsend"})


def nonblocking(op: str) -> bool:
    """Whether the call ``op`` only starts its operation (a request completes it)."""
    return op[:1] in ("I", "i") and op[1:2] != "p" and op[1:3] != "mp"  # (Iprobe, Improbe: probes)


def stalled(events: np.ndarray, comms: dict[str, list[int]], halves: dict[int, dict[str, int]],
            groups: dict[tuple, list[int]]) -> list[int]:
    """Indices of the calls at which ranks would wait forever if nothing were buffered, one per
    rank left behind; empty if the run finishes that way too. ``halves``: the matched messages'
    send and receive (``_arrays.message_halves``); ``groups``: the collectives' calls
    (``_arrays.collective_groups``)."""
    ranks, kinds, ops = events["rank"].tolist(), events["kind"].tolist(), events["op"].tolist()
    starts = events["start"].tolist()
    steps: dict[int, list[list[int]]] = defaultdict(list)
    step_of = [0] * len(events)
    for i, rank in enumerate(ranks):
        mine = steps[rank]
        if mine and _same_call(starts, ops, kinds, mine[-1][0], i):
            mine[-1].append(i)
        else:
            mine.append([i])
        step_of[i] = len(mine) - 1
    partner = [-1] * len(events)
    for pair in halves.values():
        partner[pair["send"]], partner[pair["recv"]] = pair["recv"], pair["send"]
    members_of = _collectives_held(events, comms, groups)
    completed_in = _completed_in_waits(events)

    def needs(i: int) -> list[int]:
        """The calls that must have been posted before call ``i``'s operation completes."""
        kind = kinds[i]
        if kind == SEND and ops[i] not in BUFFERED_SENDS and partner[i] >= 0:
            return [partner[i]]
        if kind == RECV and partner[i] >= 0:
            return [partner[i]]
        if kind == COLLECTIVE:
            return [j for j in members_of.get(i, ()) if j != i]
        return []

    requirements: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rank, mine in steps.items():
        for number, calls in enumerate(mine):
            needed = []
            for i in calls:
                if kinds[i] == WAIT:
                    for request in completed_in.get(i, ()):
                        needed += needs(request)
                elif kinds[i] != PROBE and not nonblocking(ops[i]):
                    needed += needs(i)
            if needed:
                requirements[rank, number] = [(ranks[j], step_of[j]) for j in needed]

    reached = dict.fromkeys(steps, 0)
    waiters: dict[int, list[int]] = defaultdict(list)
    ready = deque(steps)
    while ready:
        rank = ready.popleft()
        moved = False
        while reached[rank] < len(steps[rank]):
            unmet = next(((other, number) for other, number in requirements.get((rank, reached[rank]), ())
                          if reached[other] < number), None)
            if unmet is not None:
                waiters[unmet[0]].append(rank)
                break
            reached[rank] += 1
            moved = True
        if moved:
            ready.extend(waiters.pop(rank, ()))
    return [steps[rank][reached[rank]][0] for rank in sorted(steps) if reached[rank] < len(steps[rank])]


def _same_call(starts: list, ops: list, kinds: list, first: int, i: int) -> bool:
    """The two halves of one ``Sendrecv`` (recorded as a send and a receive with the same start)."""
    return starts[first] == starts[i] and ops[first] == ops[i] and {kinds[first], kinds[i]} == {SEND, RECV}


def _collectives_held(events: np.ndarray, comms: dict[str, list[int]],
                      groups: dict[tuple, list[int]]) -> dict[int, list[int]]:
    """Per blocking collective call, every member's call of that collective (where all are known)."""
    members_of: dict[int, list[int]] = {}
    ops = events["op"]
    # Create_group is collective over the new group only: on its parent, the members' k-th
    # collective calls are then not one operation, and the parent's collectives hold nothing.
    uneven = {str(events["comm"][i]) for i in np.flatnonzero(np.isin(ops, LOCAL_DERIVING_CALLS))}
    for (comm, _), group in groups.items():
        members = comms.get(comm)
        if (members is not None and comm not in uneven and len(group) == len(members)
                and len({ops[i] for i in group}) == 1):
            for i in group:
                members_of[i] = group
    return members_of


def _completed_in_waits(events: np.ndarray) -> dict[int, list[int]]:
    """Per wait call, the requests that it saw complete (their end falls within it, on its rank)."""
    found: dict[int, list[int]] = {}
    ops, kinds, pending = events["op"].tolist(), events["kind"].tolist(), events["pending"].tolist()
    starts, ends = events["start"].tolist(), events["end"].tolist()
    requests_of: dict[int, list[int]] = defaultdict(list)
    waits_of: dict[int, list[int]] = defaultdict(list)
    for i, rank in enumerate(events["rank"].tolist()):
        if kinds[i] == WAIT:
            waits_of[rank].append(i)
        elif not pending[i] and nonblocking(ops[i]):
            requests_of[rank].append(i)
    for rank, waits in waits_of.items():
        requests = sorted(requests_of.get(rank, ()), key=ends.__getitem__)
        done_at = [ends[i] for i in requests]
        for w in waits:
            low, high = bisect_left(done_at, starts[w]), bisect_right(done_at, ends[w])
            if high > low:
                found[w] = requests[low:high]
    return found
