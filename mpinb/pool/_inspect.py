"""An expression on every rank, side by side (DDT's cross-process comparison).

It shows one row per group of ranks with equal values, marks the ranks that differ, and for arrays
that should agree, shows which elements differ and where. Values never travel whole: each rank
sends a summary (type, shape, min, max, norm, a digest per block of the array); only the few blocks
that differ come back element by element.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._colors import BLUE, ODD, tint
from .._language import say
from ..common._ranges import format_ranks
from . import _channel

if TYPE_CHECKING:
    from ._supervisor import Supervisor

SHOWN_ELEMENTS = 8  # differing elements named per rank that differs
ASKED_BLOCKS = 4  # blocks fetched to find them


@dataclass
class Inspection:
    """``expression`` on each rank: ``summaries`` (rank -> summary), grouped by equal value in
    ``groups()``; ``differences`` says, for arrays, which elements differ from the majority."""

    expression: str
    summaries: dict[int, dict]
    failures: dict[int, str] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)

    def groups(self) -> list[tuple[list[int], dict]]:
        """Ranks with equal values together, the largest group (the reference) first."""
        by_digest: dict[str, list[int]] = {}
        for rank, summary in sorted(self.summaries.items()):
            by_digest.setdefault(summary.get("digest", f"rank{rank}"), []).append(rank)
        groups = [(ranks, self.summaries[ranks[0]]) for ranks in by_digest.values()]
        return sorted(groups, key=lambda group: (-len(group[0]), group[0][0]))

    @property
    def agree(self) -> bool:
        return len(self.groups()) == 1 and not self.failures

    def odd_ranks(self) -> list[int]:
        """The ranks whose value differs from the largest group's."""
        groups = self.groups()
        return sorted(rank for ranks, _ in groups[1:] for rank in ranks) if len(groups) > 1 else []

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(ranks, type and shape, summary, value) per group, then one row per failure."""
        out = []
        for ranks, summary in self.groups():
            kind = summary["type"]
            if "shape" in summary:
                kind += f" {tuple(summary['shape'])} {summary['dtype']}"
            stats = []
            for key in ("min", "max", "norm"):
                if summary.get(key) is not None:
                    stats.append(f"{key} {_number(summary[key])}")
            if summary.get("nans"):
                stats.append(f"{summary['nans']} NaN")
            if "size" in summary and "shape" not in summary:
                stats.append(f"len {summary['size']}")
            out.append((format_ranks(ranks, word=True), kind, ", ".join(stats), summary.get("repr", "")))
        for rank, why in sorted(self.failures.items()):
            out.append((f"rank {rank}", "", "", why))
        return out

    def text(self) -> str:
        head = say("{expr} on {n} ranks", expr=self.expression, n=len(self.summaries) + len(self.failures))
        groups = self.groups()
        if self.agree:
            head += say(": the same on every rank")
        elif len(groups) > 2 and all(len(ranks) == 1 for ranks, _ in groups):
            head += say(": a different value on every rank")
        elif len(self.odd_ranks()) == 1:
            head += say(": {ranks} differs from the others", ranks=format_ranks(self.odd_ranks(), word=True))
        elif self.odd_ranks():
            head += say(": {ranks} differ from the others", ranks=format_ranks(self.odd_ranks(), word=True))
        rows = self.rows()
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [head] + ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3]
                          for row in rows]
        return "\n".join(lines + self.differences)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        odd = set(self.odd_ranks())
        body = []
        for (ranks, kind, stats, value), group in zip(self.rows(), [*self.groups(), *[None] * len(self.failures)]):
            differs = group is None or any(rank in odd for rank in group[0])
            style = f" style='background:{tint(ODD, 0.3)}'" if differs else ""
            body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in (ranks, kind, stats))
                        + f"<td><code>{html.escape(value)}</code></td></tr>")
        differences = "".join(f"<li>{html.escape(line)}</li>" for line in self.differences)
        title = html.escape(self.text().splitlines()[0])
        return (f"<div class='mpinb-inspect'><b>{title}</b><table><tr><th>ranks</th><th>type</th><th>summary</th>"
                f"<th>value</th></tr>{''.join(body)}</table>"
                + (f"<ul>{differences}</ul>" if differences else "") + self._bars() + "</div>")

    def _bars(self) -> str:
        """A small bar chart of the value (or the norm) per rank, ranks that differ in orange."""
        values = {}
        for rank, summary in self.summaries.items():
            value = summary.get("value", summary.get("norm"))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values[rank] = float(value)
        if len(values) < 2:
            return ""
        odd = set(self.odd_ranks())
        top = max(abs(v) for v in values.values()) or 1.0
        width, height, bar = 320, 80, max(min(300 // len(values), 24), 2)
        shapes = []
        for i, (rank, value) in enumerate(sorted(values.items())):
            size = abs(value) / top * (height - 14)
            colour = ODD if rank in odd else BLUE
            shapes.append(f"<rect x='{i * bar}' y='{height - 12 - size:.1f}' width='{bar - 1}' height='{size:.1f}' "
                          f"fill='{colour}'><title>rank {rank}: {value:g}</title></rect>")
        label = "value" if all("value" in s for s in self.summaries.values()) else "norm"
        return (f"<svg width='{width}' height='{height}' role='img' aria-label='{label} per rank'>{''.join(shapes)}"
                f"<text x='0' y='{height - 1}' font-size='10' fill='currentColor'>{label} per rank</text></svg>")


def inspect(supervisor: Supervisor, ranks: list[int], expression: str) -> Inspection:
    """Evaluate ``expression`` on ``ranks`` (idle, or stopped at a breakpoint) and compare."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError("inspect needs an expression, such as `x` or `grid[1:-1].sum()`")
    try:
        compile(expression, "<inspect>", "eval")
    except SyntaxError as err:
        raise SyntaxError(f"inspect {expression!r}: {err.msg}") from None
    answers = _channel.ask_computing(supervisor, ranks, "inspect", {"expr": expression})
    missing = [rank for rank, answer in answers.items() if "missing" in answer]
    if missing:
        name = answers[missing[0]]["missing"]
        raise NameError(say("{ranks} have no variable {name!r} (inspect evaluates {expr!r} on each rank)",
                            ranks=format_ranks(missing, word=True), name=name, expr=expression))
    summaries, failures = {}, {}
    for rank, answer in answers.items():
        wrong = _channel.failure(answer)
        if wrong:
            failures[rank] = wrong
        else:
            summaries[rank] = {k: v for k, v in answer.items() if k != "status"}
    inspection = Inspection(expression, summaries, failures)
    inspection.differences = _where_arrays_differ(supervisor, inspection)
    return inspection


