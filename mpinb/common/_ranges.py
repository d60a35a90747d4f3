"""Ranks as people write them: ``"0,2-3"`` in, ``"ranks 0, 2-3"`` out; how many ranks a pool has."""

from __future__ import annotations

from collections.abc import Collection, Iterable

MAX_LISTED = 100  # items per rank of the pool that an iterator of targets may yield (repeats included)

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

    Raises ``ValueError`` naming the offending part when a rank is outside ``0..size-1``; ranges
    are checked before they are expanded (``"0-3000000000"`` fails at once, in no memory).
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
            first_text, dash, last_text = part.partition("-")
            first = _rank_number(first_text, spec)
            if dash:
                last = _rank_number(last_text, spec)
                if last < first:
                    raise ValueError(f"rank range {part!r} runs backwards")
                _check_ends(first, last, size)
                ranks.extend(range(first, last + 1))
            else:
                ranks.append(first)
    elif isinstance(spec, range):
        if len(spec):
            _check_ends(min(spec[0], spec[-1]), max(spec[0], spec[-1]), size)
        ranks = list(spec)
    elif isinstance(spec, Collection):
        ranks = []
        for item in spec:
            if isinstance(item, bool) or not isinstance(item, int):
                raise TypeError(f"targets must be integer ranks, got {item!r}")
            ranks.append(item)
    elif isinstance(spec, Iterable):
        ranks = []
        for item in spec:
            if isinstance(item, bool) or not isinstance(item, int):
                raise TypeError(f"targets must be integer ranks, got {item!r}")
            _check_ends(item, item, size)  # at the first: an endless iterator must not run on
            ranks.append(item)
            if len(ranks) > MAX_LISTED * max(size, 1):
                raise ValueError(f"targets lists more than {MAX_LISTED} ranks per rank of the pool: "
                                 "give each rank once")
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


def _rank_number(text: str, spec: str) -> int:
    """One rank of a targets text: ASCII digits only (``int`` would also take "+3", "1_0", "٣"),
    the rule that the trace view's rank filter (``widgets/trace.js``) follows too."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"cannot read targets {spec!r}: write ranks like '0,2-3'")
    return int(text)


def _check_ends(first: int, last: int, size: int) -> None:
    """Ranks ``first..last`` within the pool, told as :func:`parse_ranks` tells any bad rank."""
    spans = [(first, min(last, -1)), (max(first, size), last)]
    bad = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in spans if lo <= hi]
    if bad:
        word = "rank" if len(bad) == 1 and "-" not in bad[0][1:] else "ranks"
        raise ValueError(f"{word} {', '.join(bad)} outside the pool: it has {size} ranks (0-{size - 1})")


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
