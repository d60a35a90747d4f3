"""Rank-side helpers (mpinb/rank/): output caps and spawned command lines, checked without MPI, in milliseconds."""

from __future__ import annotations

import io
import sys

import pytest

from mpinb.rank._output import capped_output

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


def test_output_is_cut_at_the_line_cap_with_a_count(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with capped_output(max_lines=3, max_chars=10_000) as dropped:
        for i in range(10):
            print(i)
    lines = out.getvalue().splitlines()
    expected = {"lines": 7, "chars": 14, "wrote": 1}
    assert lines[:4] == ["0", "1", "2", ""] and dropped == expected, "no fourth line begins"
    assert "7 more lines" in out.getvalue()


def test_output_is_cut_at_the_character_cap_inside_one_write(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with capped_output(max_lines=100, max_chars=5) as dropped:
        sys.stdout.write("abcdefgh")
    assert out.getvalue().startswith("abcde\n[mpinb] output cut") and dropped["chars"] == 3


def test_a_python_command_line_splits_into_pythons_options_and_the_program():
    from mpinb.rank.mpi._python_command import python_program

    assert python_program(["child.py", "-u", "x"]) == ([], ["child.py", "-u", "x"])
    assert python_program(["-u", "-X", "dev", "-Wignore", "-m", "mpi4py.futures.server"]) == (
        ["-u", "-X", "dev", "-Wignore"], ["-m", "mpi4py.futures.server"])
    assert python_program(["-OB", "-c", "print(1)", "a"]) == (["-OB"], ["-c", "print(1)", "a"])
    for unreadable in ([], ["-"], ["-i", "x.py"], ["--help"], ["-m"], ["-u"]):
        assert python_program(unreadable) is None, unreadable
