"""Moving variables between the notebook and the ranks' namespaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._ranges import format_ranks
from ._supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike


def push(supervisor: Supervisor, namespace: Mapping[str, object], ranks: list[int]) -> None:
    if not isinstance(namespace, Mapping):
        raise TypeError(f"push takes a dict of {{name: value}}, not {type(namespace).__name__}")
    for name in namespace:
        _check_name(name)
    supervisor.view(ranks).push(dict(namespace), block=True)


def pull(supervisor: Supervisor, name: str, ranks: list[int]) -> list[Any]:
    _check_name(name)
    view = supervisor.view(ranks)
    lacking = [rank for rank, absent in zip(ranks, view.apply_sync(_is_undefined, name)) if absent]
    if lacking:
        raise NameError(f"{format_ranks(lacking, word=True)} have no variable {name!r}")
    return list(view.pull(name, block=True))


def scatter(supervisor: Supervisor, name: str, array: ArrayLike, ranks: list[int]) -> None:
    import numpy as np

    _check_name(name)
    data = np.asarray(array)
    if data.ndim == 0:
        raise ValueError("scatter needs an array with at least one dimension")
    for engine, block in zip(supervisor.engines(ranks), np.array_split(data, len(ranks))):
        supervisor.client[engine].push({name: block}, block=False)
    supervisor.client.wait()


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
