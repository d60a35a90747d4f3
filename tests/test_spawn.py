"""Spawned processes in a pool: ``MPI.COMM_SELF.Spawn`` and ``MPIPoolExecutor`` work from a cell
on each MPI (Open MPI's launcher is let spawn beyond the cores), are traced on lanes of their own,
a ``Disconnect`` that a child never joins is interruptible where MPI's own waits, and a child that
never ends is ended with the pool."""

from __future__ import annotations

import sys
import time

import psutil
import pytest
from _processes import SKIP_ON_INTEL

import mpinb
from mpinb.errors import MPIHangError
from mpinb.trace._svg import space_time_svg

pytestmark = [pytest.mark.every_mpi, SKIP_ON_INTEL]

CHILD = """\
import sys, time
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
start = parent.bcast(None, root=0)
parent.send(MPI.COMM_WORLD.Get_rank() * 100 + start, dest=0)
MPI.COMM_WORLD.Barrier()
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


@pytest.mark.timeout(180)
def test_a_spawned_pair_and_a_pool_executors_workers_are_traced_on_lanes_of_their_own(pool4, child):
    spawned = pool4.run(
        "import sys\n"
        "if rank == 0:\n"
        f"    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{child!r}], maxprocs=2)\n"
        "    inter.bcast(7, root=MPI.ROOT)\n"
        "    got = sorted(inter.recv(source=MPI.ANY_SOURCE) for _ in range(2))\n"
        "    inter.Disconnect()\n", timeout=90).trace
    assert spawned.lanes == 6 and spawned.ranks == [0, 1, 2, 3, 4, 5]
    assert spawned.lane_names()[3:] == ["rank 3", "child 0", "child 1"]
    assert [spawned.spawned[lane]["rank"] for lane in (4, 5)] == [0, 1]
    messages = spawned.messages()
    (inter,) = {m["comm"] for m in messages}
    assert inter.startswith("spawn") and inter.endswith("@0")
    assert sorted((m["source"], m["dest"], m["send_op"], m["recv_op"]) for m in messages) == [
        (4, 0, "send", "recv"), (5, 0, "send", "recv")]
    assert spawned.matrix("messages")[4:, 0].tolist() == [1, 1]
    by_op = {(c["op"], c["comm"]): sorted(c["ranks"]) for c in spawned.collectives()}
    assert by_op[("Barrier", f"{inter}.world")] == [4, 5], "the children's own world, on their lanes"
    assert by_op[("Disconnect", inter)] == [0, 4, 5], "both sides of the intercommunicator"
    assert by_op[("Spawn", "self@0")] == [0]
    assert (spawned.events["line"][spawned.events["rank"] >= 4] > 0).all()
    assert spawned.spawned_running == 0
    assert ">child 1</text>" in space_time_svg(spawned)

    executor = pool4.run(
        "import math\nfrom mpi4py.futures import MPIPoolExecutor\n"
        "if rank == 0:\n"
        "    with MPIPoolExecutor(max_workers=2) as executor:\n"
        "        roots = list(executor.map(math.sqrt, [4, 9, 16]))\n", timeout=90).trace
    assert executor.lane_names()[4:] == ["child 0", "child 1"]
    pairs = {(m["source"], m["dest"]) for m in executor.messages()}
    assert {(0, 4), (4, 0), (0, 5), (5, 0)} <= pairs, "tasks out to both workers, results back"


@pytest.mark.timeout(120)
def test_a_spawn_by_every_rank_of_a_communicator_gives_its_children_to_all_of_them(pool4, tmp_path):
    child = tmp_path / "greet.py"
    child.write_text("from mpi4py import MPI\nparent = MPI.Comm.Get_parent()\n"
                     "for r in range(parent.Get_remote_size()):\n"
                     "    parent.send(MPI.COMM_WORLD.Get_rank(), dest=r)\nparent.Disconnect()\n")
    # after an aborted run (rank 0 raised while the others waited), in a fresh world
    aborted = pool4.run("if rank == 0:\n    raise ValueError('on purpose')\ncomm.Barrier()\n", check=False, timeout=60)
    assert aborted.released, "the other ranks were released from the Barrier"
    res = pool4.run(f"import sys\ninter = comm.Spawn(sys.executable, args=[{str(child)!r}], maxprocs=2, root=1)\n"
                    "got = sorted(inter.recv(source=s) for s in range(2))\ninter.Disconnect()\ngot", timeout=90)
    assert res.value == {r: [0, 1] for r in range(4)}
    trace = res.trace
    assert trace.lane_names()[4:] == ["child 0", "child 1"]
    assert [trace.spawned[lane]["root"] for lane in (4, 5)] == [1, 1], "the spawn's root brought them"
    assert sorted((m["source"], m["dest"]) for m in trace.messages()) == [(c, r) for c in (4, 5) for r in range(4)]
    (spawn,) = [c for c in trace.collectives() if c["op"] == "Spawn"]
    assert sorted(spawn["ranks"]) == [0, 1, 2, 3] and spawn["comm"] == "world"


@pytest.mark.timeout(120)
def test_a_disconnect_that_a_child_never_joins_is_as_mpis_own_and_interruptible(tmp_path):
    """Open MPI's ``Disconnect`` waits for the other group: diagnosed and interrupted. MPICH's
    returns at once: so does the traced one, and the child's lane is counted as not recorded."""
    child = tmp_path / "silent.py"
    child.write_text("import time\nfrom mpi4py import MPI\nMPI.Comm.Get_parent().send(1, dest=0)\ntime.sleep(300)\n")
    cell = ("import sys\nif rank == 0:\n"
            f"    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{str(child)!r}], maxprocs=1)\n"
            "    inter.recv()\n    inter.Disconnect()\n")
    with mpinb.Pool(2) as pool:
        if pool.run("MPI.get_vendor()[0]").value[0] == "Open MPI":
            with pytest.raises(MPIHangError) as caught:
                pool.run(cell, timeout=8)
            assert "rank 0: Disconnect on communicator 'spawn" in str(caught.value)
            assert "at line 5" in str(caught.value)
        else:
            trace = pool.run(cell, timeout=30).trace
            assert trace.spawned_running == 1 and trace.lanes == 2, "the silent child left no recording"
        assert pool.run("comm.allreduce(1)", timeout=30).value == {0: 2, 1: 2}
    deadline = time.monotonic() + 15
    while _children(str(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children(str(child)), "the pool's stop ended the child"


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


@pytest.mark.timeout(20)
def test_a_spawned_program_runs_as_python_runs_it(tmp_path):
    """What the bootstrap of a spawned program runs (script, -m module, -c code) sees what it
    would under ``python`` itself: its name, argv, path, and a ``__main__`` its classes pickle in."""
    import subprocess

    probe = ("import sys, pickle, json, os\n"
             "class Thing: pass\n"
             "print(json.dumps([__name__, [os.path.basename(a) for a in sys.argv], os.path.basename(sys.path[0]),\n"
             "                  type(pickle.loads(pickle.dumps(Thing()))).__name__]))\n")
    (tmp_path / "probe.py").write_text(probe)
    bootstrap = "import sys\nfrom mpinb.rank.mpi._spawned import run\nrun(sys.argv[1:])"
    for program in (["probe.py", "x", "-y"], ["-m", "probe", "z"], ["-c", probe, "w"]):
        plain = subprocess.run([sys.executable, *program], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        booted = subprocess.run([sys.executable, "-c", bootstrap, *program], cwd=tmp_path, capture_output=True,
                                text=True, timeout=30)
        assert plain.returncode == 0, plain.stderr
        assert (booted.returncode, booted.stdout) == (0, plain.stdout), (program, booted.stderr)
    missing = subprocess.run([sys.executable, "-c", bootstrap, "gone.py"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=30)
    assert missing.returncode == 2 and "can't open file" in missing.stderr and "gone.py" in missing.stderr
