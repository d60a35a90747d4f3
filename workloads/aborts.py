"""Aborts of many kinds at random moments, and the time from each abort to a working next cell.

Shared by the stress test (``tests/test_stress.py``: no pool may be left unusable) and the bench
(``bench/aborts.py``, ``python -m bench --only recovery``: the figures beside plain ipyparallel's
only way back from a hung MPI job, a new cluster); neither depends on the other. Each abort is a
timeout or an interrupt (the notebook's stop button, ``_thread.interrupt_main``) at a random moment
of a random cell: a deadlock, a collective that one rank misses, a failing rank, sleeps, busy loops,
a long C call, a slow ``__repr__``, an untraced blocking call (the ranks cannot stop: the pool
restarts), a data move, a script run as mpiexec would. After each, a check cell (a collective and a
ring on the world) must give the right answer.
"""

from __future__ import annotations

import _thread
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import mpinb

RING = "comm.send([rank] * 500_000, dest=(rank + 1) % size)\ndata = comm.recv(source=(rank - 1) % size)\n"
SCRIPT = ("from mpi4py import MPI\ncomm = MPI.COMM_WORLD\nrank, size = comm.Get_rank(), comm.Get_size()\n"
          "import time\ntime.sleep(0.05 * rank)\n" + RING)
CELLS = {  # name -> (code, traced, weight)
    "deadlocked ring": (RING, True, 4),
    "collective one rank misses": ("import numpy as np\nout = np.zeros(8)\n"
                                   "if rank != size - 1:\n    comm.Allreduce(np.ones(8), out)\n", True, 3),
    "failing rank, others waiting": ("import time\nif rank == 1:\n    time.sleep(0.2)\n    1 / 0\n"
                                     "comm.bcast(rank, root=1)\n", True, 2),
    "sleep": ("import time\ntime.sleep(30)\n", True, 2),
    "busy loop": ("x = 0\nwhile True:\n    x += 1\n", True, 2),
    "long C call": ("sum(range(10**7))\nimport time\ntime.sleep(30)\n", True, 2),
    "slow repr": ("class Slow:\n    def __repr__(self):\n        import time\n        time.sleep(30)\n"
                  "        return 'slow'\nSlow()\n", True, 2),
    "untraced wait nobody answers": ("if rank == 0:\n    comm.Recv(bytearray(8), source=1, tag=99)\n", False, 1),
    "exchanges, then a sleep": ("for i in range(200):\n    comm.sendrecv(i, dest=(rank + 1) % size, "
                                "source=(rank - 1) % size)\n    comm.allreduce(i)\nimport time\ntime.sleep(30)\n",
                                True, 2),
}
DATA_WEIGHT = 2  # a push or a pull of a 40 MB array, interrupted
SCRIPT_WEIGHT = 2  # a deadlocking script through run_file
CHECK = ("(comm.allreduce(1), comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size),"
         " MPI.COMM_WORLD.allreduce(rank))")


@dataclass
class Abort:
    kind: str
    how: str  # "timeout" or "interrupt"
    at: float  # seconds into the call
    recovered_s: float  # from the abort to the check cell's right answer
    restarted: bool  # the pool started fresh processes (ranks that could not stop)
    error: str  # what the aborted call raised


