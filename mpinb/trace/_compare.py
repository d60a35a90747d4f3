"""Two runs side by side (before and after an optimisation): per rank and per operation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._arrays import busy_until
from ._trace import Trace

_RANK_MEASURES = ("wall", "mpi", "compute", "waiting")
RANK_ROWS = 8  # rows() shows at most this many ranks: those whose time changed most


@dataclass
class Comparison:
    """``a`` and ``b`` under the names ``labels``; ``per_rank()`` and ``per_op()`` give the
    differences as rows, ``text()`` as a table."""

    a: Trace
    b: Trace
    labels: tuple[str, str] = ("before", "after")

    def wall(self) -> tuple[float, float]:
        """Each run's wall time: its first rank's start to its last rank's end."""
        return _wall(self.a), _wall(self.b)

    def per_rank(self) -> list[dict]:
        """Per rank of either run: wall, in MPI, computing and waiting seconds in each run
        (``wall_a``, ``wall_b``, ...); a rank that only one run had is 0 in the other."""
        rows_a = {row["rank"]: row for row in self.a.summary()}
        rows_b = {row["rank"]: row for row in self.b.summary()}
        rows = []
        for rank in sorted(set(rows_a) | set(rows_b)):
            row: dict = {"rank": rank}
            for measure in _RANK_MEASURES:
                row[f"{measure}_a"] = rows_a.get(rank, {}).get(measure, 0.0)
                row[f"{measure}_b"] = rows_b.get(rank, {}).get(measure, 0.0)
            rows.append(row)
        return rows

    def per_op(self) -> list[dict]:
        """Per operation: calls, seconds inside it (all ranks together) and bytes in each run,
        the biggest change of time first."""
        ops_a, ops_b = _per_op(self.a), _per_op(self.b)
        rows = []
        for op in set(ops_a) | set(ops_b):
            calls_a, seconds_a, bytes_a = ops_a.get(op, (0, 0.0, 0))
            calls_b, seconds_b, bytes_b = ops_b.get(op, (0, 0.0, 0))
            rows.append({"op": op, "calls_a": calls_a, "calls_b": calls_b, "seconds_a": seconds_a,
                         "seconds_b": seconds_b, "bytes_a": bytes_a, "bytes_b": bytes_b})
        return sorted(rows, key=lambda row: (-abs(row["seconds_b"] - row["seconds_a"]), row["op"]))

    def rows(self) -> list[tuple[str, float, float]]:
        """``(what, seconds in a, seconds in b)``: the wall time, each rank's wall and waiting
        time (at most ``RANK_ROWS`` ranks, those that changed most), each operation's time (all
        ranks together)."""
        rows = [("wall time", *self.wall())]
        ranks = self.per_rank()
        if len(ranks) > RANK_ROWS:  # many ranks: those that changed most
            ranks = sorted(ranks, key=lambda r: -abs(r["wall_b"] - r["wall_a"]) - abs(r["waiting_b"] - r["waiting_a"]))
            ranks = sorted(ranks[:RANK_ROWS], key=lambda r: r["rank"])
        for row in ranks:
            rows.append((f"rank {row['rank']} wall", row["wall_a"], row["wall_b"]))
            rows.append((f"rank {row['rank']} waiting", row["waiting_a"], row["waiting_b"]))
        for row in self.per_op():
            calls = f"{row['calls_a']}\u2192{row['calls_b']} calls"
            rows.append((f"{row['op']} ({calls})", row["seconds_a"], row["seconds_b"]))
        return rows

    def text(self) -> str:
        rows = self.rows()
        width = max(len(what) for what, _, _ in rows) + 2
        lines = [f"{'':{width}}{self.labels[0]:>12}{self.labels[1]:>12}{'change':>20}"]
        lines += [f"{what:{width}}{seconds(a):>12}{seconds(b):>12}{change(a, b):>20}" for what, a, b in rows]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def _wall(trace: Trace) -> float:
    if not trace.span:
        return 0.0
    return max(end for _, end in trace.span.values()) - min(start for start, _ in trace.span.values())


def _per_op(trace: Trace) -> dict[str, tuple[int, float, int]]:
    events = trace.events
    held = busy_until(events) - events["start"]
    moved = np.maximum(events["sent"], events["received"])
    found = {}
    for op in set(events["op"]):
        mine = events["op"] == op
        found[str(op)] = (int(mine.sum()), float(held[mine].sum()), int(moved[mine].sum()))
    return found


def seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1e3:.1f} ms"


def change(a: float, b: float) -> str:
    """``-307.0 ms (-75%)``; ``=`` below a tenth of a millisecond."""
    if abs(b - a) < 5e-5:
        return "="
    sign = "+" if b > a else "-"
    share = f" ({sign}{abs(b - a) / a:.0%})" if a > 0 else ""
    return f"{sign}{seconds(abs(b - a))}{share}"
