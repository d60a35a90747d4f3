"""What one run on the pool produced: per-rank output, values and failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..common._protocol import WaitState
from ..common._ranges import format_ranks
from ..errors import RankError
from ..trace import Finding, Trace
from . import _render

Stopped = Literal["timeout", "interrupt"]
"""Why mpinb stopped a run: its timeout ran out, or the notebook interrupted it."""


@dataclass(frozen=True)
class RankFailure:
    """An exception raised by user code on one rank, described in plain data."""

    type: str
    message: str
    traceback: str
    line: int | None = None
    file: str = ""
    waiting: WaitState | None = None  # the MPI wait an interrupt broke, if it broke one

    def headline(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        text = f"{self.type}: {self.message}" if self.message else self.type
        return text + where


@dataclass
class RunResult:
    """Everything a run left, keyed by rank: ``stdout``, ``stderr``, ``outputs``, ``value``, ``errors``.

    ``outputs[r]`` holds rank r's rich display data (``display()``, figures) as mime bundles;
    ``value[r]`` the value of the cell's last expression (``None`` when it had none);
    ``trace`` the MPI calls the run made (``None`` when it ran untraced).
    """

    ranks: list[int]
    stdout: dict[int, str] = field(default_factory=dict)
    stderr: dict[int, str] = field(default_factory=dict)
    outputs: dict[int, list[dict]] = field(default_factory=dict)
    value: dict[int, object] = field(default_factory=dict)
    value_repr: dict[int, str] = field(default_factory=dict)
    errors: dict[int, RankFailure] = field(default_factory=dict)
    dropped_lines: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0
    trace: Trace | None = None
    released: list[int] = field(default_factory=list)  # ranks interrupted because another failed
    # Why mpinb stopped the run, if it did (the run raised too; this is what ``last_result`` keeps).
    # A run in which a rank died has no result: the pool raises RankDiedError.
    stopped: Stopped | None = None
    # What the recovery after this run has to say: why the pool had to start fresh processes, if
    # it did; else requests that the interrupt left pending on the ranks, if any.
    restarted: str | None = None
    held: dict[int, int] = field(default_factory=dict)  # rank -> MPI requests interrupts left pending

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def findings(self) -> list[Finding]:
        """What the run did that works only by accident (see :meth:`mpinb.trace.Trace.findings`);
        empty for an untraced run."""
        return [] if self.trace is None else self.trace.findings()

    def failed_ranks(self) -> list[int]:
        """Ranks whose code failed on its own: not those that stopped on an interrupt mpinb sent
        (because another rank failed, the run timed out, or the user interrupted it)."""
        return [rank for rank, failure in sorted(self.errors.items())
                if not (failure.type == "KeyboardInterrupt" and (self.stopped or rank in self.released))]

    def error_groups(self) -> list[tuple[list[int], RankFailure]]:
        """Failures with identical tracebacks merged: ``[(ranks, failure), ...]`` in rank order,
        for the ranks of :meth:`failed_ranks`."""
        groups: dict[tuple, tuple[list[int], RankFailure]] = {}
        for rank in self.failed_ranks():
            failure = self.errors[rank]
            key = (failure.type, failure.message, failure.traceback)
            groups.setdefault(key, ([], failure))[0].append(rank)
        return list(groups.values())

    def raise_for_errors(self) -> RunResult:
        """Raise :class:`RankError` if any rank failed; return ``self`` otherwise."""
        if self.errors:
            raise RankError(self)
        return self

    def text(self) -> str:
        """Per-rank output as plain text, each line prefixed by its rank (or the ranks that printed the same)."""
        return _render.as_text(self.ranks, self.stdout, self.stderr, self.outputs, self.value_repr)

    def __repr__(self) -> str:
        state = "ok" if self.ok else f"failed on {format_ranks(self.errors, word=True)}"
        return f"<RunResult {format_ranks(self.ranks, word=True)}, {state}, {self.elapsed:.3f} s>"

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(repr(self) + "\n" + self.text())

    def _repr_html_(self) -> str:
        return _render.as_html(self.ranks, self.stdout, self.stderr, self.outputs, self.value_repr)
