"""Helpers over the events array that every view of a trace needs.

They give which two events are one message's halves, which calls are one collective, when a call
stopped holding its rank, and the clock corrections that keep messages from arriving before they
left.

A leaf: numpy and the event schema only, so ``Trace`` and each view (waits, critical path, SVG,
Chrome trace, widgets) import it without importing each other.
"""

from __future__ import annotations

import numpy as np

from ..common._events import COLLECTIVE, RECV, SEND, WAIT


def message_halves(events: np.ndarray) -> dict[int, dict[str, int]]:
    """Per matched message id, the indices of its ``"send"`` and ``"recv"`` events."""
    halves: dict[int, dict[str, int]] = {}
    matched = np.flatnonzero(events["msg"] >= 0)
    for i, msg, kind in zip(matched.tolist(), events["msg"][matched].tolist(), events["kind"][matched].tolist()):
        halves.setdefault(msg, {})["send" if kind == SEND else "recv"] = i
    return {msg: pair for msg, pair in halves.items() if len(pair) == 2}


def collective_groups(events: np.ndarray) -> dict[tuple, list[int]]:
    """``(comm, k)`` -> indices of each member's call: members of a communicator call its
    collectives in the same order, so the k-th collective call of each is the same operation."""
    groups: dict[tuple, list[int]] = {}
    seen: dict[tuple, int] = {}
    for index in np.nonzero(events["kind"] == COLLECTIVE)[0]:
        key = (int(events["rank"][index]), events["comm"][index])
        k = seen.get(key, 0)
        seen[key] = k + 1
        groups.setdefault((events["comm"][index], k), []).append(int(index))
    return groups


def causal_delays(events: np.ndarray) -> dict[int, float]:
    """Per rank, the least delay of its clock such that no message arrives before it was sent.

    Each rank's clock is put on rank 0's by an estimated offset (ping-pongs at start-up); the
    estimate can err by more than a short message takes, which would draw a message arriving
    before it left. Every matched message asks ``delay[dest] - delay[source] >= send_start -
    recv_end``: the least delays solve these difference constraints as longest paths (Bellman-Ford;
    around any cycle of messages the offsets cancel, so there is no positive cycle). Ranks whose
    messages already agree keep their clock.
    """
    sends = events[(events["kind"] == SEND) & (events["msg"] >= 0)]
    recvs = events[(events["kind"] == RECV) & (events["msg"] >= 0)]
    sends, recvs = sends[np.argsort(sends["msg"])], recvs[np.argsort(recvs["msg"])]  # ids pair them
    late = sends["start"] - recvs["end"]
    across = sends["rank"] != recvs["rank"]
    pair = sends["rank"][across].astype(np.int64) << 32 | recvs["rank"][across].astype(np.int64)
    late = late[across]
    if not len(pair):
        return {}
    order = np.lexsort((late, pair))  # by pair, the latest last: the one constraint that binds
    last = np.r_[pair[order][1:] != pair[order][:-1], True]
    needs = {(int(key >> 32), int(key & 0xFFFFFFFF)): float(need)
             for key, need in zip(pair[order][last], late[order][last])}
    if not any(need > 0 for need in needs.values()):
        return {}  # every message already arrives after it left: nothing moves
    delay: dict[int, float] = {}
    for _ in range(len({rank for ends in needs for rank in ends}) + 1):
        changed = False
        for (source, dest), need in needs.items():
            wanted = delay.get(source, 0.0) + need
            if wanted > delay.get(dest, 0.0) + 1e-12:
                delay[dest] = wanted
                changed = True
        if not changed:
            break
    return {rank: value for rank, value in delay.items() if value > 0}


def busy_until(events: np.ndarray) -> np.ndarray:
    """When each call stopped holding its rank: a wait when its operation completed, every other
    call when it returned (a blocking call returns when it completes, a nonblocking one at once)."""
    return np.where(events["kind"] == WAIT, events["end"], events["returned"])


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by intervals (sendrecv logs two events over one interval)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts)
    total, current_start, current_end = 0.0, starts[order[0]], ends[order[0]]
    for i in order[1:]:
        if starts[i] > current_end:
            total += current_end - current_start
            current_start, current_end = starts[i], ends[i]
        else:
            current_end = max(current_end, ends[i])
    return float(total + current_end - current_start)
