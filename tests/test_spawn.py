"""Spawned processes in a pool: ``MPI.COMM_SELF.Spawn`` and ``MPIPoolExecutor`` work from a cell
on each MPI (Open MPI's launcher is let spawn beyond the cores), and a child that never ends is
ended with the pool."""

from __future__ import annotations

import time

import psutil
import pytest

import mpinb

CHILD = """\
import sys, time
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
start = parent.bcast(None, root=0)
parent.send(MPI.COMM_WORLD.Get_rank() * 100 + start, dest=0)
if sys.argv[1:] == ["linger"]:
    time.sleep(300)
parent.Disconnect()
"""


@pytest.fixture
def child(tmp_path) -> str:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return str(path)


@pytest.mark.timeout(120)
def test_spawn_and_a_pool_executor_work_from_a_cell(pool4, child):
    res = pool4.run(
        "import sys, math\n"
        "from mpi4py.futures import MPIPoolExecutor\n"
        "got = None\n"
        "if rank == 0:\n"
        f"    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{child!r}], maxprocs=2)\n"
        "    inter.bcast(7, root=MPI.ROOT)\n"
        "    got = sorted(inter.recv(source=MPI.ANY_SOURCE) for _ in range(2))\n"
        "    inter.Disconnect()\n"
        "    with MPIPoolExecutor(max_workers=2) as executor:\n"
        "        got.append(list(executor.map(math.sqrt, [4, 9, 16])))\n"
        "got", timeout=90)
    assert res.value[0] == [7, 107, [2.0, 3.0, 4.0]]
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}


def _children(pattern: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(pattern in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


@pytest.mark.timeout(120)
def test_a_spawned_child_that_never_ends_is_ended_with_the_pool(child):
    with mpinb.Pool(2) as pool:
        pool.run(f"import sys\nif rank == 0:\n    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{child!r}, "
                 "'linger'], maxprocs=1)\n    inter.bcast(1, root=MPI.ROOT)\n    inter.recv()\n", timeout=60)
        assert len(_children(child)) == 1, "the child lingers after the cell"
    deadline = time.monotonic() + 15
    while _children(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children(child), "the pool's stop ended its spawned child"
