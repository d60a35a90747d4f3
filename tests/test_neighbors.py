"""Neighbourhood collectives on real pools: results as mpi4py's own, arrows to the neighbours
only, and a collective that one rank skips diagnosed and interrupted with the pool intact."""

from __future__ import annotations

import pytest

import mpinb

pytestmark = pytest.mark.every_mpi

# A 2 x 2 grid, periodic along its first dimension only: each rank has 4 neighbour slots, some of
# them PROC_NULL (None in the lowercase results), and one neighbour on both sides of the ring.
GRID = """\
import numpy as np
cart = comm.Create_cart([2, 2], periods=[True, False])
objects = cart.neighbor_allgather(rank)
out = np.full(4, -1, dtype='i')
cart.Neighbor_allgather(np.full(1, rank, dtype='i'), out)
request = cart.Ineighbor_alltoall(np.arange(4, dtype='i') + 10 * rank, out2 := np.full(4, -1, dtype='i'))
request.Wait()
words = cart.neighbor_alltoall([f"{rank}->{slot}" for slot in range(4)])
cart.Free()
(objects, out.tolist(), out2.tolist(), words)
"""


def test_neighbourhood_collectives_give_mpi4pys_results_traced(pool4):
    traced = pool4.run(GRID)
    untraced = pool4.run(GRID, trace=False)
    assert traced.value == untraced.value
    assert traced.value[0][0] == [2, 2, None, 1], "rank 0's neighbours: 2 on both sides, none below, 1"


def test_a_neighbourhood_allgather_draws_arrows_to_the_neighbours_only(pool4):
    res = pool4.run(
        "cart = comm.Create_cart([2, 2], periods=[False, False])\n"
        "got = cart.neighbor_allgather(rank)\n"
        "cart.Free()\n"
        "got")
    assert res.value[0] == [None, 2, None, 1]
    events = res.trace.events
    calls = events[events["op"] == "neighbor_allgather"]
    assert len(calls) == 4 and len(set(calls["comm"])) == 1 and set(calls["line"]) == {2}
    arrows = sorted((e["source"], e["dest"]) for e in res.trace.neighbor_exchanges())
    assert arrows == [(0, 1), (0, 2), (1, 0), (1, 3), (2, 0), (2, 3), (3, 1), (3, 2)], "no diagonal, no far rank"
    for exchange in res.trace.neighbor_exchanges():
        assert exchange["op"] == "neighbor_allgather" and exchange["start"] <= exchange["end"]


@pytest.mark.timeout(60)
def test_a_neighbourhood_collective_one_rank_skips_is_diagnosed_and_the_pool_survives(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(
            "import numpy as np\n"
            "cart = comm.Create_cart([4], periods=[True])\n"
            "if rank != 3:\n"
            "    cart.Neighbor_allgather(np.zeros(1), np.zeros(2))\n", timeout=4)
    diagnosis = info.value.diagnosis
    # rank 1's neighbours (0 and 2) took part: its call completed; 0 and 2 wait for 3's data
    assert sorted(diagnosis.waits) == [0, 2] and diagnosis.finished == [1, 3]
    assert {(s["op"], s["line"]) for s in diagnosis.waits.values()} == {("Neighbor_allgather", 4)}
    assert {rank: state["members"] for rank, state in diagnosis.waits.items()} == {0: [1, 3], 2: [1, 3]}
    assert "rank 0 waits for ranks 1, 3, which will not take part" in str(info.value)
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}
