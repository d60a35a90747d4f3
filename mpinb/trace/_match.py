"""Pairs each send with the receive that got it.

MPI matches a message to the earliest-posted receive that accepts it, and messages between two
ranks on one communicator with one tag never overtake each other. So within each channel
(communicator, source, destination, tag) the k-th send posted is received by the k-th receive
posted among those that ended up on that channel, wildcards (``ANY_SOURCE``/``ANY_TAG``) included,
since a receive's channel is known from its status once it completed.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..common._events import RECV, SEND


def match_messages(events: np.ndarray) -> np.ndarray:
    """Message ids (``-1`` for unmatched) aligned with ``events``; both halves get the same id."""
    ids = np.full(len(events), -1, dtype=np.int64)
    sends: dict[tuple, list[int]] = defaultdict(list)
    recvs: dict[tuple, list[int]] = defaultdict(list)
    order = np.argsort(events["start"], kind="stable")
    for i in order:
        event = events[i]
        if event["open"]:  # broken off: it never took part in a message
            continue
        if event["kind"] == SEND and event["peer_world"] >= 0:
            sends[(event["comm"], event["rank"], event["peer_world"], event["tag"])].append(i)
        elif event["kind"] == RECV and event["peer_world"] >= 0:
            recvs[(event["comm"], event["peer_world"], event["rank"], event["tag"])].append(i)
    next_id = 0
    for channel in sorted(sends, key=str):
        for send, recv in zip(sends[channel], recvs.get(channel, ())):
            ids[send] = ids[recv] = next_id
            next_id += 1
    return ids
