"""Waiting for MPI in a way that can be interrupted, and that tells the notebook what it waits for.

A rank blocked inside a C-level MPI call never returns to Python, so the notebook's interrupt
(SIGINT) cannot reach it. Traced blocking calls therefore post the nonblocking form and poll it:
spinning at first (so latency and bandwidth stay MPI's own), then sleeping with a growing pause,
during which signals are handled. A rank that has waited a while publishes what it waits for on
the status channel (ipyparallel's data messages), so the notebook can diagnose deadlocks live.
"""

from __future__ import annotations

import os
import time

from ...common._protocol import WAIT_KEY, WaitState

SPIN_SECONDS = 0.01     # pure polling first: large transfers need MPI progress calls
FIRST_PAUSE = 50e-6     # then sleep, doubling up to
LONGEST_PAUSE = 0.002   # which bounds both the added latency and the reaction to a signal
POLLS_BEFORE_YIELD = 32  # MPICH's own blocking waits yield too (MPIR_CVAR_POLLS_BEFORE_YIELD)
REPORT_AFTER = 0.3      # publish the wait on the status channel once it lasted this long
REPORT_EVERY = 0.5

_now = time.perf_counter
_yield_cpu = getattr(os, "sched_yield", lambda: time.sleep(0))

# What this rank is waiting for right now (None when it is not in a traced MPI wait).
current: WaitState | None = None
# SIGINTs received so far, in user code or not (rank 0 watches it while it gathers replies).
interrupts = 0


def count_interrupt() -> None:
    """A SIGINT arrived (the runtime's handler says so, wherever it lands)."""
    global interrupts
    interrupts += 1


# Code where an interrupt may raise at once: each abandons what it left pending (see
# _execute._interrupt, which holds interrupts anywhere else in mpinb's own code).
safe_points: set = set()


def publish(state: WaitState | None) -> None:
    try:
        publish_data({WAIT_KEY: state})
    except Exception:  # noqa: BLE001 - outside an engine (plain mpiexec) there is no channel
        pass


def publish_data(data: dict) -> None:
    """Send ``data`` to the notebook on the status channel (ipyparallel's data messages)."""
    from ipyparallel.datapub import publish_data as send

    send(data)


def wait(test, describe) -> None:
    """Call ``test()`` until it returns true; ``describe`` gives the wait's description: a
    callable, or a ``(function, args)`` pair so that nothing is built for waits that end at once.

    If an exception (the notebook's interrupt) breaks the wait, ``current`` keeps describing it.
    """
    if test():
        return
    global current
    began = _now()
    polls = 0
    while _now() - began < SPIN_SECONDS:
        if test():
            return
        polls += 1
        if polls % POLLS_BEFORE_YIELD == 0:
            _yield_cpu()  # with more ranks than cores, the rank we wait for may need this core
    since = time.time() - (_now() - began)
    state = current = described(describe, since)
    pause, reported = FIRST_PAUSE, 0.0
    while True:
        time.sleep(pause)
        if test():
            break
        pause = min(pause * 2, LONGEST_PAUSE)
        waited = _now() - began
        if waited >= REPORT_AFTER and waited - reported >= REPORT_EVERY:
            # described afresh: what came meanwhile (a message under another tag) is part of it
            state = current = described(describe, since)
            publish(state)
            reported = waited
    current = None
    if reported:
        publish(None)


safe_points.add(wait.__code__)


def described(describe, since: float) -> WaitState:
    """The wait that ``describe`` (a function, or one with its arguments) names, begun at ``since``
    (wall-clock seconds)."""
    state = describe[0](*describe[1]) if isinstance(describe, tuple) else describe()
    state["since"] = since
    return state


def wait_request(request, status, describe, cancel: bool = False, keep=None) -> None:
    """Complete ``request`` (an mpi4py Request) without blocking inside MPI.

    If the wait is broken off (an interrupt), the request is abandoned (see :func:`abandon`);
    ``cancel`` for a receive; ``keep`` is what else holds its buffer (the C tracer's requests
    are not mpi4py's, which hold their own)."""
    try:
        wait(lambda: request.Test(status), describe)
    except BaseException:
        abandon(request, cancel, keep)
        raise


# Requests that an interrupt left pending, each with what holds its buffer: under plain mpiexec
# such a call would never have returned. Kept until they complete, so that MPI never reads or
# writes freed memory.
_abandoned: list[tuple] = []


def abandon(request, cancel: bool = False, keep=None) -> None:
    """A request whose wait was broken off: one still pending keeps its buffers alive for good.

    A receive is cancelled (``cancel``): withdrawn from matching, it cannot take a later message.
    Sends are not: MPI 4.0 deprecated cancelling them, MPICH rarely can, and with the mpich
    wheel's UCX layer ``MPI_Cancel`` of a large pending send crashed the rank (seen here)."""
    if not request:  # completed after all
        return
    done = False
    if cancel:
        try:
            request.Cancel()
            done = request.Test()
        except Exception:  # noqa: BLE001 - a request that cannot be cancelled stays pending
            done = False
    if not done:
        _abandoned.append((request, keep))


def abandoned_count() -> int:
    """How many abandoned requests are kept, as of the last ``held()`` (which tests them)."""
    return len(_abandoned)


def held() -> int:
    """How many abandoned requests still hold their buffers; those that have completed since
    (a message matched after all) are let go."""
    still = []
    for request, keep in _abandoned:
        try:
            completed = request.Test()
        except Exception:  # noqa: BLE001 - a request MPI cannot even test stays held, to be safe
            completed = False
        if not completed:
            still.append((request, keep))
    _abandoned[:] = still
    return len(still)


def broken_off(state: WaitState) -> None:
    """A wait that ended by an exception outside :func:`wait` (a member released from a
    collective it entered ahead, see ``_entered_ahead``): reported as an interrupted wait is."""
    global current
    current = state


def interrupted_wait() -> WaitState | None:
    """The wait that an exception (interrupt, abort) just broke out of, if any."""
    return current


def clear() -> None:
    global current
    current = None

