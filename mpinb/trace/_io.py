"""MPI-IO in a trace: each read or write between a rank and a file, for the file's own lane.

An I/O call is recorded on its rank (kind ``io`` for independent calls; collectives such as
``Write_at_all`` over the file's group); here each one that moved bytes becomes a transfer
between the rank and the file: a write from the rank's call to the file, a read from the file
to the rank, over the call's span.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from ..common._events import COLLECTIVE, IO


class IoCall(TypedDict):
    file: str  # the file's id (``file0@world``)
    name: str  # its name as opened ("" if it was opened before the recording began)
    rank: int
    op: str
    offset: int  # the explicit offset (-1: the file pointer's)
    bytes: int
    write: bool
    start: float
    end: float
    index: int  # the call's row of the events


def io_calls(events: np.ndarray, names: dict[str, str]) -> list[IoCall]:
    """Every read or write that moved bytes, in the order the calls began."""
    moved = events["sent"] + events["received"] > 0
    files = [comm for comm in set(events["comm"][moved].tolist()) if str(comm).startswith("file")]
    rows = np.flatnonzero(moved & np.isin(events["comm"], files) & np.isin(events["kind"], (IO, COLLECTIVE)))
    return [{"file": str(events["comm"][i]), "name": names.get(str(events["comm"][i]), ""),
             "rank": int(events["rank"][i]), "op": str(events["op"][i]), "offset": int(events["tag"][i]),
             "bytes": int(max(events["sent"][i], events["received"][i])), "write": bool(events["sent"][i] > 0),
             "start": float(events["start"][i]), "end": float(events["end"][i]), "index": int(i)}
            for i in rows.tolist()]
