"""``Trace``: the MPI calls of one run, from every rank, on one aligned clock."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..common._events import COLLECTIVE, FIELDS, KIND_NAMES, RECV, SEND, world_rank
from ..common._protocol import Recording
from ._arrays import busy_until, causal_delays, collective_groups, message_halves, union_length
from ._chrome import chrome_trace
from ._findings import Finding, findings
from ._io import IoCall, io_calls
from ._match import match_messages
from ._neighbors import Exchange, neighbor_exchanges
from ._path import CriticalPath, critical_path
from ._rma import LockEpoch, Transfer, lock_epochs, transfers
from ._spawned import Spawned, lane_names, with_spawned
from ._synchronous import stalled
from ._waits import Wait, waiting_per_rank, waits

MATRIX_MEASURES = ("bytes", "messages", "time")

DTYPE = np.dtype([
    ("rank", "i4"), ("op", "O"), ("kind", "i1"), ("comm", "O"), ("peer", "i4"), ("peer_world", "i4"),
    ("tag", "i4"), ("sent", "i8"), ("received", "i8"), ("start", "f8"), ("end", "f8"),
    ("returned", "f8"), ("file", "O"), ("line", "i4"), ("msg", "i8"), ("open", "?"), ("pending", "?"),
    ("checks", "O"),
])


class Trace:
    """Every recorded MPI call of a run.

    ``events`` is a numpy structured array (one row per call: rank, op, kind, comm, peer, tag,
    bytes sent/received, start/end times in seconds from the run's start, source file and line,
    and ``msg``, the id shared by a send and the receive that matched it). Times of all ranks are
    on rank 0's clock. ``dropped`` counts calls beyond each rank's buffer.

    A run that was stopped (deadlock, interrupt, a failure elsewhere) leaves each rank's broken-off
    call ``open``: it ends where the rank's recording ended, and matches no message. A nonblocking
    call that no wait or test saw complete is ``pending`` (it ends where it returned).

    A run with ``verify`` (``verified``) keeps, per call, what its rank noted for the correctness
    checks (``checks``: a tuple of ``(check, *what)``, such as ``("type", "d")``; else ``None``).
    """

    def __init__(self, per_rank: Mapping[int, Recording], world_size: int):
        self.world_size = world_size
        # processes spawned in the run, each a lane after the pool's ranks: lane -> who it is
        self.spawned: dict[int, Spawned]
        # spawned processes that had left no recording when the run ended (not drawn)
        self.spawned_running = sum(data.get("spawned_running", 0) for data in per_rank.values())
        pool = set(per_rank)
        per_rank, self.spawned = with_spawned(per_rank, world_size)
        self.lanes = world_size + len(self.spawned)
        self.ranks = sorted(per_rank)
        self.dropped = {r: data["dropped"] for r, data in per_rank.items() if data["dropped"]}
        self.comms: dict[str, list[int]] = {}
        for data in per_rank.values():
            self.comms.update(data["comms"])
        # per rank, its intercommunicators' remote groups: what their peers' ranks count in
        self.remote = {r: data["remote"] for r, data in per_rank.items() if data.get("remote")}
        # each file's name as opened (file0@world -> "out.bin")
        self.file_names: dict[str, str] = {}
        for data in per_rank.values():
            self.file_names.update(data.get("files", {}))
        self.verified = bool(pool) and all("checks" in per_rank[rank] for rank in pool)
        # what each rank's run left behind (see mpinb.rank.mpi._left_behind): ranks whose run raised look for nothing
        self.left = {r: list(data.get("left", ())) for r, data in per_rank.items()}
        # per rank, a user's line -> the library line behind the calls it led to (mpi4py.futures...):
        # a call made in library code is recorded at the user's line (see mpinb.rank.mpi._calls.call_site)
        self.via = {r: data["via"] for r, data in per_rank.items() if data.get("via")}
        # per topology (Cartesian, graph), each rank's out-neighbours (world ranks)
        self.neighbors: dict[str, dict[int, list[int]]] = {}
        for r, data in per_rank.items():
            for cid, outs in data.get("neighbors", {}).items():
                self.neighbors.setdefault(cid, {})[r] = list(outs)
        origin = min(data["began"] + data["offset"] for data in per_rank.values())
        self._waits: list[Wait] | None = None
        self._messages: list[dict] | None = None
        self._transfers: list[Transfer] | None = None
        self._io: list[IoCall] | None = None
        self._exchanges: list[Exchange] | None = None
        self._path: CriticalPath | None = None
        self._halves: dict[int, dict[str, int]] | None = None
        self._groups: dict[tuple, list[int]] | None = None
        self._stalls: list[int] | None = None
        self.span = {r: (data["began"] + data["offset"] - origin, data["ended"] + data["offset"] - origin)
                     for r, data in per_rank.items()}
        rows = []
        for rank, data in per_rank.items():
            shift = data["offset"] - origin
            checks: dict[tuple, tuple] = {}
            for start, kind, *what in data.get("checks", ()):
                checks[start, kind] = (*checks.get((start, kind), ()), tuple(what))
            for event in data["events"]:
                row = self._row(rank, event, shift, data["ended"] + shift)
                rows.append((*row, checks.get((event[7], event[1])) if checks else None))
        events = np.array(rows, dtype=DTYPE) if rows else np.zeros(0, dtype=DTYPE)
        events = events[np.argsort(events["start"], kind="stable")]
        events["msg"] = match_messages(events)
        late = causal_delays(events)
        if late:  # the offsets' estimate erred by more than a message's flight: keep causality
            for rank, delay in late.items():
                mine = events["rank"] == rank
                for column in ("start", "end", "returned"):
                    events[column][mine] += delay
                began, ended = self.span[rank]
                self.span[rank] = (began + delay, ended + delay)
            events = events[np.argsort(events["start"], kind="stable")]
            events["msg"] = match_messages(events)
        self.events = events

    def _row(self, rank: int, event, shift: float, stopped: float) -> tuple:
        values = dict(zip(FIELDS, event))
        members = self.remote.get(rank, {}).get(values["comm"]) or self.comms.get(values["comm"])
        peer = values["peer"]
        peer_world = world_rank(members, peer)
        end, returned = values["end"] + shift, values["returned"] + shift
        broken_off = returned != returned
        pending = not broken_off and end != end  # a nonblocking call never seen to complete
        if broken_off:
            end = returned = max(stopped, values["start"] + shift)
        elif pending:
            end = returned
        return (rank, values["op"], values["kind"], values["comm"], peer, peer_world, values["tag"],
                values["sent"], values["received"], values["start"] + shift, end,
                returned, values["file"], values["line"], -1, broken_off, pending)

    def lane_names(self) -> list[str]:
        """A label per lane of ``ranks``: ``rank 2``, or ``child 1`` for a spawned process."""
        return lane_names(self.ranks, self.spawned)

    def __len__(self) -> int:
        return len(self.events)

    def __repr__(self) -> str:
        dropped = f", {sum(self.dropped.values())} dropped" if self.dropped else ""
        spawned = f" and {len(self.spawned)} spawned processes" if self.spawned else ""
        return f"<Trace {len(self.events)} MPI calls on {len(self.ranks) - len(self.spawned)} ranks{spawned}{dropped}>"

    # -- views of the data ----------------------------------------------------------------------

    def messages(self) -> list[dict]:
        """Matched point-to-point messages, one dict each, in the order they were sent."""
        if self._messages is None:
            self._messages = self._find_messages()
        return list(self._messages)

    def transfers(self) -> list[Transfer]:
        """One-sided (RMA) transfers, one dict each, in the order their calls began: origin,
        target, the bytes' ``source`` and ``dest``, window, displacement, epoch, and from the call
        on the origin (``start``) to when its epoch closed at the target (``end``)."""
        if self._transfers is None:
            self._transfers = transfers(self.events, self.collective_groups())
        return list(self._transfers)

    def lock_epochs(self) -> list[LockEpoch]:
        """Passive-target epochs: who held which target's lock of which window, exclusive or
        shared, from the grant to the ``Unlock``."""
        return lock_epochs(self.events)

    def io_calls(self) -> list[IoCall]:
        """Reads and writes that moved bytes between a rank and a file (one dict each: file, its
        name, rank, op, offset, bytes, ``write``, the call's span), for the file's lane."""
        if self._io is None:
            self._io = io_calls(self.events, self.file_names)
        return list(self._io)

    def neighbor_exchanges(self) -> list[Exchange]:
        """What each member of a neighbourhood collective sent each of its neighbours: one dict
        per arrow (source, dest, the source's call ``start``, the destination's call ``end``)."""
        if self._exchanges is None:
            self._exchanges = neighbor_exchanges(self.events, self.collective_groups(), self.neighbors)
        return list(self._exchanges)

    def message_halves(self) -> dict[int, dict[str, int]]:
        """Per matched message id, the indices of its ``"send"`` and ``"recv"`` events (kept)."""
        if self._halves is None:
            self._halves = message_halves(self.events)
        return self._halves

    def collective_groups(self) -> dict[tuple, list[int]]:
        """``(comm, k)`` -> each member's call of the communicator's k-th collective (kept)."""
        if self._groups is None:
            self._groups = collective_groups(self.events)
        return self._groups

    def synchronous_stalls(self) -> list[int]:
        """The calls where ranks would wait forever if no send were buffered and no collective
        ended early, one per rank (kept; see :mod:`._synchronous`)."""
        if self._stalls is None:
            self._stalls = stalled(self.events, self.comms, self.message_halves(), self.collective_groups())
        return self._stalls

    def _find_messages(self) -> list[dict]:
        events = self.events
        found = []
        for msg, halves in self.message_halves().items():
            send, recv = events[halves["send"]], events[halves["recv"]]
            found.append({
                "msg": msg, "source": int(send["rank"]), "dest": int(recv["rank"]),
                "comm": send["comm"], "tag": int(send["tag"]),
                "bytes": int(recv["received"]) or int(send["sent"]),
                "send_op": send["op"], "recv_op": recv["op"],
                "send_start": float(send["start"]), "send_end": float(send["end"]),
                "recv_start": float(recv["start"]), "recv_end": float(recv["end"]),
                "send_line": int(send["line"]), "recv_line": int(recv["line"]),
                "send_index": halves["send"], "recv_index": halves["recv"],  # rows of ``events``
            })
        return sorted(found, key=lambda m: m["send_start"])

    def collectives(self) -> list[dict]:
        """Each collective operation once, with the ranks that took part and when it ran.

        Members of a communicator call its collectives in the same order, so the k-th
        collective call of every member on one communicator is the same operation.
        """
        events = self.events
        found = []
        for (comm, k), members in self.collective_groups().items():
            first = events[members[0]]
            found.append({"comm": comm, "index": k, "op": first["op"],
                          "ranks": [int(events["rank"][i]) for i in members],
                          "start": float(events["start"][members].min()),
                          "end": float(events["end"][members].max())})
        return sorted(found, key=lambda c: c["start"])

    def matrix(self, what: str = "bytes") -> np.ndarray:
        """A lane-by-lane matrix of what went from each rank to each rank.

        ``[i, j]`` sums over the point-to-point messages rank i sent to rank j and the one-sided
        transfers whose bytes went from i to j (``Put`` from its origin, ``Get`` from its target).

        :param what: ``"bytes"``; ``"messages"``, their number; or ``"time"``, the seconds from
            each send's start to its receive's end (what the messages cost the receiver, waiting
            for a late sender included) and from each RMA call to the end of its epoch at the target.
        :raises ValueError: another measure.
        """
        if what not in MATRIX_MEASURES:
            raise ValueError(f"what must be one of {', '.join(map(repr, MATRIX_MEASURES))}, not {what!r}")
        grid = np.zeros((self.lanes, self.lanes), dtype=np.float64 if what == "time" else np.int64)
        for message in self.messages():
            if what == "time":
                value = max(message["recv_end"] - min(message["send_start"], message["recv_start"]), 0.0)
            else:
                value = message["bytes"] if what == "bytes" else 1
            grid[message["source"], message["dest"]] += value
        for transfer in self.transfers():
            if what == "time":
                value = max(transfer["end"] - transfer["start"], 0.0)
            else:
                value = transfer["bytes"] if what == "bytes" else 1
            grid[transfer["source"], transfer["dest"]] += value
        return grid

    def histograms(self) -> dict[str, dict]:
        """Per operation, how many messages of each size it sent (``"sizes"``, bins of powers of
        two in bytes) and how many of its calls took each duration (``"durations"``, seconds in
        bins of half a decade): ``{"sizes": {"edges": [...], "counts": {op: [...]}}, ...}``."""
        events = self.events
        sizes = events["sent"][(events["kind"] == SEND) & ~events["open"]]
        top = int(sizes.max()) if len(sizes) else 1
        size_edges = np.array([0, *[2.0 ** k for k in range(int(np.log2(max(top, 1))) + 2)]])
        durations = busy_until(events) - events["start"]
        longest = float(durations.max()) if len(durations) else 1e-6
        steps = int(np.ceil(2 * np.log10(max(longest, 1e-6) / 1e-6))) + 1
        time_edges = np.array([0.0, *(1e-6 * 10 ** (k / 2) for k in range(steps + 1))])
        result: dict[str, dict] = {"sizes": {"edges": size_edges.tolist(), "counts": {}},
                                   "durations": {"edges": time_edges.tolist(), "counts": {}}}
        for op in sorted(set(events["op"])):
            mine = events["op"] == op
            sent = events["sent"][mine & (events["kind"] == SEND) & ~events["open"]]
            if len(sent):
                result["sizes"]["counts"][op] = np.histogram(sent, size_edges)[0].tolist()
            result["durations"]["counts"][op] = np.histogram(durations[mine], time_edges)[0].tolist()
        return result

    def unfinished(self) -> np.ndarray:
        """The calls that a stopped run broke off (one per rank that was waiting in MPI)."""
        return self.events[self.events["open"]]

    def waits(self) -> list[Wait]:
        """Where ranks lost time waiting for each other (late senders and receivers, waits at
        collectives), the longest first; see :mod:`mpinb.trace._waits`."""
        if self._waits is None:
            self._waits = waits(self)
        return self._waits

    def critical_path(self) -> CriticalPath:
        """The chain of computing and messages that set the run's wall time, with how much of it
        each rank and each line holds; see :mod:`mpinb.trace._path`."""
        if self._path is None:  # the view, its SVG and its text summary each ask
            self._path = critical_path(self)
        return self._path

    def summary(self) -> list[dict]:
        """Per rank: wall time, time inside MPI vs computing, time lost waiting for other ranks,
        messages and bytes sent/received."""
        rows = []
        events = self.events
        waiting = waiting_per_rank(self.waits(), self.ranks)
        for rank in self.ranks:
            mine = events[events["rank"] == rank]
            began, ended = self.span[rank]
            in_mpi = union_length(mine["start"], busy_until(mine))
            p2p_sent = mine[(mine["kind"] == SEND) & (mine["msg"] >= 0)]
            p2p_recv = mine[(mine["kind"] == RECV) & (mine["msg"] >= 0)]
            rows.append({
                "rank": rank,
                "wall": ended - began,
                "mpi": in_mpi,
                "compute": max(ended - began - in_mpi, 0.0),
                "waiting": waiting[rank],
                "calls": int(len(mine)),
                "collectives": int(np.sum(mine["kind"] == COLLECTIVE)),
                "messages_sent": int(len(p2p_sent)),
                "messages_received": int(len(p2p_recv)),
                "bytes_sent": int(mine["sent"].sum()),
                "bytes_received": int(mine["received"].sum()),
            })
        return rows

    def findings(self) -> list[Finding]:
        """What the run did that works only by accident (nonblocking calls never completed,
        messages never received, communicators dropped unfreed, and with ``verify`` more), each
        with its rank, line and fix; see :mod:`._findings`."""
        return findings(self)

    def to_pandas(self):
        """The events as a ``pandas.DataFrame`` (one row per call; ``stop`` is when the call
        stopped holding its rank), for analyses of your own. Needs pandas."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Trace.to_pandas() needs pandas: pip install pandas") from None
        frame = pd.DataFrame({name: self.events[name] for name in self.events.dtype.names or ()})
        frame["kind"] = pd.Categorical.from_codes(self.events["kind"], KIND_NAMES)
        frame.insert(frame.columns.get_loc("end"), "stop", busy_until(self.events))
        return frame

    def to_chrome(self, path: str | None = None) -> dict:
        """The run in the Chrome trace event format, for Perfetto or chrome://tracing.

        One track per rank, flow arrows from each send to its receive, each wait state as a slice
        inside the call that waited, broken-off calls marked ``unfinished``.

        :param path: a file to write it to (JSON); returned either way.
        """
        document = chrome_trace(self)
        if path is not None:
            import json

            with open(path, "w") as handle:
                json.dump(document, handle)
        return document
