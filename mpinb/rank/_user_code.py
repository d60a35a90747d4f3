"""Whether this rank is running the notebook's code right now: what the interrupt handler and the
debugger ask, and only a run (``_execute``) marks.

Inside user code an interrupt raises ``KeyboardInterrupt`` and a namespace is not inspectable;
outside it (mpinb's own code before and after) an interrupt is held, and the idle namespace is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_inside = False


def is_running() -> bool:
    """Whether the rank is inside user code now: a run's body, or its value's repr and pickling."""
    return _inside


@contextmanager
def running() -> Iterator[None]:
    """The span of a run in which user code runs."""
    global _inside
    _inside = True
    try:
        yield
    finally:
        _inside = False
