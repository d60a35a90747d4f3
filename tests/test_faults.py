"""Faults injected at random moments: a rank killed (SIGKILL), stopped (SIGSTOP) or, across
hosts, cut off from the network, while a cell computes, while a collective runs, and while data
is pushed, pulled, scattered or gathered.

After each fault the pool must: name the cause (which rank, and how), never hand back corrupted
data (every move that reports success is checked value by value), work again (restarted by
itself or by ``restart()``), and leave nothing behind. The moments are random, from a seed that
the test prints (``MPINB_FAULT_SEED=<seed>`` replays a run); the scenarios taken per run are
bounded, so that the module stays within a few minutes on two cores.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import psutil
import pytest
from _processes import ARTIFACTS, wait_until_gone

import mpinb
from mpinb.common._ranges import parse_ranks
from mpinb.common._shared_memory import SHARED_MEMORY

pytestmark = [pytest.mark.every_mpi, pytest.mark.hosts]

SEED = int(os.environ.get("MPINB_FAULT_SEED") or random.SystemRandom().randrange(10**6))
ROWS = 4_000_000  # 32 MB of float64: a data move lasts long enough to be hit half-way
VICTIM = 2
HOSTS = {0: "node1", 1: "node2", 2: "node1", 3: "node2"}

# Each operation, and how its success is checked exactly (after it said it succeeded).
CELL = "import time\nfor _ in range(30):\n    time.sleep(0.02)\nrank * 10"
COLLECTIVE = ("import numpy as np\nfor _ in range(200):\n    total = comm.allreduce(np.full(20000, rank + 1.0))\n"
              "total[0]")
SETUP = (f"import numpy as np\ndata = np.arange({ROWS}, dtype=float) * (rank + 1)\n"
         "part = np.array_split(data, size)[rank]")


def _expected(name: str, size: int) -> Callable[[object], bool]:
    full = np.arange(ROWS, dtype=float)
    gathered = np.concatenate([np.array_split(full * (r + 1), size)[r] for r in range(size)])
    return {
        "cell": lambda value: value == {r: r * 10 for r in range(size)},
        "collective": lambda value: value == {r: size * (size + 1) / 2 for r in range(size)},
        "push": lambda value: value is None,
        "pull": lambda value: all(np.array_equal(got, full * (r + 1)) for r, got in enumerate(value)),
        "scatter": lambda value: value is None,
        "gather": lambda value: np.array_equal(value, gathered),
    }[name]


def _operations(pool: mpinb.Pool, pushed: np.ndarray) -> dict[str, Callable[[], object]]:
    return {
        "cell": lambda: pool.run(CELL, timeout=60).value,
        "collective": lambda: pool.run(COLLECTIVE, timeout=60).value,
        "push": lambda: pool.push({"pushed": pushed}, timeout=60),
        "pull": lambda: pool.pull("data", timeout=60),
        "scatter": lambda: pool.scatter("scattered", pushed, timeout=60),
        "gather": lambda: pool.gather("part", timeout=60),
    }


def _moves_arrived(pool: mpinb.Pool, pushed: np.ndarray) -> None:
    """What a push and a scatter that said they succeeded left on the ranks: exactly the array."""
    digest = "import hashlib\n{name}.shape, hashlib.sha256(np.ascontiguousarray({name})).hexdigest()"
    import hashlib

    whole = (pushed.shape, hashlib.sha256(pushed).hexdigest())
    assert pool.run(digest.format(name="pushed")).value == {r: whole for r in range(pool.size)}
    parts = np.array_split(pushed, pool.size)
    assert pool.run(digest.format(name="scattered")).value == {
        r: (part.shape, hashlib.sha256(np.ascontiguousarray(part)).hexdigest()) for r, part in enumerate(parts)}


@dataclass
class Fault:
    name: str
    hit: Callable[[int], None]  # strikes rank VICTIM, given its process id
    undo: Callable[[mpinb.Pool], None]  # lets the host recover, if it can
    cause: str  # what the error must say


def _signal(signum: int) -> Callable[[int], None]:
    return lambda pid: os.kill(pid, signum)


def _nothing(pool: mpinb.Pool) -> None:
    pass


# (across hosts, ranks gone within moments of each other are named together: "one of ranks 0-3")
KILL = Fault("kill", _signal(signal.SIGKILL), _nothing,
             rf"(rank {VICTIM}|one of ranks (?P<ranks>[\d, -]+))( on [\w, ]+)? died")
STOP = Fault("stop", _signal(signal.SIGSTOP), _nothing, rf"rank {VICTIM}( on node1)? stopped answering")


def _strike(pool: mpinb.Pool, fault: Fault, operation: str, run: Callable[[], object], moment: float,
            report: list[str]) -> None:
    """``run()`` with ``fault`` ``moment`` seconds in; checks what follows, as described above."""
    size = pool.size
    pid = pool.status()[VICTIM]["pid"]
    striker = threading.Timer(moment, fault.hit, (pid,))
    began = time.monotonic()
    striker.start()
    error: BaseException | None = None
    try:
        value = run()
    except (mpinb.RankDiedError, mpinb.TransferError, mpinb.MPIHangError) as err:
        error = err
    finally:
        striker.join()
    if error is None:  # the fault came after the operation: its result must be exact all the same,
        assert _expected(operation, size)(value), f"{operation} said it succeeded, with a wrong result"
        with pytest.raises(mpinb.RankDiedError) as info:  # and the next cell meets the fault
            pool.run("comm.allreduce(1)", timeout=60)
        error = info.value
    took = time.monotonic() - began
    message = str(error)
    report.append(f"{fault.name:5} {operation:10} at {moment:.2f} s: {type(error).__name__} after {took:.1f} s: "
                  f"{message[:160]}")
    assert isinstance(error, mpinb.RankDiedError), message
    named = re.search(fault.cause, message)
    assert named, message
    if named.groupdict().get("ranks"):
        assert VICTIM in parse_ranks(named["ranks"].replace(" ", ""), 4), message
    assert "the pool was restarted" in message or "could not start again" in message, message
    fault.undo(pool)
    if "could not start again" in message:
        pool.restart()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, "the victim is gone"
    assert pool.run("comm.allreduce(1)", timeout=60).value == {r: size for r in range(size)}, "works again"


def _scenarios(faults: list[Fault], operations: list[str], count: int, rng: random.Random) -> list[tuple]:
    """``count`` (fault, operation) pairs at random: each fault, and each operation, as often as
    ``count`` allows (with 2 faults and 6 operations, 6 pairs meet each operation once)."""
    shuffled = operations[:]
    rng.shuffle(shuffled)
    firsts = rng.sample(range(len(faults)), len(faults))
    return [(faults[firsts[i % len(faults)]], shuffled[i % len(shuffled)]) for i in range(count)]


def _write_report(name: str, report: list[str]) -> None:
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, f"faults-{name}.txt"), "w") as handle:
        handle.write(f"seed {SEED} (MPINB_FAULT_SEED={SEED} replays it)\n" + "\n".join(report) + "\n")


def _fault_run(pool: mpinb.Pool, faults: list[Fault], count: int, name: str) -> None:
    rng = random.Random(SEED)
    pushed = np.arange(ROWS, dtype=float) * 3
    report: list[str] = []
    print(f"fault injection seed {SEED}")
    try:
        pool.run(SETUP, timeout=60)  # with no fault, every operation is exact; and how long each takes
        lasts = {}
        for operation, run in _operations(pool, pushed).items():
            began = time.monotonic()
            assert _expected(operation, pool.size)(run()), operation
            lasts[operation] = time.monotonic() - began
        _moves_arrived(pool, pushed)
        report.append("without faults: " + ", ".join(f"{op} {seconds:.2f} s" for op, seconds in lasts.items()))
        for fault, operation in _scenarios(faults, list(lasts), count, rng):
            pool.run(SETUP, timeout=60)
            moment = rng.uniform(0.0, lasts[operation])  # a moment while it runs, mostly
            _strike(pool, fault, operation, _operations(pool, pushed)[operation], moment, report)
    finally:
        _write_report(name, report)


def _shared_memory_files() -> set[str]:
    return {name for name in os.listdir(SHARED_MEMORY) if name.startswith(f"mpinb-{os.getpid()}-")}


@pytest.mark.timeout(600)
def test_faults_at_random_moments_on_this_host(existing_pools):
    before = _shared_memory_files()
    with mpinb.Pool(4, stop_timeout=5) as pool:
        _fault_run(pool, [KILL, STOP], count=4, name=f"local-{os.path.basename(sys.prefix)}")
    assert not wait_until_gone(10, existing_pools), "nothing of the pool is left"
    assert _shared_memory_files() <= before, "no array in flight is left in /dev/shm"


# -- across hosts ---------------------------------------------------------------------------------

needs_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="needs root (network namespaces) and unshare: `make test` runs as root")


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[list, str]]:
    from multihost_cluster import launch_agent, namespace_hosts

    with namespace_hosts(2) as (_, made):
        yield made, launch_agent(made)


def _link(host, state: str) -> None:
    links = subprocess.run(["ip", "netns", "exec", host.namespace, "ip", "-o", "link", "show"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    name = next(line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if "lo:" not in line)
    subprocess.run(["ip", "netns", "exec", host.namespace, "ip", "link", "set", "dev", name, state],
                   check=True, timeout=30)


@needs_namespaces
@pytest.mark.timeout(900)
def test_faults_at_random_moments_across_hosts(hosts, existing_pools):
    """Rank 2 runs on node1 with rank 0; node2 (ranks 1 and 3) is the host whose cable is pulled."""
    from multihost_cluster import agent_arguments

    from mpinb.pool._launch import find_mpiexec, host_arguments

    made, agent = hosts
    node2 = made[1]
    cut = Fault("cut", lambda pid: _link(node2, "down"), lambda pool: _link(node2, "up"),
                r"ranks 1, 3 on node2 stopped answering")
    mpiexec = find_mpiexec()
    pool = mpinb.Pool(4, mpiexec_args=[*host_arguments(mpiexec, "node1,node2"), *agent_arguments(mpiexec, agent)],
                      start_timeout=60, stop_timeout=5)
    with pool:
        assert {row["rank"]: row["host"] for row in pool.status()} == HOSTS
        _fault_run(pool, [KILL, STOP, cut], count=3, name="across-hosts")
    assert not wait_until_gone(10, existing_pools)
    for host in made:
        listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
        deadline = time.monotonic() + 15
        while listed.split() and time.monotonic() < deadline:
            time.sleep(0.2)
            listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
        assert not listed.split(), f"nothing is left on {host.name}"
