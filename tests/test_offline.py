"""Collecting the tests needs no network: what a test fetches (mpi4py's own suite), a fixture
fetches when the test runs, so `pytest --collect-only` and `make check` work offline."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare for a network namespace of its own: `make test` runs as root")
@pytest.mark.timeout(180)
def test_every_test_is_collected_without_the_network_and_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run(["unshare", "--net", sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert any("test_mpi4py_suite.py::test_module_runs_as_under_mpiexec" in line for line in collected)
    assert len(collected) > 900, done.stdout[-500:]
    assert not cache.exists() or not any(cache.rglob("*")), "collecting fetched something"
