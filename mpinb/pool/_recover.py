"""Brings every rank back to a fresh MPI world after an aborted run.

An aborted run is an interrupt, a timeout, or a rank that failed while others waited. Either every
rank gets a fresh MPI world, or the pool learns within a bounded time that it cannot be done.

Two steps, driven from here so that no rank can fall out of step with the others:

1. **Settle.** Every rank that has not answered the aborted run is asked, through its engine's
   queue, to say its state; the answer comes only once the rank is idle. A queued request it has
   not started is withdrawn (ipyparallel's abort), a relayed run it has not read is skipped, and a
   rank still busy after ``REINTERRUPT_AFTER`` is interrupted again. A rank still busy after the
   stop timeout is stuck (inside a call that ignores interrupts, such as a blocking MPI call that
   mpinb does not trace): the pool then starts fresh processes.
2. **Fresh world.** Only when every rank has settled, with the same state, does each get the
   number of the new world and make it with a polled ``Idup`` under a deadline. A rank that
   finds itself in another state refuses at once; a rank that cannot finish in time says so. Any
   failure means fresh processes, never a second attempt on the same ones, so no call of one
   attempt can ever pair with a call of another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import rank as _rank
from .._language import say
from ..common._protocol import Settled
from ..common._ranges import format_ranks
from . import _stacks
from ._deaths import why_dead

if TYPE_CHECKING:
    from ._supervisor import Supervisor

# A rank still running this long after the interrupt is interrupted once more: it may have
# started its part only after the first one, or its code caught the KeyboardInterrupt.
REINTERRUPT_AFTER = 2.0
# How long the ranks get to make the fresh world, once all of them are known to be idle.
FRESH_WORLD_TIMEOUT = 10.0
_POLL = 0.01


@dataclass
class Recovery:
    """How the ranks came back: ``generation`` is the new world's number when they did;
    otherwise ``stuck`` (ranks that did not stop) or ``failure`` says why they could not."""

    generation: int | None = None
    stuck: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    failure: str | None = None
    held: dict[int, int] = field(default_factory=dict)  # rank -> requests left pending, still holding buffers


def recover(supervisor: Supervisor, generation: int, waiting_for: list[int], unstarted: dict[int, str],
            skip_through: int, interrupted_at: float, stop_timeout: float) -> Recovery:
    """Bring the ranks of ``supervisor`` from world ``generation`` to the next one.

    ``waiting_for`` are the ranks not known to be idle (no reply to the aborted run: all of them
    when the pool does not know); ``unstarted`` maps rank -> the aborted run's request to that
    rank, withdrawn if not started; ``skip_through`` is the last relayed run's number;
    ``interrupted_at`` (time.monotonic()) when the ranks were interrupted, from which
    ``stop_timeout`` counts.
    """
    states, stuck, dead = settle(supervisor, waiting_for, unstarted, skip_through, interrupted_at, stop_timeout)
    recovery = Recovery(stuck=stuck, dead=dead)
    if stuck or dead:
        return recovery
    generations = {state["generation"] for state in states.values()}
    if len(states) == supervisor.settings.n and len(generations) == 1:
        generation = generations.pop()  # every rank's own word (a reset the pool saw cut short may have ended)
    odd = {rank: state for rank, state in states.items()
           if state["generation"] != generation or state["own_started"] != state["own_completed"]}
    if odd:
        recovery.failure = _out_of_step(odd, generation)
        return recovery
    recovery.failure = fresh_world(supervisor, generation + 1)  # each rank checks its own state too
    if recovery.failure is None:
        recovery.generation = generation + 1
        recovery.held = {rank: state["held"] for rank, state in states.items() if state.get("held")}
    return recovery


def held_note(held: dict[int, int]) -> str | None:
    """What the user should know of requests that interrupts left pending on the ranks, if any."""
    if not held:
        return None
    return say("MPI requests that interrupts left pending, {count} in all on {ranks}, keep their buffers "
               "allocated (so that MPI never writes to freed memory) until the pool restarts (`%mpi restart`).",
               ranks=format_ranks(sorted(held), word=True), count=sum(held.values()))


def settle(supervisor: Supervisor, waiting_for: list[int], unstarted: dict[int, str], skip_through: int,
           interrupted_at: float, stop_timeout: float) -> tuple[dict[int, Settled], list[int], list[int]]:
    """The state of each rank of ``waiting_for`` once it is idle: ``(states, stuck, dead)``."""
    client = supervisor.client
    for rank, msg_id in unstarted.items():  # withdrawn from the engine's queue, if still there
        client.abort(jobs=[msg_id], targets=[supervisor.engine_of[rank]], block=False)
    release_blocked(supervisor, [rank for rank in range(supervisor.settings.n) if rank not in waiting_for])
    probes = {rank: client[supervisor.engine_of[rank]].apply_async(_rank.settle, skip_through)
              for rank in waiting_for}
    reinterrupted = False
    while True:
        busy = [rank for rank, probe in probes.items() if not probe.ready()]
        if not busy:
            break
        dead = supervisor.first_dead()
        if dead:
            return {}, [], dead
        since = time.monotonic() - interrupted_at
        if since > stop_timeout:
            return {}, busy, []
        if not reinterrupted and since > REINTERRUPT_AFTER:
            supervisor.interrupt(busy)
            reinterrupted = True
        time.sleep(_POLL)
    states: dict[int, Settled] = {}
    failed = []
    for rank, probe in probes.items():
        try:
            states[rank] = probe.get(0)
        except Exception:  # noqa: BLE001 - a rank that cannot even say its state: start afresh
            failed.append(rank)
    return states, failed, []


def release_blocked(supervisor: Supervisor, idle: list[int]) -> None:
    """Ask ``idle`` ranks to make the calls that other members entered ahead of them, so that
    those return (see ``mpinb.rank.mpi._entered_ahead``); the ranks that are busy do the same as they
    settle. Not waited for: a rank's later requests queue behind it."""
    client = supervisor.client
    for rank in idle:
        client[supervisor.engine_of[rank]].apply_async(_rank.release_blocked)


