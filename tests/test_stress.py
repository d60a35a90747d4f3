"""A hundred aborts of many kinds at random moments (a new seed each run, so that runs add up),
with a second pool alive and a CPU hog beside them: no pool is ever left unusable, and the time
from each abort to a working next cell is reported (test-artifacts/stress-<MPI>.txt).
``MPINB_STRESS_SEED`` repeats a run, ``MPINB_STRESS_ABORTS`` sets how many (see workloads/aborts.py
for the kinds)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from _processes import SKIP_ON_INTEL

import mpinb
from mpinb.pool import find_mpiexec
from mpinb.pool._launch import mpi_family
from workloads.aborts import Campaign, check, describe, summary

pytestmark = [pytest.mark.every_mpi, SKIP_ON_INTEL]

ABORTS = int(os.environ.get("MPINB_STRESS_ABORTS", "100"))
SEED = int(os.environ.get("MPINB_STRESS_SEED", str(int(time.time()))))


@pytest.mark.slow
@pytest.mark.timeout(60 + 8 * ABORTS)
def test_aborts_of_every_kind_never_leave_a_pool_unusable(artifacts):
    shared_memory_before = set(glob.glob("/dev/shm/mpinb-*"))
    # the hog ends with the test process, also when that is killed before its finally runs
    hog = subprocess.Popen([sys.executable, "-c", "import ctypes, signal\n"
                            "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
                            "while True: pass"])
    try:
        with mpinb.Pool(2) as bystander, mpinb.Pool(4) as pool:
            check(bystander)
            campaign = Campaign(pool, SEED)
            try:
                aborts = campaign.run(ABORTS)
            finally:
                campaign.close()
            check(bystander)  # the other pool on the machine was not disturbed
    finally:
        hog.kill()
        hog.wait()
    stats = summary(aborts)
    mpi = mpi_family(find_mpiexec()) or "mpi"
    text = f"seed {SEED}, {mpi}, 4 ranks, a second pool and a CPU hog beside them\n{describe(stats)}\n"
    print(text)
    with open(os.path.join(artifacts, f"stress-{mpi}.txt"), "w") as handle:
        handle.write(text)
    with open(os.path.join(artifacts, f"stress-{mpi}.json"), "w") as handle:
        json.dump({"seed": SEED, "summary": stats, "aborts": [vars(a) for a in aborts]}, handle, indent=1)
    assert len(aborts) == ABORTS
    assert stats["by_kind"].keys() >= {"deadlocked ring", "sleep", "slow repr", "push", "script"}, stats["by_kind"]
    # only ranks inside a call that ignores interrupts may cost a restart
    needless = [a for a in aborts if a.restarted and a.kind != "untraced wait nobody answers"]
    assert not needless, f"restarts after aborts that can be interrupted (seed {SEED}): {needless}"
    # (a file of a process still alive is that process's: another test session's data move)
    left = {path for path in set(glob.glob("/dev/shm/mpinb-*")) - shared_memory_before
            if int(path.split("-")[1]) == os.getpid() or not psutil.pid_exists(int(path.split("-")[1]))}
    assert not left, f"a data move left files in shared memory: {sorted(left)}"