def _where_arrays_differ(supervisor: Supervisor, inspection: Inspection) -> list[str]:
    groups = inspection.groups()
    if len(groups) < 2 or "blocks" not in groups[0][1]:
        return []
    reference_ranks, reference = groups[0]
    said = []
    for ranks, summary in groups[1:]:
        who = format_ranks(ranks, word=True)
        if summary.get("shape") != reference.get("shape"):
            said.append(say("{who}: shape {shape}, the others' {reference}", who=who,
                            shape=tuple(summary.get("shape", ())), reference=tuple(reference["shape"])))
            continue
        blocks = [i for i, (a, b) in enumerate(zip(summary["blocks"], reference["blocks"])) if a != b][:ASKED_BLOCKS]
        if not blocks:
            continue
        answers = _channel.ask_computing(supervisor, [ranks[0], reference_ranks[0]], "elements",
                                         {"expr": inspection.expression, "block_numbers": blocks})
        theirs, ours = answers[ranks[0]], answers[reference_ranks[0]]
        if _channel.failure(theirs) or _channel.failure(ours):
            continue
        found = []
        for number in map(str, blocks):
            mine, other = theirs["blocks"].get(number), ours["blocks"].get(number)
            if not mine or not other:
                continue
            for offset, (a, b) in enumerate(zip(mine["values"], other["values"])):
                if a != b and not (a != a and b != b):  # NaN equals NaN here
                    found.append((mine["first"] + offset, a, b))
        shape = reference["shape"]
        count = sum(1 for a, b in zip(summary["blocks"], reference["blocks"]) if a != b)
        named = ", ".join(f"{_index(i, shape)}: {_number(a)} vs {_number(b)}" for i, a, b in found[:SHOWN_ELEMENTS])
        said.append(say("{who}: {blocks} of the array's {total} blocks differ from {reference}'s; first: {named}",
                        who=who, reference=format_ranks(reference_ranks, word=True), blocks=count,
                        total=len(reference["blocks"]), named=named))
    return said


def _index(flat: int, shape: list[int]) -> str:
    if len(shape) <= 1:
        return f"[{flat}]"
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return "[" + ", ".join(map(str, reversed(index))) + "]"


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
