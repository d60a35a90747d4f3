"""Plain mpiexec's kept reports of mpi4py's suite (tests/_mpiexec_baselines.py): what is kept is
given back whole, or not at all."""

from __future__ import annotations

import os

import _mpiexec_baselines as baselines
import pytest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]

REPORTS = {"test_a": [{"ran": 3, "outcomes": {"t1": "ok"}, "details": {}, "seconds": 0.5}] * 2,
           "test_b": [{"ran": 1, "outcomes": {"t2": "fail"}, "details": {"t2": "boom"}, "seconds": 2.0}] * 2}
SECONDS = {"test_a": 0.5, "test_b": 2.0}


def test_a_kept_baseline_comes_back_as_it_was_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("MPINB_SUITE_BASELINE", raising=False)
    baselines.save(tmp_path, "k1", {"python": "3.11"}, REPORTS, SECONDS)
    assert baselines.load(tmp_path, "k1", ["test_a", "test_b"]) == (REPORTS, SECONDS)
    assert baselines.load(tmp_path, "k1", ["test_b"]) == ({"test_b": REPORTS["test_b"]}, {"test_b": 2.0})
    assert not list(tmp_path.glob(".*partial")), "a partial file was left"


def test_no_baseline_is_given_when_any_module_is_missing_or_the_file_is_unreadable(tmp_path, monkeypatch):
    monkeypatch.delenv("MPINB_SUITE_BASELINE", raising=False)
    baselines.save(tmp_path, "k1", {}, REPORTS, SECONDS)
    assert baselines.load(tmp_path, "k1", ["test_a", "test_c"]) is None
    assert baselines.load(tmp_path, "other", ["test_a"]) is None
    (tmp_path / "k2.json").write_text('{"reports": {"test_a"')  # (cut off)
    assert baselines.load(tmp_path, "k2", ["test_a"]) is None
    (tmp_path / "k3.json").write_text("[]")
    assert baselines.load(tmp_path, "k3", ["test_a"]) is None
    baselines.forget(tmp_path, "k1")
    assert baselines.load(tmp_path, "k1", ["test_a"]) is None


def test_a_fresh_run_can_be_asked_for_and_a_misspelling_is_refused(tmp_path, monkeypatch):
    baselines.save(tmp_path, "k1", {}, REPORTS, SECONDS)
    monkeypatch.setenv("MPINB_SUITE_BASELINE", "fresh")
    assert baselines.load(tmp_path, "k1", ["test_a"]) is None
    monkeypatch.setenv("MPINB_SUITE_BASELINE", "kept")
    assert baselines.load(tmp_path, "k1", ["test_a"]) is not None
    monkeypatch.setenv("MPINB_SUITE_BASELINE", "refresh")
    with pytest.raises(ValueError, match="MPINB_SUITE_BASELINE='refresh': give 'fresh'"):
        baselines.load(tmp_path, "k1", ["test_a"])


def test_only_the_most_recently_used_baselines_are_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("MPINB_SUITE_BASELINE", raising=False)
    for i in range(baselines.KEEP):
        baselines.save(tmp_path, f"k{i}", {}, REPORTS, SECONDS)
        os.utime(tmp_path / f"k{i}.json", (1_000_000 + i, 1_000_000 + i))
    assert baselines.load(tmp_path, "k0", ["test_a"]) is not None  # (the oldest, now used)
    (tmp_path / ".k9.123.partial").write_text("{")
    os.utime(tmp_path / ".k9.123.partial", (1_000_000, 1_000_000))  # (a session stopped while it wrote)
    baselines.save(tmp_path, "newest", {}, REPORTS, SECONDS)
    kept = {path.stem for path in tmp_path.glob("*.json")}
    assert len(kept) == baselines.KEEP and {"newest", "k0", "k2"} <= kept and "k1" not in kept
    assert not list(tmp_path.glob(".*partial"))


def test_a_baseline_that_another_session_removes_meanwhile_is_no_error(tmp_path, monkeypatch):
    for i in range(baselines.KEEP + 1):
        baselines.save(tmp_path, f"k{i}", {}, REPORTS, SECONDS)
    real_stat = type(tmp_path).stat

    def stat_of_a_removed_file(path, *args, **kwargs):
        if path.name == "k0.json":
            raise FileNotFoundError(path)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(type(tmp_path), "stat", stat_of_a_removed_file)
    baselines.save(tmp_path, "newest", {}, REPORTS, SECONDS)
    monkeypatch.undo()
    assert (tmp_path / "newest.json").exists()
    assert len(list(tmp_path.glob("*.json"))) == baselines.KEEP
