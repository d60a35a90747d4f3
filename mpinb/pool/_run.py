"""One run on the ranks: follow it to its end, then report it.

Following it covers output, hangs, failures, deaths and the clock; then the ranks' replies become a
:class:`RunResult`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from .._language import say
from ..common._protocol import Reply
from ..common._values import unpack
from ..errors import DeadlockError, MPIHangError, RunInterrupted, RunTimeoutError
from ..trace import Trace
from ._debug import Breakpoints, Driver
from ._hang import Diagnosis, HangWatch
from ._inspect import inspect
from ._pending import Pending, send
from ._recover import release_blocked
from ._result import RankFailure, RunResult, Stopped
from ._stacks import Stacks, sample
from ._streams import OutputCallback, StreamTracker
from ._supervisor import Supervisor

# How long ranks get to come back after an interrupt before the caller gets control anyway.
INTERRUPT_GRACE = 2.0
# After one rank failed, how long the others get to finish before they are interrupted.
RELEASE_AFTER = 0.3
_POLL = 0.05


@dataclass
class Outcome:
    """How a run ended: ``stopped`` as a result's, or ``"died"`` (a rank's death ended it)."""

    pending: Pending
    ranks: list[int]
    elapsed: float = 0.0
    stopped: Stopped | Literal["died"] | None = None
    released: list[int] = field(default_factory=list)  # interrupted because another rank failed
    dead: list[int] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    interrupted_at: float | None = None  # time.monotonic() when mpinb first interrupted ranks
    stacks: Stacks | None = None  # every rank's stack when the run was stopped
    raised: BaseException | None = None  # what broke the wait in the notebook, other than an interrupt

    @property
    def aborted(self) -> bool:
        """Whether ranks were interrupted: they need a fresh world before the next run."""
        return self.interrupted_at is not None

    def unanswered(self) -> list[int]:
        """The ranks of the run that have not replied (still busy, or their reply was dropped)."""
        return [rank for rank, over in zip(self.ranks, self.pending.finished()) if not over]


@dataclass
class Debugging:
    """What a run needs for the debugger: what to do when ranks stop at a breakpoint, the cells'
    code (for stacks read from outside), and where the ranks were at earlier samples."""

    driver: Driver | None = None
    sources: dict[str, str] = field(default_factory=dict)
    history: dict = field(default_factory=dict)

    def stacks(self, supervisor: Supervisor, ranks: list[int]) -> Stacks:
        return sample(supervisor, ranks, self.sources, history=self.history)


def follow(supervisor: Supervisor, call: Callable[..., Reply], args: tuple, ranks: list[int],
           size: int, timeout: float | None, on_output: OutputCallback | None,
           debugging: Debugging | None = None) -> Outcome:
    """Run ``call(*args)`` on ``ranks`` and follow it until every rank replied or it must stop.

    While a rank is stopped at a breakpoint the timeout does not run, no hang is diagnosed and no
    failure releases the others; ``debugging.driver`` takes the user's commands."""
    debugging = debugging or Debugging()
    started = time.perf_counter()
    pending = send(supervisor, call, args, ranks)
    outcome = Outcome(pending, ranks)
    tracker = StreamTracker(pending, ranks)
    watch = HangWatch(ranks, idle=[r for r in range(size) if r not in ranks])
    breakpoints = Breakpoints(supervisor, ranks, debugging.sources)
    failure_seen_at: float | None = None
    deadline = None if timeout is None else time.monotonic() + timeout
    paused, last = 0.0, time.monotonic()  # seconds with a rank stopped: the clock stands still
    try:
        while not pending.ready():
            pending.wait(_POLL)
            tracker.poll(on_output)
            if pending.ready():
                break
            outcome.dead = supervisor.first_dead()  # any rank's death ends the MPI job
            if outcome.dead:
                outcome.stopped = "died"
                return outcome
            done = pending.finished()
            breakpoints.update(pending.data, done)
            now = time.monotonic()
            if breakpoints.stopped:
                paused += now - last
                if debugging.driver is not None:
                    debugging.driver.at_stop(breakpoints, lambda: debugging.stacks(supervisor, ranks),
                                             lambda expression: inspect(supervisor, sorted(breakpoints.stopped),
                                                                        expression))
                    paused += time.monotonic() - now
                    now = time.monotonic()
                last = now
                continue
            last = now
            news = watch.update(pending.data, done)
            if news is not None and on_output is not None:
                on_output(ranks[0], "hang", news.text() + "\n\n" + debugging.stacks(supervisor, ranks).text())
            if failure_seen_at is None:
                failure_seen_at = time.monotonic() if pending.failure_seen() else None
            elif not outcome.released and time.monotonic() - failure_seen_at > RELEASE_AFTER:
                # mpi4py's own runner aborts every rank when one fails; we interrupt the rest
                # (they are usually waiting for the failed one) and keep the pool.
                outcome.released = [r for r, over in zip(ranks, done) if not over]
                outcome.interrupted_at = time.monotonic()
                supervisor.interrupt(outcome.released)
                release_blocked(supervisor, [r for r in range(size) if r not in outcome.released])
            if deadline is not None and time.monotonic() > deadline + paused:
                outcome.stopped = "timeout"
                break
    except KeyboardInterrupt:
        outcome.stopped = "interrupt"
    except BaseException as err:  # noqa: BLE001 - whatever breaks the wait (an output callback's error,
        # a test's timeout) stops the ranks first, so that the pool stays usable; raised again later
        outcome.stopped, outcome.raised = "interrupt", err
    if not outcome.stopped and supervisor.unregistered(ranks):
        # A rank's engine was lost (its nanny told the controller) and ipyparallel failed its
        # request, which ends the wait before the death was seen by a check above.
        outcome.dead, outcome.stopped = supervisor.gone(), "died"
        return outcome
    if outcome.stopped:
        outcome.stacks = _stacks_before_the_interrupt(debugging, supervisor, ranks)
        outcome.interrupted_at = time.monotonic()
        supervisor.interrupt(ranks)
        pending.wait(INTERRUPT_GRACE)
    pending.wait_for_output(0.5 if pending.ready() else 0)
    tracker.poll(on_output)
    if pending.ready() and on_output is not None:
        tracker.final_progress(pending.replies(), on_output)
    outcome.diagnosis = watch.diagnosis
    outcome.elapsed = time.perf_counter() - started
    return outcome


