"""Grading the tutorials' exercises on the ranks.

Grading checks the answer on every rank, then the messages that produced it (from the trace), then
MPI correctness (a verified run: a right answer that relies on buffering or reuses a buffer too
early is not yet right), with a specific hint for what is wrong."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from .._colors import ERROR, GREEN, tint
from .._language import say
from ..errors import MPIHangError
from ._exercises import EXERCISES, Exercise


@dataclass
class CheckResult:
    """The verdict on one exercise: ``passed``, and ``hints`` saying what to fix when it did not."""

    exercise: str
    passed: bool
    hints: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        if self.passed:
            return "✔ " + say("{exercise}: correct, on every rank and in how the ranks communicated.",
                              exercise=self.exercise)
        lines = ["✘ " + say("{exercise}: not yet.", exercise=self.exercise)] + [f"  - {hint}" for hint in self.hints]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        border = GREEN if self.passed else ERROR
        head, *rest = str(self).splitlines()
        items = "".join(f"<li>{html.escape(line.strip()[2:])}</li>" for line in rest)
        body = f"<ul style='margin:4px 0'>{items}</ul>" if items else ""
        return (f"<div class='mpinb-check' style='background:{tint(border, 0.15)};border-left:4px solid {border};"
                "padding:6px 10px'>"
                f"<b>{html.escape(head)}</b>{body}</div>")


def check(exercise: str, pool=None, timeout: float = 20.0) -> CheckResult:
    """Run the named exercise's test on every rank, and grade the answers and how they were reached.

    The grade reads each rank's answer, then the messages that produced it (from the trace), then
    MPI correctness (a verified run).

    :param exercise: the exercise's name, as its tutorial gives it (``"parallel_sum"``, ...).
    :param pool: the pool to run it on; default: the notebook's.
    :param timeout: seconds the test may run on the ranks.
    :returns: the verdict: ``passed``, and ``hints`` saying what to fix when it did not.
    :raises ValueError: no exercise has that name (the message lists them).
    :raises RuntimeError: no pool is running.
    """
    if exercise not in EXERCISES:
        known = ", ".join(sorted(EXERCISES))
        raise ValueError(f"unknown exercise {exercise!r}; the exercises are: {known}")
    spec = EXERCISES[exercise]
    if pool is None:
        from ..notebook._session import current_pool

        pool = current_pool()
    if pool is None or not pool.running:
        raise RuntimeError("no pool is running: run a %%mpi cell (or mpinb.Pool(n).start()) first.")
    size = pool.settings.n
    if size < spec.min_ranks or size % spec.ranks_multiple:
        if spec.ranks_multiple > 1:
            need = say("a multiple of {count}", count=spec.ranks_multiple)
        else:
            need = say("at least {count}", count=spec.min_ranks)
        return CheckResult(exercise, False, [say("this exercise needs {need} ranks; the pool has {size} "
                                                 "(%mpi restart -n 4).", need=need, size=size)])
    return _grade(spec, pool, size, timeout)


def _grade(spec: Exercise, pool, size: int, timeout: float) -> CheckResult:
    try:
        result = pool.run(spec.call, timeout=timeout, check=False, verify=True)
    except MPIHangError as hang:
        return CheckResult(spec.name, False, [say(spec.hang_hint),
                                              say("what mpinb saw: {diagnosis}", diagnosis=hang.diagnosis.text())])
    if result.errors:
        ranks, failure = result.error_groups()[0]
        if failure.type == "NameError" and f"'{spec.function}'" in failure.message:
            return CheckResult(spec.name, False, [say(
                "`{function}` is not defined on every rank (missing on ranks {ranks}): define it in a %%mpi "
                "cell, so that every rank has it.", function=spec.function, ranks=_ranks(ranks))])
        if failure.type == "NotImplementedError":
            return CheckResult(spec.name, False, [say(
                "`{function}` is not written yet (it raises NotImplementedError): write its body in the %%mpi "
                "cell above, run that cell, then check again.", function=spec.function)])
        return CheckResult(spec.name, False, [say(
            "`{function}` raised {error} on ranks {ranks}.", function=spec.function, error=failure.headline(),
            ranks=_ranks(ranks))])
    hints = [say(hint) for hint in spec.verify(result.value, size)]  # the plain sentences too
    if not hints and result.trace is not None:
        hints = [say(hint) for hint in spec.pattern(result.trace, size)]
    if not hints and result.findings:
        # (what earlier cells left, a message or a communicator, is not this answer's doing)
        ran = set(result.trace.events["file"].tolist()) if result.trace is not None else set()
        hints = [say("The answers are right, but only by accident: {finding}", finding=finding)
                 for finding in result.findings if finding.file in ran]
    return CheckResult(spec.name, not hints, hints)


def _ranks(ranks: list[int]) -> str:
    from ..common._ranges import format_ranks

    return format_ranks(ranks)


__all__ = ["CheckResult", "check"]
