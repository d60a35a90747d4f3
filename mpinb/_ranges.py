"""Ranks as people write them: ``"0,2-3"`` in, ``"ranks 0, 2-3"`` out; how many ranks a pool has."""

from __future__ import annotations

from collections.abc import Iterable

Targets = int | str | Iterable[int] | None
"""Which ranks: ``None`` (all), a rank, ranks, a ``range``, or text such as ``"0,2-3"``."""


def rank_count(value: object, what: str = "n (the number of ranks)") -> int:
    """A number of ranks: a whole number, at least 1. Every place that takes one checks it here."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number, at least 1, not {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be a whole number, at least 1, not {value!r}")
    return value


def rank_count_in_text(text: str, what: str) -> int:
    """:func:`rank_count` of a command-line argument or an environment variable (``ValueError``)."""
    try:
        return rank_count(int(text) if text.strip().isdigit() else text, what)
    except TypeError as err:
        raise ValueError(str(err)) from None


def parse_ranks(spec: Targets, size: int) -> list[int]:
    """Turn a targets spec (int, iterable of ints, range, or ``"0,2-3"``) into sorted unique ranks.

    Raises ``ValueError`` naming the offending part when a rank is outside ``0..size-1``.
    """
    if spec is None or (isinstance(spec, str) and spec.strip() in ("", "all", "*")):
        return list(range(size))
    if isinstance(spec, bool):
        raise TypeError(f"targets must be ranks, not {spec!r}")
    if isinstance(spec, int):
        ranks = [spec]
    elif isinstance(spec, str):
        ranks = []
        for part in spec.replace(" ", "").split(","):
            if not part:
                raise ValueError(f"empty rank in targets {spec!r}")
            lo, sep, hi = part.partition("-")
            try:
                if sep:
                    first, last = int(lo), int(hi)
                    if last < first:
                        raise ValueError(f"rank range {part!r} runs backwards")
                    ranks.extend(range(first, last + 1))
                else:
                    ranks.append(int(part))
            except ValueError as err:
                if "backwards" in str(err):
                    raise
                raise ValueError(
                    f"cannot read targets {spec!r}: write ranks like '0,2-3'"
                ) from None
    elif isinstance(spec, Iterable):
        ranks = []
        for item in spec:
            if isinstance(item, bool) or not isinstance(item, int):
                raise TypeError(f"targets must be integer ranks, got {item!r}")
            ranks.append(item)
    else:
        raise TypeError(f"targets must be an int, a list, a range or a string like '0,2-3', not {spec!r}")
    bad = sorted({r for r in ranks if not 0 <= r < size})
    if bad:
        raise ValueError(
            f"{format_ranks(bad, word=True)} outside the pool: it has {size} ranks (0-{size - 1})"
        )
    if not ranks:
        raise ValueError("targets selects no rank")
    return sorted(set(ranks))


def format_ranks(ranks: Iterable[int], word: bool = False) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"`` (``"ranks 0-2, 5"`` / ``"rank 5"`` with ``word``)."""
    ranks = sorted(set(ranks))
    parts = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    text = ", ".join(parts)
    if not word:
        return text
    return ("rank " if len(ranks) == 1 else "ranks ") + text