def fresh_world(supervisor: Supervisor, generation: int) -> str | None:
    """Every rank makes world ``generation`` together; ``None`` when they did, else why not (as
    soon as one rank refuses: the others' polled copy then ends at its deadline, unused).

    One request per rank, each its own result's owner: a rank's answer is read from its own
    request (a view's request over all ranks hands its results over once all are in, and a
    rank's reply could then no longer be looked up by its id)."""
    n = supervisor.settings.n
    client = supervisor.client
    requests = {rank: client[supervisor.engine_of[rank]].apply_async(_rank.fresh_world, generation,
                                                                     FRESH_WORLD_TIMEOUT)
                for rank in range(n)}
    deadline = time.monotonic() + FRESH_WORLD_TIMEOUT + 5.0
    refusals: dict[str, list[int]] = {}
    answered: set[int] = set()
    while len(answered) < n and not refusals:
        if time.monotonic() > deadline:
            busy = [rank for rank in range(n) if rank not in answered]
            return f"{format_ranks(busy, word=True)} did not answer within {FRESH_WORLD_TIMEOUT + 5:g} s"
        time.sleep(_POLL)
        for rank, request in requests.items():
            if rank in answered or not request.ready():
                continue
            answered.add(rank)
            try:
                why = request.get(0)
            except Exception as err:  # noqa: BLE001 - said in the pool's message, then fresh processes
                why = f"{type(err).__name__}: {err}"
            if why is not None:
                refusals.setdefault(str(why), []).append(rank)
    return "; ".join(f"{format_ranks(ranks, word=True)}: {why}" for why, ranks in refusals.items()) or None


def explain(supervisor: Supervisor, recovery: Recovery, sources: dict[str, str], stop_timeout: float) -> str:
    """Why the ranks could not come back, in words (the start of the pool's restart sentence):
    stuck ranks are named with the call each is in, read from its stack (``sources`` maps a
    cell's name to its code)."""
    if recovery.dead:
        return why_dead(supervisor, recovery.dead)
    if recovery.stuck:
        # Asked live first: a rank blocked in MPI has released Python's lock and answers on the
        # control channel; only a rank that holds it (a long C call) is read from outside.
        stacks = _stacks.collect(supervisor, recovery.stuck, sources)
        places: dict[str, list[int]] = {}
        for rank in recovery.stuck:
            places.setdefault(_stacks.where(stacks[rank].frames or None, sources), []).append(rank)
        said = say("; ").join(say("{ranks} ({place})", ranks=format_ranks(ranks, word=True), place=place)
                              for place, ranks in places.items())
        return say("{stuck} did not stop within {seconds} s of the interrupt: an interrupt cannot break off "
                   "such a call (a blocking MPI call that mpinb does not trace, or a long C function)",
                   stuck=said, seconds=f"{stop_timeout:g}")
    return say("the ranks could not make a fresh MPI world after the aborted run ({why})", why=recovery.failure)


def _out_of_step(odd: dict[int, Settled], generation: int) -> str:
    parts = []
    for rank, state in sorted(odd.items()):
        if state["generation"] != generation:
            parts.append(f"rank {rank} is at world {state['generation']}, not {generation}")
        else:
            parts.append(f"rank {rank} has one of mpinb's own collectives unfinished")
    return "; ".join(parts)