def check(pool: mpinb.Pool) -> None:
    """A collective and a ring on the world: raises unless every rank gives the right answer."""
    n = pool.size
    values = pool.run(CHECK, timeout=60, trace=False).value
    expected = {r: (n, (r - 1) % n, n * (n - 1) // 2) for r in range(n)}
    if values != expected:
        raise AssertionError(f"the pool answers wrongly after an abort: {values}")


def interrupted(call: Callable[[], object], after: float) -> tuple[BaseException | None, float | None]:
    """Run ``call()``, interrupting the main thread after ``after`` seconds (as the stop button
    does) unless it ended first. ``(what it raised, when the interrupt came)``."""
    fired: list[float] = []

    def stop_button() -> None:
        fired.append(time.monotonic())
        _thread.interrupt_main()

    timer = threading.Timer(after, stop_button)
    raised: BaseException | None = None
    try:
        try:
            timer.start()
            call()
        finally:
            timer.cancel()
            timer.join()
            time.sleep(0.001)  # an interrupt that fired as the call ended is raised here, not later
    except BaseException as err:  # noqa: BLE001 - what the aborted call raised is the result
        raised = err
    return raised, (fired[0] if fired else None)


class Campaign:
    """Aborts on one pool, chosen by a seeded generator (print the seed to repeat a run)."""

    def __init__(self, pool: mpinb.Pool, seed: int, kinds: dict | None = None):
        self.pool = pool
        self.rng = random.Random(seed)
        self.cells = kinds if kinds is not None else CELLS
        self.kinds = [*self.cells, "push", "pull", "script"]
        self.weights = [w for _, _, w in self.cells.values()] + [DATA_WEIGHT, DATA_WEIGHT, SCRIPT_WEIGHT]
        self.folder = tempfile.mkdtemp(prefix="mpinb-aborts-")
        self.script = os.path.join(self.folder, "deadlock.py")
        with open(self.script, "w") as handle:
            handle.write(SCRIPT)
        self.array = np.arange(5_000_000, dtype=np.float64)  # 40 MB
        self.aborts: list[Abort] = []

    def close(self) -> None:
        os.remove(self.script)
        os.rmdir(self.folder)

    def run(self, count: int, deadline: float | None = None) -> list[Abort]:
        """``count`` aborts: every kind once first (in a seeded order, so that a short campaign
        still has each), then kinds drawn by weight."""
        kinds = list(self.kinds)
        self.rng.shuffle(kinds)
        for index in range(count):
            if deadline is not None and time.monotonic() > deadline:
                break
            self.aborts.append(self.one(kinds[index] if index < len(kinds) else None))
        return self.aborts

    def one(self, kind: str | None = None) -> Abort:
        """One abort of ``kind``, or of a kind drawn by weight."""
        if kind is None:
            kind = self.rng.choices(self.kinds, self.weights)[0]
        data = kind in ("push", "pull")  # a move of 40 MB takes a few tens of milliseconds
        at = self.rng.uniform(0.001, 0.04) if data else self.rng.uniform(0.05, 1.5)
        how = "interrupt" if data else self.rng.choice(["timeout", "interrupt"])
        starts = self.pool._supervisor  # a restart makes a new one
        raised, abort_at = self._abort(kind, how, at)
        if abort_at is None:  # ended before the abort came (a push can be quick): not an abort
            abort_at = time.monotonic()
        check(self.pool)
        recovered = time.monotonic() - abort_at
        if kind == "push":
            self._check_pushed()
        error = "" if raised is None else f"{type(raised).__name__}: {str(raised)[:300]}"
        return Abort(kind, how, at, recovered, self.pool._supervisor is not starts, error)

    def _abort(self, kind: str, how: str, at: float) -> tuple[BaseException | None, float | None]:
        pool = self.pool
        if kind == "push":
            return interrupted(lambda: pool.push({"big": self.array}), at)
        if kind == "pull":
            pool.push({"big": self.array})
            return interrupted(lambda: pool.pull("big"), at)
        if kind == "script":
            call = lambda timeout=None: pool.run_file(self.script, timeout=timeout)
        else:
            code, traced, _ = self.cells[kind]
            call = lambda timeout=None: pool.run(code, timeout=timeout, trace=traced)
        if how == "interrupt":
            return interrupted(call, at)
        began = time.monotonic()
        try:
            call(at)
        except BaseException as err:  # noqa: BLE001 - the timeout's exception is the result
            return err, began + at
        return None, None

    def _check_pushed(self) -> None:
        """An interrupted push left the array whole on every rank, or on none (never a part)."""
        sums = self.pool.run("float(big.sum()) if 'big' in globals() else None", timeout=60, trace=False).value
        whole = float(self.array.sum())
        if any(value not in (None, whole) for value in sums.values()):
            raise AssertionError(f"an interrupted push left a partial array: {sums}")
        self.pool.run("globals().pop('big', None);", timeout=60, trace=False)


def summary(aborts: list[Abort]) -> dict:
    """Median and worst time from abort to a working cell, for recoveries and for restarts."""
    out: dict = {"aborts": len(aborts), "restarts": sum(a.restarted for a in aborts)}
    for label, group in (("recovered", [a for a in aborts if not a.restarted]),
                         ("restarted", [a for a in aborts if a.restarted])):
        times = [a.recovered_s for a in group]
        out[label] = {"count": len(times), "median_s": statistics.median(times) if times else None,
                      "worst_s": max(times) if times else None}
    by_kind: dict[str, list[float]] = {}
    for abort in aborts:
        by_kind.setdefault(abort.kind, []).append(abort.recovered_s)
    out["by_kind"] = {kind: {"count": len(t), "median_s": statistics.median(t), "worst_s": max(t)}
                      for kind, t in sorted(by_kind.items())}
    return out


def describe(stats: dict) -> str:
    lines = [f"{stats['aborts']} aborts, {stats['restarts']} of them ended in a restart"]
    for label in ("recovered", "restarted"):
        part = stats[label]
        if part["count"]:
            lines.append(f"  {label}: {part['count']}, abort to a working cell: median "
                         f"{part['median_s']:.2f} s, worst {part['worst_s']:.2f} s")
    for kind, part in stats["by_kind"].items():
        lines.append(f"    {kind:32} {part['count']:4}  median {part['median_s']:.2f} s  worst {part['worst_s']:.2f} s")
    return "\n".join(lines)
