"""The exception types users see.

Plain built-in bases, as mpi4py does: a failure to start is a ``RuntimeError``, bad arguments are
``ValueError``/``TypeError``, and errors raised by user code on the ranks are gathered into one
``RankError`` that renders each distinct traceback once, with the ranks it came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._language import say
from .common._ranges import format_ranks

if TYPE_CHECKING:
    from .common._protocol import WaitState
    from .pool._hang import Diagnosis
    from .pool._result import RankFailure, RunResult
    from .pool._stacks import Stacks


def _short_wait(state: WaitState) -> str:
    """``bcast (line 5)`` for the one-line account of a failed run."""
    return say("{op} (line {line})", op=state["op"], line=state["line"])


class PoolError(RuntimeError):
    """The pool could not do what was asked (not started, failed to start, died)."""

    def _render_traceback_(self) -> list[str]:
        # The message says what happened and what to do; the notebook's own stack adds nothing.
        return f"{type(self).__name__}: {self}".splitlines()


class PoolStartError(PoolError):
    """The MPI ranks or the controller did not come up; the message says why and what to do."""


class RankError(RuntimeError):
    """User code raised on one or more ranks.

    ``failures`` maps rank -> :class:`RankFailure`; ``result`` is the whole :class:`RunResult`
    (outputs of every rank included), so nothing the cell printed is lost.
    """

    def __init__(self, result: RunResult):
        self.result = result
        self.failures: dict[int, RankFailure] = dict(result.errors)
        super().__init__(self._summary())

    def groups(self) -> list[tuple[list[int], RankFailure]]:
        """Distinct failures, each with the ranks that raised it (identical tracebacks merged)."""
        return self.result.error_groups()

    def _summary(self) -> str:
        lines = []
        for ranks, failure in self.groups():
            lines.append(say("{ranks} raised {error}", ranks=format_ranks(ranks, word=True), error=failure.headline()))
        released = [r for r in self.result.released if r in self.failures]
        by_wait: dict[str, list[int]] = {}
        for rank in released:
            waiting = self.failures[rank].waiting
            what = (say("waiting in {wait}", wait=_short_wait(waiting)) if waiting
                    else say("stopped (not waiting in MPI)"))
            by_wait.setdefault(what, []).append(rank)
        for what, ranks in by_wait.items():
            template = "{ranks} was {what}" if len(ranks) == 1 else "{ranks} were {what}"
            lines.append(say(template, ranks=format_ranks(ranks, word=True), what=what))
        fine = [r for r in self.result.ranks if r not in self.failures]
        if fine:
            lines.append(say("{ranks} finished without error", ranks=format_ranks(fine, word=True)))
        summary = say("; ").join(lines)
        return f"{summary}. {self.result.restarted}" if self.result.restarted else summary

    def render(self) -> str:
        """Every distinct traceback once, under the ranks that raised it."""
        parts = []
        for ranks, failure in self.groups():
            parts.append(f"[{format_ranks(ranks, word=True)}] {failure.traceback.rstrip()}")
        if self.result.restarted:
            parts.append(self.result.restarted)
        return "\n\n".join(parts)

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing our own (uninteresting) client-side stack.
        return self.render().splitlines()


class CellSyntaxError(Exception):
    """A ``%%mpi`` cell that does not compile, reported once for all ranks, pointing into the cell.

    Not a ``SyntaxError`` subclass on purpose: IPython prints those with its own stack, while this
    one shows just the caret under the offending line of the cell. ``.error`` is the SyntaxError.
    """

    def __init__(self, error: SyntaxError):
        self.error = error
        super().__init__(f"{error.msg} (cell line {error.lineno})")

    def _render_traceback_(self) -> list[str]:
        import traceback

        return "".join(traceback.format_exception_only(SyntaxError, self.error)).splitlines()


def _stopped_run_told(message: str, diagnosis: Diagnosis | None, stacks: Stacks | None) -> str:
    """What a stopped run's error says: why it stopped, what the ranks waited for, where they were."""
    told = message if diagnosis is None else f"{message}\n{diagnosis.text()}"
    if stacks is not None:
        told += "\n\n" + say("Where the ranks were when the run was stopped:") + "\n" + stacks.text()
    return told


