"""One-sided communication (RMA windows) on real pools: each call recorded with its window,
target and displacement, transfers drawn inside their epochs, lock waits named, and hangs in
``Fence`` and ``Win.Wait`` diagnosed and interrupted with the pool intact."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mpinb
from mpinb.common._events import COLLECTIVE, EPOCH, RMA
from mpinb.trace._waits import explain

pytestmark = pytest.mark.every_mpi

# Each rank puts its rank into slot ``rank`` of every other rank's window, in one Fence epoch.
FENCE_PUTS = """\
import numpy as np
buf = np.full(size, -1, dtype='i8')
win = MPI.Win.Create(buf, disp_unit=8, comm=comm)
win.Fence()
for target in range(size):
    if target != rank:
        win.Put(np.array([rank * 10], dtype='i8'), target, rank)
win.Fence()
win.Free()
got = buf.tolist()
"""


def test_a_fence_epoch_of_puts_is_arrows_to_the_right_targets(any_pool):
    res = any_pool.run(FENCE_PUTS)
    size = any_pool.size
    got = any_pool.run("got").value
    assert got == {r: [t * 10 if t != r else -1 for t in range(size)] for r in range(size)}
    trace = res.trace
    events = trace.events
    puts = events[events["kind"] == RMA]
    assert len(puts) == size * (size - 1) and set(puts["op"]) <= {"Put"}
    assert all(p["tag"] == p["rank"] and p["sent"] == 8 and p["line"] == 7 for p in puts), "displacement = origin"
    fences = events[(events["kind"] == COLLECTIVE) & (events["op"] == "Fence")]
    [window] = set(fences["comm"])
    assert len(fences) == 2 * size and re.fullmatch(r"win\d+@world", window)
    transfers = trace.transfers()
    assert sorted((t["source"], t["dest"]) for t in transfers) == [
        (o, t) for o in range(size) for t in range(size) if o != t]
    second_fence = {int(f["rank"]): float(f["end"]) for f in fences[fences["line"] == 8]}
    for t in transfers:
        assert t["bytes"] == 8 and t["disp"] == t["origin"] and t["window"] == window
        assert t["end"] == pytest.approx(second_fence[t["target"]]), "the data is there when the target's Fence ends"
        assert t["start"] <= t["end"]
    expected = np.full((size, size), 8) - 8 * np.eye(size, dtype=int)
    np.testing.assert_array_equal(trace.matrix("bytes"), expected)


def test_the_same_puts_untraced_give_the_same_window(pool4):
    pool4.run(FENCE_PUTS)
    traced = pool4.run("got").value
    pool4.run(FENCE_PUTS, trace=False)
    assert pool4.run("got").value == traced


def test_gets_and_fetches_bring_bytes_back_from_the_target(pool4):
    res = pool4.run(
        "import numpy as np\n"
        "win = MPI.Win.Allocate(8 * size, disp_unit=8, comm=comm)\n"
        "mem = np.frombuffer(win.tomemory(), dtype='i8')\n"
        "mem[:] = rank\n"
        "win.Fence()\n"
        "out, old = np.zeros(2, dtype='i8'), np.zeros(1, dtype='i8')\n"
        "if rank == 1:\n"
        "    win.Get(out, 0, 2)\n"
        "    win.Fetch_and_op(np.array([5], dtype='i8'), old, 3, 1, op=MPI.SUM)\n"
        "win.Fence()\n"
        "win.Free()\n"
        "result = (out.tolist(), old.tolist())\n")
    assert pool4.run("result").value[1] == ([0, 0], [3])
    transfers = res.trace.transfers()
    get = [t for t in transfers if t["op"] == "Get"]
    assert [(t["source"], t["dest"], t["bytes"], t["disp"]) for t in get] == [(0, 1, 16, 2)]
    fetch = sorted((t["source"], t["dest"], t["bytes"]) for t in transfers if t["op"] == "Fetch_and_op")
    assert fetch == [(1, 3, 8), (3, 1, 8)], "Fetch_and_op sends the operand and brings the old value back"


def test_lock_contention_is_a_wait_for_the_holder(pool4):
    res = pool4.run(
        "import numpy as np, time\n"
        "win = MPI.Win.Allocate(8, comm=comm)\n"
        "comm.Barrier()\n"
        "if rank == 1:\n"
        "    win.Lock(0)\n"
        "    time.sleep(0.3)\n"
        "    win.Put(np.ones(1), 0)\n"
        "    win.Unlock(0)\n"
        "elif rank == 2:\n"
        "    time.sleep(0.05)\n"
        "    win.Lock(0, MPI.LOCK_SHARED)\n"
        "    win.Get(np.zeros(1), 0)\n"
        "    win.Unlock(0)\n"
        "comm.Barrier()\n"
        "win.Free()\n")
    events = res.trace.events
    locks = events[(events["kind"] == EPOCH) & (events["op"] == "Lock")]
    assert sorted((int(e["rank"]), int(e["peer"]), int(e["tag"])) for e in locks) == [(1, 0, 1), (2, 0, 0)]
    waits = [w for w in res.trace.waits() if w["kind"] == "lock held"]
    assert len(waits) == 1
    wait = waits[0]
    assert (wait["rank"], wait["peer"], wait["line"], wait["peer_line"]) == (2, 1, 11, 5)
    assert 0.15 < wait["seconds"] < 0.6
    # (every wait explained: under load the barriers' waits can outrank the lock's in the top three)
    said = [line for line in explain(res.trace.waits(), top=len(res.trace.waits())) if "lock" in line]
    assert said and said[0].startswith("rank 2 waited")
    assert "for rank 1, which held the window's lock since line 5" in said[0]
    path = res.trace.critical_path()
    assert 1 in path.ranks(), "the holder's hold is on the critical path"
    epochs = res.trace.lock_epochs()
    assert [(e["holder"], e["target"], e["exclusive"]) for e in epochs] == [(1, 0, True), (2, 0, False)]
    released = events[(events["rank"] == 1) & (events["op"] == "Unlock")][0]
    assert released["start"] <= epochs[1]["start"], "the shared lock was granted once the exclusive one went"


def test_post_start_complete_wait_is_recorded_and_closes_its_transfers(pool4):
    res = pool4.run(
        "import numpy as np\n"
        "buf = np.zeros(1)\n"
        "win = MPI.Win.Create(buf, comm=comm)\n"
        "group = comm.Get_group()\n"
        "if rank == 0:\n"
        "    win.Post(group.Incl([1]))\n"
        "    win.Wait()\n"
        "elif rank == 1:\n"
        "    win.Start(group.Incl([0]))\n"
        "    win.Put(np.full(1, 7.0), 0)\n"
        "    win.Complete()\n"
        "group.Free()\n"
        "win.Free()\n"
        "value = buf[0]\n")
    assert pool4.run("value").value[0] == 7.0
    events = res.trace.events
    ops = {int(r): list(events["op"][(events["rank"] == r) & (events["kind"] == EPOCH)]) for r in (0, 1)}
    assert ops == {0: ["Win.Post", "Win.Wait"], 1: ["Win.Start", "Win.Complete"]}
    [put] = res.trace.transfers()
    complete = events[(events["rank"] == 1) & (events["op"] == "Win.Complete")][0]
    assert (put["source"], put["dest"], put["epoch"]) == (1, 0, 0) and put["end"] == pytest.approx(complete["end"])


@pytest.mark.timeout(60)
def test_a_fence_that_one_rank_skips_is_diagnosed_and_the_pool_survives(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run("win = MPI.Win.Allocate(8, comm=comm)\nif rank != 2:\n    win.Fence()\n", timeout=4)
    diagnosis = info.value.diagnosis
    assert sorted(diagnosis.waits) == [0, 1, 3] and diagnosis.finished == [2]
    [(op, line, window)] = {(s["op"], s["line"], s["comm"]) for s in diagnosis.waits.values()}
    assert (op, line) == ("Fence", 3) and re.fullmatch(r"win\d+@world", window)
    text = str(info.value)
    assert f"Fence on window '{window}' at line 3" in text
    assert "rank 0 waits for rank 2, which will not take part" in text
    assert "call Fence (and Win.Free) the same number of times" in text
    assert pool4.run("comm.allreduce(rank)").value == {r: 6 for r in range(4)}


@pytest.mark.timeout(60)
def test_a_win_wait_that_no_origin_completes_is_diagnosed_and_interrupted(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(
            "win = MPI.Win.Allocate(8, comm=comm)\n"
            "if rank == 0:\n"
            "    group = comm.Get_group()\n"
            "    win.Post(group.Incl([1, 3]))\n"
            "    win.Wait()\n", timeout=4)
    diagnosis = info.value.diagnosis
    assert list(diagnosis.waits) == [0] and diagnosis.waits[0]["op"] == "Win.Wait"
    assert re.search(r"Win.Wait on window 'win\d+@world', for ranks 1, 3 to call Win.Complete at line 5",
                     str(info.value))
    assert diagnosis.stuck_on_absent() == {0: [1, 3]}
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}


def test_fence_on_some_ranks_and_free_on_others_raise_everywhere(pool4):
    res = pool4.run("win = MPI.Win.Allocate(8, comm=comm)\n(win.Fence if rank else win.Free)()\n", check=False)
    assert res.failed_ranks() == [0, 1, 2, 3]
    message = res.errors[0].message
    assert re.search(r"mismatched collectives on window 'win\d+@world'", message)
    assert "rank 0 called Win.Free; ranks 1, 2, 3 called Fence" in message


def test_the_static_diagram_draws_the_transfers_and_speaks_chinese(pool4):
    from mpinb._language import set_language
    from mpinb.trace._svg import space_time_svg, summary_text

    res = pool4.run(FENCE_PUTS)
    svg = space_time_svg(res.trace)
    assert svg.count('stroke-dasharray="4 3"') >= 12, "a dashed line per Put"
    set_language("zh")
    try:
        text = summary_text(res.trace)
        assert text.startswith("rank") and "总时间 ms" in text.splitlines()[0]
        assert "次调用" in space_time_svg(res.trace)
    finally:
        set_language(None)


def test_a_late_post_is_a_wait_for_the_target(pool4):
    res = pool4.run(
        "import numpy as np, time\n"
        "buf = np.zeros(1)\n"
        "win = MPI.Win.Create(buf, comm=comm)\n"
        "group = comm.Get_group()\n"
        "if rank == 0:\n"
        "    time.sleep(0.3)\n"
        "    win.Post(group.Incl([1]))\n"
        "    win.Wait()\n"
        "elif rank == 1:\n"
        "    win.Start(group.Incl([0]))\n"
        "    win.Put(np.ones(1), 0)\n"
        "    win.Complete()\n"
        "group.Free()\n"
        "win.Free()\n")
    [wait] = [w for w in res.trace.waits() if w["kind"] == "late post"]
    assert (wait["rank"], wait["peer"], wait["peer_op"], wait["peer_line"]) == (1, 0, "Win.Post", 7)
    assert wait["op"] in ("Win.Start", "Win.Complete") and 0.2 < wait["seconds"] < 0.6
    said = [line for line in explain(res.trace.waits()) if "exposed its window" in line]
    assert said and said[0].startswith("rank 1 waited") and "(Win.Post, line 7)" in said[0]
