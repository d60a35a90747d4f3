"""Whether this rank is running the notebook's code right now.

The interrupt handler and the debugger ask this, and only a run (``_execute``) marks it.

Inside user code an interrupt raises ``KeyboardInterrupt`` and a namespace is not inspectable;
outside it (mpinb's own code before and after) an interrupt is held, and the idle namespace is.
The marks are plain calls, not a context manager: the interrupt handler holds an interrupt that
arrives in mpinb's own frames, and a context manager's would be contextlib's.
"""

from __future__ import annotations

_inside = False


def is_running() -> bool:
    """Whether the rank is inside user code now: a run's body, or its value's repr and pickling."""
    return _inside


def enter() -> None:
    """A run's user code starts."""
    global _inside
    _inside = True


def leave() -> None:
    """A run's user code has ended, however it ended."""
    global _inside
    _inside = False
