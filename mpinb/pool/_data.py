"""Moving variables between the notebook and the ranks' namespaces."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .. import rank as _rank
from .._ranges import format_ranks
from .._shared import SharedArray, mapped, remove, remove_written_by, worth_sharing, write
from ._supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike


@contextmanager
def whole_or_not_at_all() -> Iterator[None]:
    """An interrupt (the notebook's stop button) that comes while data is on its way to or from
    the ranks takes effect once the move is over: a push never reaches some ranks only, and a
    pull never leaves a rank's file behind in shared memory."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if came:
        raise KeyboardInterrupt("the data move finished before the interrupt took effect")


def push(supervisor: Supervisor, namespace: Mapping[str, object], ranks: list[int]) -> None:
    if not isinstance(namespace, Mapping):
        raise TypeError(f"push takes a dict of {{name: value}}, not {type(namespace).__name__}")
    for name in namespace:
        _check_name(name)
    usual = dict(namespace)
    for name, value in namespace.items():
        if not worth_sharing(value):
            continue
        if supervisor.settings.on_this_host:
            if _through_shared_memory(supervisor, name, value, ranks, None):
                del usual[name]
        elif len(ranks) == supervisor.settings.n > 1:
            _through_rank_0(supervisor, name, value)
            del usual[name]
    if usual:
        with whole_or_not_at_all():
            supervisor.view(ranks).push(usual, block=True)


def pull(supervisor: Supervisor, name: str, ranks: list[int]) -> list[Any]:
    _check_name(name)
    view = supervisor.view(ranks)
    lacking = [rank for rank, absent in zip(ranks, view.apply_sync(_is_undefined, name)) if absent]
    if lacking:
        raise NameError(f"{format_ranks(lacking, word=True)} have no variable {name!r}")
    if not supervisor.settings.on_this_host:
        return list(view.pull(name, block=True))
    with whole_or_not_at_all():
        try:
            offers = view.apply_sync(_rank.offer, name)
        except BaseException:  # the ranks that did offer left files: theirs carry their pid
            remove_written_by([supervisor.ranks_info[rank]["pid"] for rank in ranks])
            raise
        try:
            return [mapped(what) if how == "shared" else what for how, what in offers]
        finally:
            for how, what in offers:
                if how == "shared":
                    remove(what["path"])


def scatter(supervisor: Supervisor, name: str, array: ArrayLike, ranks: list[int]) -> None:
    import numpy as np

    _check_name(name)
    data = np.asarray(array)
    if data.ndim == 0:
        raise ValueError("scatter needs an array with at least one dimension")
    if supervisor.settings.on_this_host and worth_sharing(data) and _through_shared_memory(
            supervisor, name, data, ranks, _split_rows(len(data), len(ranks))):
        return
    with whole_or_not_at_all():
        for engine, block in zip(supervisor.engines(ranks), np.array_split(data, len(ranks))):
            supervisor.client[engine].push({name: block}, block=False)
        supervisor.client.wait()


def _split_rows(count: int, parts: int) -> list[tuple[int, int]]:
    """``[first, stop)`` of each part, as ``numpy.array_split`` splits ``count`` rows."""
    size, bigger = divmod(count, parts)
    bounds = [0]
    for part in range(parts):
        bounds.append(bounds[-1] + size + (part < bigger))
    return list(zip(bounds, bounds[1:]))


def _through_shared_memory(supervisor: Supervisor, name: str, array: np.ndarray, ranks: list[int],
                           rows: list[tuple[int, int]] | None) -> bool:
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
        with whole_or_not_at_all():
            pending = [supervisor.client[engine].apply_async(_rank.take, name, written[0 if rows is None else i])
                       for i, engine in enumerate(supervisor.engines(ranks))]
            for reply in pending:
                reply.get()  # a rank that could not take it (out of memory) raises here
    finally:
        for shared in written:
            remove(shared["path"])
    return True


def _through_rank_0(supervisor: Supervisor, name: str, array: np.ndarray) -> None:
    """Ranks on other hosts: the array crosses the network once, to rank 0, and then reaches the
    others by MPI's broadcast (every rank of the pool takes part)."""
    staged = f"_mpinb_staged_{name}"
    with whole_or_not_at_all():
        supervisor.client[supervisor.engine_of[0]].push({staged: array}, block=True)
        supervisor.view(list(range(supervisor.settings.n))).apply_sync(_rank.spread, name, staged)


def gather(supervisor: Supervisor, name: str, ranks: list[int]) -> np.ndarray:
    import numpy as np

    parts = pull(supervisor, name, ranks)
    return np.concatenate([np.atleast_1d(np.asarray(part)) for part in parts])


def _is_undefined(name: str) -> bool:  # runs on the ranks
    from IPython import get_ipython

    return name not in get_ipython().user_ns


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{name!r} is not a valid Python variable name")