def _told_whole(error: BaseException) -> list[str]:
    """For IPython: the message alone; the notebook's own stack says nothing of the ranks."""
    return [f"{type(error).__name__}: {error}"]


class MPIHangError(TimeoutError):
    """A run stopped (timeout or interrupt) while ranks were blocked in MPI.

    ``diagnosis`` (a :class:`mpinb.pool._hang.Diagnosis`) holds, as data, what each rank waited in and
    the wait-for cycle; ``stacks`` every rank's stack when the run stopped; ``str()`` is the text the
    notebook shows. The pool is usable afterwards.
    """

    def __init__(self, message: str, diagnosis: Diagnosis, stacks: Stacks | None = None):
        self.diagnosis = diagnosis
        self.stacks = stacks
        super().__init__(_stopped_run_told(message, diagnosis, stacks))

    _render_traceback_ = _told_whole


class RunTimeoutError(TimeoutError):
    """A run that did not finish in its time, while no rank was blocked in MPI (else
    :class:`MPIHangError`). ``stacks``: every rank's stack when it was stopped, if they were read."""

    def __init__(self, message: str, stacks: Stacks | None = None):
        self.stacks = stacks
        super().__init__(_stopped_run_told(message, None, stacks))


class RunInterrupted(KeyboardInterrupt):
    """A run that the stop button (an interrupt) ended. ``diagnosis``: what the ranks waited for,
    as :class:`MPIHangError` has it, when they were blocked in MPI (else ``None``); ``stacks``:
    every rank's stack when the run was stopped, if they were read."""

    def __init__(self, message: str, diagnosis: Diagnosis | None = None, stacks: Stacks | None = None):
        self.diagnosis = diagnosis
        self.stacks = stacks
        super().__init__(_stopped_run_told(message, diagnosis, stacks))

    _render_traceback_ = _told_whole


class DeadlockError(MPIHangError):
    """An :class:`MPIHangError` whose ranks wait for each other in a cycle (or for absent ranks)."""


class RankDiedError(PoolError):
    """A rank's process died (exit, signal, out of memory); MPI cannot go on without it."""


class _Transfer(Exception):
    """What a data move that did not end as asked leaves on each rank (the ranks are lists)."""

    def __init__(self, move: str, stopped: str | None, done: list[int], failed: dict[int, str],
                 missing: list[int], gets_value: bool):
        self.move, self.stopped = move, stopped
        self.done, self.failed, self.missing = done, failed, missing
        head = say("{move} stopped: {why}", move=move, why=stopped) if stopped else say("{move} failed", move=move)
        parts = []
        for why in sorted(set(failed.values())):
            ranks = [rank for rank, reason in failed.items() if reason == why]
            parts.append(say("{ranks}: {why}", ranks=format_ranks(ranks, word=True), why=why))
        if missing:
            parts.append(say("{ranks} did not answer in time (their part is withdrawn, unless it had started)",
                             ranks=format_ranks(missing, word=True)))
        if gets_value and done:
            parts.append(say("{ranks} have the new value", ranks=format_ranks(done, word=True)))
        if gets_value and failed:
            parts.append(say("{ranks} keep what they had", ranks=format_ranks(failed, word=True)))
        if not gets_value:
            parts.append(say("nothing was returned, run it again"))
        super().__init__(f"{head}. {say('; ').join(parts)}.")


class TransferError(_Transfer, PoolError):
    """A push, pull, scatter or gather that failed on some ranks; ``done``, ``failed`` (rank ->
    why) and ``missing`` say where each rank stands, and the message says it in words."""


class TransferTimeoutError(_Transfer, TimeoutError):
    """A data move that passed its timeout; the same account as :class:`TransferError`."""
