"""Many ranks on few cores, as on a laptop: 64 ranks on this machine's cores start, work, show
their hangs and stop with nothing left behind."""

from __future__ import annotations

import time

import pytest
from _processes import pool_processes, wait_until_gone

import mpinb

pytestmark = pytest.mark.slow

RANKS = 64


@pytest.fixture(scope="module")
def pool64():
    existing_pools = {p.pid for p in pool_processes()}
    began = time.monotonic()
    pool = mpinb.Pool(RANKS).start()
    pool.ready_after = time.monotonic() - began
    try:
        yield pool
    finally:
        pool.stop()
    assert not wait_until_gone(10, existing_pools), "stopping 64 ranks leaves nothing behind"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sixty_four_ranks_start_and_form_one_world(pool64):
    assert pool64.ready_after < pool64.settings.default_start_timeout
    assert pool64.run("comm.allreduce(rank)").value == dict.fromkeys(range(RANKS), RANKS * (RANKS - 1) // 2)
    rows = pool64.status()
    assert [row["rank"] for row in rows] == list(range(RANKS)) and all(row["pid"] > 0 for row in rows)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_ring_of_sixty_four_is_traced_and_its_deadlock_diagnosed(pool64):
    trace = pool64.run("comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)").trace
    assert len(trace.messages()) == RANKS
    with pytest.raises(mpinb.DeadlockError) as info:
        pool64.run("comm.recv(source=(rank - 1) % size)\ncomm.send(rank, dest=(rank + 1) % size)", timeout=8)
    cycle = info.value.diagnosis.cycle
    assert cycle[0] == 0 and cycle[1] == RANKS - 1 and sorted(cycle) == list(range(RANKS)), "each waits for its left"
    assert "ranks 0-63: each recv from its left neighbour (rank - 1) at line 1" in str(info.value)
    diagnosis, tree = str(info.value).split("Where the ranks were when the run was stopped:\n")
    assert len(diagnosis.splitlines()) < 10, "a sentence, not 64 lines"
    assert tree.splitlines() == ["64 ranks: 64 waiting in MPI",
                                 tree.splitlines()[1]], "the stacks of 64 ranks in two lines"
    assert tree.splitlines()[1].startswith("ranks 0-63: cell line 1: comm.recv(source=(rank - 1) % size) → "
                                           "waiting in recv from rank r-1 for"), tree
    assert pool64.run("comm.allreduce(1)").value == dict.fromkeys(range(RANKS), RANKS)
    stacks = pool64.stacks()
    assert stacks.text().splitlines() == ["64 ranks: 64 idle", "ranks 0-63: idle"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sixty_four_ranks_of_output_and_status_read_at_a_glance(pool64):
    res = pool64.run("print('odd one' if rank == 5 else 'hello')")
    assert res.text().splitlines() == ["[0-4, 6-63] hello", "[5] odd one"], "identical output once"
    from mpinb.notebook._session import status_summary

    deadline = time.monotonic() + 20  # rank 0 may still be busy finishing its relay of the run
    while any(row["state"] != "idle" for row in pool64.status()) and time.monotonic() < deadline:
        time.sleep(0.2)
    summary = status_summary(pool64, pool64.status())
    assert summary.startswith(f"{RANKS} ranks on 1 host (") and f"{RANKS} idle" in summary
    assert "MB per rank" in summary


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_traced_cell_on_sixty_four_ranks_stays_within_the_trace_budget(pool64):
    pool64.trace_budget = RANKS * 1_000
    try:
        res = pool64.run("for _ in range(600): comm.sendrecv(None, dest=rank, source=rank)")  # 1,200 calls
    finally:
        pool64.trace_budget = 1_000_000
    assert len(res.trace) == RANKS * 1_000 and res.trace.dropped == dict.fromkeys(range(RANKS), 200)