def _stacks_before_the_interrupt(debugging: Debugging, supervisor: Supervisor, ranks: list[int]) -> Stacks | None:
    try:
        return debugging.stacks(supervisor, ranks)
    except Exception:  # noqa: BLE001 - the stacks are a help; the interrupt must go out regardless
        return None


def stopped_error(outcome: Outcome, timeout: float | None, restarted: str | None = None) -> BaseException:
    """The exception for a run that was interrupted or timed out, with the hang's diagnosis and,
    when the ranks could not be stopped, the sentence that says the pool was restarted."""
    if outcome.stopped == "interrupt":
        text = say("the run was interrupted; the ranks were sent an interrupt.")
    else:
        text = say("the run did not finish within {timeout} s; the ranks were sent an interrupt.",
                   timeout=f"{timeout:g}")
    if restarted:
        text += " " + restarted
    diagnosis, stacks = outcome.diagnosis, outcome.stacks
    if outcome.stopped == "interrupt":
        return RunInterrupted(text, diagnosis, stacks)
    if diagnosis is not None:
        return (DeadlockError if diagnosis.deadlock else MPIHangError)(text, diagnosis, stacks)
    return RunTimeoutError(text, stacks)


def collect(outcome: Outcome, size: int) -> RunResult:
    """What each rank of the run printed, displayed, returned, raised and recorded."""
    pending, ranks = outcome.pending, outcome.ranks
    stopped = outcome.stopped
    assert stopped != "died", "a run in which a rank died raises, it is not collected"
    result = RunResult(ranks=list(ranks), elapsed=outcome.elapsed, released=outcome.released, stopped=stopped)
    replies = pending.replies()
    recorded = {r: reply["trace"] for r, reply in zip(ranks, replies)
                if isinstance(reply, dict) and reply["trace"] is not None}
    if recorded:
        result.trace = Trace(recorded, world_size=size)
    for rank, reply, out, err, outputs in zip(ranks, replies, pending.stdout, pending.stderr, pending.outputs):
        result.stdout[rank] = out or ""
        result.stderr[rank] = err or ""
        result.outputs[rank] = [{"data": b.get("data", {}), "metadata": b.get("metadata", {})} for b in outputs]
        result.value[rank] = None
        if isinstance(reply, dict):
            if reply["error"]:
                result.errors[rank] = RankFailure(**reply["error"])
            if reply["has_value"]:
                result.value[rank] = unpack(reply["value"], reply["repr"], reply["why"])
                result.value_repr[rank] = reply["repr"]
            if reply["dropped_lines"]:
                result.dropped_lines[rank] = reply["dropped_lines"]
            if reply.get("held"):
                result.held[rank] = reply["held"]
        elif isinstance(reply, BaseException):
            result.errors[rank] = _failure_from_remote(reply)
        # else: still running after an interrupt
    return result


def _failure_from_remote(err: BaseException) -> RankFailure:
    """A failure that happened outside user code (engine died, value not serialisable...)."""
    name = getattr(err, "ename", type(err).__name__)
    message = getattr(err, "evalue", str(err))
    trace = getattr(err, "traceback", "") or f"{name}: {message}"
    return RankFailure(type=name, message=message, traceback=trace)
