"""Neighbourhood collectives in a trace.

Each member's data to each of its neighbours shows as an arrow from its call to the neighbour's
(the ranks record their out-neighbours per topology)."""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from ..common._events import NEIGHBORHOOD_COLLECTIVES
from ._arrays import busy_until

NEIGHBORHOOD_OPS = frozenset({*NEIGHBORHOOD_COLLECTIVES, *("I" + name.lower() for name in NEIGHBORHOOD_COLLECTIVES)})


class Exchange(TypedDict):
    op: str
    comm: str
    source: int  # world ranks
    dest: int
    start: float  # the source's call began
    end: float  # the destination's call completed
    index: int  # rows of the events: the source's call,
    closer: int  # and the destination's


def neighbor_exchanges(events: np.ndarray, groups: dict[tuple, list[int]],
                       neighbors: dict[str, dict[int, list[int]]]) -> list[Exchange]:
    """One arrow per member and out-neighbour of every neighbourhood collective, in start order."""
    found: list[Exchange] = []
    stops = None
    for (comm, _k), members in groups.items():
        if events["op"][members[0]] not in NEIGHBORHOOD_OPS or comm not in neighbors:
            continue
        if stops is None:
            stops = busy_until(events)
        by_rank = {int(events["rank"][i]): i for i in members}
        for rank, i in by_rank.items():
            for dest in dict.fromkeys(neighbors[comm].get(rank, ())):  # (a neighbour on two sides: one arrow)
                j = by_rank.get(dest)
                if j is None:
                    continue
                found.append({"op": str(events["op"][i]), "comm": str(comm), "source": rank, "dest": dest,
                              "start": float(events["start"][i]), "end": float(stops[j]), "index": i, "closer": j})
    return sorted(found, key=lambda exchange: exchange["start"])
