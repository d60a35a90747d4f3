"""Moving variables between the notebook and the ranks' namespaces."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .. import rank as _rank
from .._language import say
from ..common._ranges import format_ranks
from ..common._shared_memory import SharedArray, read, remove, remove_written_by, worth_sharing, write
from ..errors import TransferError, TransferTimeoutError
from ._supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike


class RanksLost(Exception):
    """A rank died or stopped answering while data moved (``Pool`` names it and restarts)."""


# After an interrupt or a timeout, how long the ranks still at their part get to finish it (each
# part is quick: a mapping, or a copy of one value), so that what each rank has is known.
FINISH_GRACE = 2.0
_POLL = 0.005


@contextmanager
def stop_button() -> Iterator[list[int]]:
    """While data moves, an interrupt (the notebook's stop button) is noted, not raised inside
    ipyparallel or half-way through a file: the move's wait reads the note and stops where what
    each rank has is known (see :func:`finish`)."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)
    if came:  # it came when every part was done: the move is whole, and the stop still counts
        raise KeyboardInterrupt(say("the data move had ended when the interrupt came: a push or scatter is "
                                    "complete on every rank"))


def finish(supervisor: Supervisor, parts: dict[int, Any], move: str, timeout: float | None,
           interrupts: list[int], gets_value: bool) -> list[Any]:
    """Each rank's reply to its part of a move (``parts``: rank -> ipyparallel request), in rank
    order. An interrupt or ``timeout`` stops the wait: parts not started are withdrawn, parts
    under way get ``FINISH_GRACE`` to end, and the error says which ranks have what. A rank
    whose part failed is named with its error (a ``TransferError``)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stopped = None
    while not all(request.ready() for request in parts.values()):
        if supervisor.first_dead():  # its part never ends: the caller names the death (see Pool._moving)
            raise RanksLost()
        if interrupts:
            stopped = say("interrupted")
        elif deadline is not None and time.monotonic() > deadline:
            stopped = say("it did not end within {seconds} s", seconds=f"{timeout:g}")
        if stopped:
            break
        time.sleep(_POLL)
    if stopped:
        waiting = [request for request in parts.values() if not request.ready()]
        supervisor.client.abort(jobs=[msg_id for request in waiting for msg_id in request.msg_ids], block=False)
        grace = time.monotonic() + FINISH_GRACE
        while not all(request.ready() for request in waiting) and time.monotonic() < grace:
            time.sleep(_POLL)
    replies: dict[int, Any] = {}
    failed: dict[int, str] = {}
    missing: list[int] = []
    for rank, request in parts.items():
        if not request.ready():
            missing.append(rank)
            continue
        try:
            replies[rank] = request.get(0)
        except Exception as err:  # noqa: BLE001 - named with its rank below
            failed[rank] = _reason(err)
    if not stopped and not failed:
        return [replies[rank] for rank in parts]
    error = (TransferTimeoutError if stopped and not interrupts else TransferError)(
        move, stopped, sorted(replies), failed, missing, gets_value)
    if interrupts:
        raise KeyboardInterrupt(str(error))
    raise error


def _reason(err: BaseException) -> str:
    from ipyparallel.error import RemoteError, TaskAborted

    if isinstance(err, TaskAborted):
        return say("withdrawn before it started")
    if isinstance(err, RemoteError):
        return f"{err.ename}: {err.evalue}"
    return f"{type(err).__name__}: {err}"


def push(supervisor: Supervisor, namespace: Mapping[str, object], ranks: list[int],
         timeout: float | None = None) -> None:
    if not isinstance(namespace, Mapping):
        raise TypeError(f"push takes a dict of {{name: value}}, not {type(namespace).__name__}")
    for name in namespace:
        _check_name(name)
    move = say("the push of {names}", names=", ".join(map(repr, namespace)))
    with stop_button() as interrupts:
        usual = dict(namespace)
        for name, value in namespace.items():
            if not worth_sharing(value):
                continue
            if supervisor.settings.on_this_host:
                if _through_shared_memory(supervisor, name, value, ranks, None, move, timeout, interrupts):
                    del usual[name]
            elif len(ranks) == supervisor.settings.n > 1:
                _through_rank_0(supervisor, name, value)
                del usual[name]
        if usual:
            parts = {rank: supervisor.client[supervisor.engine_of[rank]].push(usual, block=False) for rank in ranks}
            finish(supervisor, parts, move, timeout, interrupts, gets_value=True)


def pull(supervisor: Supervisor, name: str, ranks: list[int], timeout: float | None = None) -> list[Any]:
    _check_name(name)
    share = supervisor.settings.on_this_host
    with stop_button() as interrupts:
        parts = {rank: supervisor.client[supervisor.engine_of[rank]].apply_async(_rank.offer, name, share)
                 for rank in ranks}
        try:
            offers = finish(supervisor, parts, say("the pull of {names}", names=repr(name)), timeout, interrupts,
                            gets_value=False)
        except BaseException:  # the ranks that did offer left files: theirs carry their pid
            if share:
                remove_written_by([supervisor.ranks_info[rank]["pid"] for rank in ranks])
            raise
    try:
        lacking = [rank for rank, (how, _) in zip(ranks, offers) if how == "absent"]
        if lacking:
            raise NameError(f"{format_ranks(lacking, word=True)} have no variable {name!r}")
        return [read(what) if how == "shared" else what for how, what in offers]
    finally:
        for how, what in offers:
            if how == "shared":
                remove(what["path"])


def scatter(supervisor: Supervisor, name: str, array: ArrayLike, ranks: list[int],
            timeout: float | None = None) -> None:
    import numpy as np

    _check_name(name)
    data = np.asanyarray(array)  # a subclass (masked, matrix, record array) keeps its type
    if data.ndim == 0:
        raise ValueError("scatter needs an array with at least one dimension")
    move = say("the scatter of {names}", names=repr(name))
    with stop_button() as interrupts:
        if supervisor.settings.on_this_host and worth_sharing(data) and _through_shared_memory(
                supervisor, name, data, ranks, _split_rows(len(data), len(ranks)), move, timeout, interrupts):
            return
        parts = {rank: supervisor.client[engine].push({name: block}, block=False)
                 for rank, engine, block in zip(ranks, supervisor.engines(ranks), np.array_split(data, len(ranks)))}
        finish(supervisor, parts, move, timeout, interrupts, gets_value=True)


def _split_rows(count: int, parts: int) -> list[tuple[int, int]]:
    """``[first, stop)`` of each part, as ``numpy.array_split`` splits ``count`` rows."""
    size, bigger = divmod(count, parts)
    bounds = [0]
    for part in range(parts):
        bounds.append(bounds[-1] + size + (part < bigger))
    return list(zip(bounds, bounds[1:]))


def _through_shared_memory(supervisor: Supervisor, name: str, array: np.ndarray, ranks: list[int],
                           rows: list[tuple[int, int]] | None, move: str, timeout: float | None,
                           interrupts: list[int]) -> bool:
    """Each rank maps ``array`` (or its own ``rows``, a file per part: a mapping keeps its whole
    file alive) from shared memory; ``False`` if shared memory cannot hold it (then it goes the
    usual way)."""
    parts = [array] if rows is None else [array[first:stop] for first, stop in rows]
    written: list[SharedArray] = []
    try:
        try:
            for part in parts:
                written.append(write(part))
        except OSError:
            return False
        requests = {rank: supervisor.client[engine].apply_async(_rank.take, name, written[0 if rows is None else i])
                    for i, (rank, engine) in enumerate(zip(ranks, supervisor.engines(ranks)))}
        finish(supervisor, requests, move, timeout, interrupts, gets_value=True)
    finally:
        for shared in written:
            remove(shared["path"])
    return True


def _through_rank_0(supervisor: Supervisor, name: str, array: np.ndarray) -> None:
    """Ranks on other hosts: the array crosses the network once, to rank 0, and then reaches the
    others by MPI's broadcast (every rank of the pool takes part). Not broken off by an interrupt
    or a timeout: a broadcast that some ranks left would need a fresh world, and the ranks'
    variables with it. A rank that dies or stops answering ends the wait (``RanksLost``)."""
    staged = f"_mpinb_staged_{name}"
    _unless_a_rank_is_lost(supervisor, supervisor.client[supervisor.engine_of[0]].push({staged: array}, block=False))
    everyone = supervisor.view(list(range(supervisor.settings.n)))
    _unless_a_rank_is_lost(supervisor, everyone.apply_async(_rank.spread, name, staged))


def _unless_a_rank_is_lost(supervisor: Supervisor, request: Any) -> Any:
    """``request``'s result; ``RanksLost`` as soon as a rank of the pool is seen gone."""
    while not request.ready():
        if supervisor.first_dead():
            raise RanksLost()
        request.wait(10 * _POLL)
    return request.get()


def gather(supervisor: Supervisor, name: str, ranks: list[int], timeout: float | None = None) -> np.ndarray:
    return joined(pull(supervisor, name, ranks, timeout))


def joined(parts: list[Any]) -> np.ndarray:
    """The ranks' parts along the first axis, of their own array type when they share one (a
    masked array keeps its mask, a record array its fields by attribute)."""
    import numpy as np

    arrays = [np.atleast_1d(np.asanyarray(part)) for part in parts]
    if any(isinstance(array, np.ma.MaskedArray) for array in arrays):
        return np.ma.concatenate(arrays)
    whole = np.concatenate(arrays)
    kinds = {type(array) for array in arrays}
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind is not type(whole):
            whole = whole.view(kind)
    return whole


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{name!r} is not a valid Python variable name")
