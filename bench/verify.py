"""What MPI correctness checks cost: the tutorials' cells verified against the same cells traced,
and the notebook's share (the findings of a 100,000-call trace, per call).

The cells are timed as a user runs them: each tutorial executed top to bottom in its own kernel
(nbclient), once with ``MPINB_VERIFY=1`` and once without, alternated so that load hits both
alike; a cell's time is from its execution request to its reply, as nbclient records it. The
cells that wait for a timeout on purpose (a deadlock shown) and the untraced ones take the same
time either way, and are left out, as is each tutorial's first ``%%mpi`` cell, which waits for
the pool to start (seconds that verifying does not touch and that would hide its cost).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime
from unittest import mock

import mpinb

HERE = os.path.dirname(os.path.abspath(__file__))
TUTORIALS = ("01-point-to-point", "01b-deadlocks-and-send-modes", "03-nonblocking", "05-parallel-algorithms",
             "07-data-parallel")
VERIFIED_SHARE = 2.0  # verified cells take at most this many times their traced time
CHEAP_US = 0.2  # the checks every traced run makes, per call
LOOK_SHARE = 0.01  # the end-of-run look for what a run left, at most this share of an empty run


def _cell_seconds(path: str, verify: bool) -> float:
    """Seconds the traced ``%%mpi`` cells of the tutorial at ``path`` took, run top to bottom."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with mock.patch.dict(os.environ, {"MPINB_VERIFY": "1" if verify else "0"}):
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": os.path.dirname(path)}}).execute()
    total = 0.0
    cells = [cell for cell in nb.cells if cell.cell_type == "code" and cell.source.startswith("%%mpi")]
    for cell in cells[1:]:  # (the first waits for the pool's start)
        if "--no-trace" in cell.source or "raises-exception" in cell.metadata.get("tags", []):
            continue
        timing = cell.metadata.get("execution", {})
        began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if began and ended:
            total += (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()
    return total


def tutorial_rows(repeats: int = 2) -> list[tuple]:
    rows = []
    notebooks = os.path.join(HERE, "..", "notebooks")
    for name in TUTORIALS:
        path = os.path.join(notebooks, f"{name}.ipynb")
        verified, traced = [], []
        for _ in range(repeats):
            verified.append(_cell_seconds(path, True))
            traced.append(_cell_seconds(path, False))
        on, off = statistics.median(verified), statistics.median(traced)
        # ratio: the slowest verified time the target allows, over the verified time (> 1: met)
        rows.append((f"tutorial {name}: traced %%mpi cells, verified (s)", on,
                     f"traced; target at most {VERIFIED_SHARE:g}x", off, VERIFIED_SHARE * off / on))
    return rows


def _trace(verify: bool, rounds: int = 8_000, ranks: int = 4):
    """A real trace of ``3 * rounds`` calls per rank: a ring of Sendrecv, Isend/Recv/Wait."""
    with mpinb.Pool(ranks, verify=verify) as pool:
        pool.trace_capacity = 3 * rounds + 10
        code = (f"a, b = np.zeros(1), np.zeros(1)\nfor _ in range(0, {rounds}, 2):\n"
                "    comm.Sendrecv(a, dest=(rank + 1) % size, recvbuf=b, source=(rank - 1) % size)\n"
                "    request = comm.Isend(a, dest=(rank + 1) % size)\n"
                "    comm.Recv(b, source=(rank - 1) % size)\n"
                "    request.Wait()\n")
        return pool.run(code).trace


def findings_rows() -> list[tuple]:
    rows = []
    for verify, label in ((False, "every traced run's checks"), (True, "--verify's checks")):
        trace = _trace(verify)
        assert trace.verified is verify and not trace.dropped
        began = time.perf_counter()
        found = trace.findings()
        per_call = (time.perf_counter() - began) / len(trace) * 1e6
        assert found == [], found
        target = CHEAP_US if not verify else None
        rows.append((f"{label}, in the notebook, per call of a {len(trace):,}-call trace (us)", per_call,
                     f"target: at most {CHEAP_US} us" if target else "no target (see the tutorials' rows)",
                     target if target else per_call, (target / per_call) if target else 1.0))
    return rows


def look_rows(ranks: int = 4, communicators: int = 20) -> list[tuple]:
    """What every traced run pays on each rank when it ends, to find messages no receive took and
    communicators dropped unfreed (``mpinb.rank.mpi._left_behind.look``: a probe per live communicator),
    against the time of an empty traced run as a user sees it."""
    with mpinb.Pool(ranks) as pool:
        pool.run(f"kept = [comm.Split(rank % 2) for _ in range({communicators})]")
        timing = ("import time\nfrom mpinb.rank.mpi import _left_behind, _world\nbegan = time.perf_counter()\n"
                  "for _ in range(2000):\n    _left_behind.look(_world.traced_world())\n"
                  "(time.perf_counter() - began) / 2000 * 1e6")
        per_look = max(pool.run(timing).value.values())
        empty = []
        for _ in range(30):
            began = time.perf_counter()
            pool.run("pass")
            empty.append((time.perf_counter() - began) * 1e6)
        pool.run("for c in kept:\n    c.Free()")
    run = statistics.median(empty)
    return [(f"end-of-run look for what a run left, {communicators + 1} communicators, per run, slowest rank (us)",
             per_look, f"empty traced run: {run:.0f} us; target at most {LOOK_SHARE:.0%} of it",
             LOOK_SHARE * run, LOOK_SHARE * run / per_look)]


def verify_rows() -> list[tuple]:
    return findings_rows() + look_rows() + tutorial_rows()
