"""Arguments checked at the door.

A wrong value fails at once, saying what was wrong and what is accepted, rather than later (a
timeout of NaN that never ends, a capacity of 0 that silently records nothing, a mistyped number
that fails deep inside a run)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def seconds(value: object, what: str) -> float:
    """A duration: a finite number of seconds above zero (``TypeError``/``ValueError`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds, not {value!r}"
                         + (" (for no limit, leave it out: None)" if value == math.inf else ""))
    return float(value)


def optional_seconds(value: object, what: str) -> float | None:
    """:func:`seconds`, or ``None`` (no limit, or the pool's default)."""
    return None if value is None else seconds(value, what)


def whole(value: object, what: str, minimum: int = 0) -> int:
    """A whole number of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number, at least {minimum}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be a whole number, at least {minimum}, not {value!r}")
    return value


def flag(value: object, what: str) -> bool:
    """``value`` if it is ``True`` or ``False``; a ``TypeError`` naming ``what`` otherwise."""
    if value is not True and value is not False:
        raise TypeError(f"{what} must be True or False, not {value!r}")
    return value


def positive(value: object, what: str) -> int:
    """A whole number of at least 1."""
    return whole(value, what, 1)


class Checked(Generic[T]):
    """An attribute checked by ``check(value, name)`` whenever it is set, at construction and
    after (``pool.max_output_lines = -1`` fails there, not in the next run)."""

    def __init__(self, check: Callable[[object, str], T]):
        self._check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]  # the descriptor itself, on the class
        return instance.__dict__[self._name]

    def __set__(self, instance: Any, value: object) -> None:
        instance.__dict__[self._name] = self._check(value, self._name)
