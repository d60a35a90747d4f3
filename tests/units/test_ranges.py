"""Rank ranges and counts (mpinb/common/_ranges.py, _events.world_rank): one reading, errors that say what is wrong."""

from __future__ import annotations

import pytest

from mpinb.common._events import world_rank
from mpinb.common._ranges import format_ranks, parse_ranks, rank_count, rank_count_in_text

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


@pytest.mark.parametrize("spec, ranks", [
    (None, [0, 1, 2, 3]), ("all", [0, 1, 2, 3]), ("", [0, 1, 2, 3]), (2, [2]), ("0,2-3", [0, 2, 3]),
    (" 3, 1 ", [1, 3]), ([3, 1, 3], [1, 3]), (range(1, 3), [1, 2]), ("1-1", [1]),
])
def test_targets_are_read_as_people_write_them(spec, ranks):
    assert parse_ranks(spec, 4) == ranks


@pytest.mark.parametrize("spec, error, message", [
    ("4", ValueError, r"rank 4 outside the pool: it has 4 ranks \(0-3\)"),
    ([9, -1], ValueError, r"ranks -1, 9 outside the pool"),
    ("3-1", ValueError, "runs backwards"),
    ("1,,2", ValueError, "empty rank"),
    ("one", ValueError, "write ranks like '0,2-3'"),
    ("+3", ValueError, "write ranks like"), ("1_0", ValueError, "write ranks like"),  # int() takes both
    ([], ValueError, "selects no rank"),
    (True, TypeError, "must be ranks"),
    ([1.0], TypeError, "integer ranks"),
    (1.5, TypeError, "an int, a list"),
    ("0-3000000000", ValueError, r"ranks 4-3000000000 outside the pool"),
    (range(3_000_000_000), ValueError, r"ranks 4-2999999999 outside the pool"),
    (iter(range(10**12)), ValueError, r"rank 4 outside the pool"),
    (__import__("itertools").repeat(1), ValueError, "give each rank once"),
])
def test_bad_targets_say_what_is_wrong(spec, error, message):
    with pytest.raises(error, match=message):
        parse_ranks(spec, 4)


def test_rank_sets_are_written_compactly():
    assert format_ranks([5, 0, 1, 2, 2]) == "0-2, 5"
    assert format_ranks([3], word=True) == "rank 3"
    assert format_ranks(range(4), word=True) == "ranks 0-3"
    assert format_ranks([]) == ""


def test_one_rule_for_a_number_of_ranks():
    assert rank_count(3) == 3
    assert rank_count_in_text(" 12 ", "-n") == 12
    for bad, error in [(0, ValueError), (-1, ValueError), (2.0, TypeError), ("2", TypeError), (True, TypeError)]:
        with pytest.raises(error, match="must be a whole number, at least 1"):
            rank_count(bad)
    for text in ("0", "two", "-3", "1.5", ""):
        with pytest.raises(ValueError, match="-n must be a whole number, at least 1, not ") as info:
            rank_count_in_text(text, "-n")
        assert str(info.value).endswith(text if text.isdigit() else repr(text))


def test_world_rank_of_a_communicator_rank():
    assert world_rank([4, 6, 7], 1) == 6
    assert world_rank([4, 6, 7], 3) == -1  # not a member
    assert world_rank([4, 6, 7], -1) == -1  # ANY_SOURCE
    assert world_rank(None, 0) == -1  # members unknown
    assert world_rank([0, 1], None) == -1
