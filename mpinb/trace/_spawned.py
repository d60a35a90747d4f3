"""Lanes for processes spawned during a run, after the pool's ranks.

A spawn's root brings its children's recordings (``"spawned"``, see ``mpinb.rank.mpi._spawn``), each
under a provisional lane (``PROVISIONAL * (root + 1) + PER_SPAWN * k + child``). Here they become
lanes ``world_size``, ``world_size + 1``... in that order, and every list of world ranks in every
recording (communicators' members, intercommunicators' remote groups, neighbours) says lanes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from .._language import say
from ..common._events import PER_SPAWN, PROVISIONAL
from ..common._protocol import Recording


class Spawned(TypedDict):
    """Who a spawned process's lane is: the spawn's root (a world rank), which of its spawns,
    and the process's rank among its spawn's."""

    root: int
    spawn: int
    rank: int


def with_spawned(per_rank: Mapping[int, Recording], world_size: int) -> tuple[dict[int, Recording], dict[int, Spawned]]:
    """``per_rank`` with a recording per spawned process, under its lane; who each lane is."""
    children: dict[int, Recording] = {}
    for data in per_rank.values():
        children.update(data.get("spawned", {}))
    if not children:
        return dict(per_rank), {}
    lane_of = {provisional: world_size + i for i, provisional in enumerate(sorted(children))}

    def lanes(ranks: list[int]) -> list[int]:
        return [lane_of.get(rank, rank) for rank in ranks]

    renumbered: dict[int, Recording] = {}
    for rank, data in [*per_rank.items(), *((lane_of[p], child) for p, child in children.items())]:
        data = {**data, "comms": {cid: lanes(members) for cid, members in data["comms"].items()}}
        for key in ("remote", "neighbors"):
            if key in data:
                data[key] = {cid: lanes(ranks) for cid, ranks in data[key].items()}
        data.pop("spawned", None)
        renumbered[rank] = data
    who = {lane: Spawned(root=p // PROVISIONAL - 1, spawn=p % PROVISIONAL // PER_SPAWN, rank=p % PER_SPAWN)
           for p, lane in lane_of.items()}
    return renumbered, who


def lane_names(ranks: list[int], spawned: Mapping[int, Spawned]) -> list[str]:
    """A label per lane: ``rank 2`` for the pool's, ``child 1`` for the processes of the run's one
    spawn, ``child 0.1`` (the spawn's number in the run, the child's rank) when there were more."""
    spawns = sorted({(who["root"], who["spawn"]) for who in spawned.values()})
    names = []
    for rank in ranks:
        who = spawned.get(rank)
        if who is None:
            names.append(f"rank {rank}")
        elif len(spawns) == 1:
            names.append(say("child {n}", n=who["rank"]))
        else:
            names.append(say("child {n}", n=f"{spawns.index((who['root'], who['spawn']))}.{who['rank']}"))
    return names
