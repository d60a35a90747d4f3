"""Intercommunicators between groups of a pool's ranks: made, used and merged, traced and
hang-safe (see mpinb.rank.mpi._intercomms)."""

from __future__ import annotations

import re

import pytest

import mpinb
from mpinb.common._events import COLLECTIVE

pytestmark = [pytest.mark.every_mpi,
              pytest.mark.timeout(90)]

# Even ranks and odd ranks, joined by an intercommunicator whose leaders are world ranks 0 and 1.
HALVES = ("half = comm.Split(rank % 2, rank)\n"
          "inter = half.Create_intercomm(0, comm, 1 - rank % 2, tag=7)\n")


def test_messages_between_two_groups_are_drawn_between_their_world_ranks(pool4):
    res = pool4.run(
        "import numpy as np\n" + HALVES +
        "if rank % 2 == 0:\n"
        "    inter.send(rank, dest=half.Get_rank())\n"
        "    inter.Send(np.arange(4.0), dest=1 - half.Get_rank(), tag=3)\n"
        "    got = None\n"
        "else:\n"
        "    got = [inter.recv(source=half.Get_rank())]\n"
        "    buf = np.zeros(4)\n"
        "    inter.Recv(buf, source=1 - half.Get_rank(), tag=3)\n"
        "    got.append(buf.sum())\n"
        "kind = (type(inter).__name__, inter.Get_remote_size(), inter.Is_inter())\n"
        "inter.Free()\nhalf.Free()\n")
    assert pool4.run("got").value == {0: None, 1: [0, 6.0], 2: None, 3: [2, 6.0]}
    assert set(pool4.run("kind").value.values()) == {("Intercomm", 2, True)}
    messages = sorted((m["source"], m["dest"], m["tag"], m["bytes"]) for m in res.trace.messages())
    assert [(s, d, t) for s, d, t, _ in messages] == [(0, 1, 0), (0, 3, 3), (2, 1, 3), (2, 3, 0)]
    assert {b for *_, t, b in messages if t == 3} == {32}
    events = res.trace.events
    made = events[(events["kind"] == COLLECTIVE) & (events["op"] == "Create_intercomm")]
    assert len(made) == 4 and len({str(c) for c in made["comm"]}) == 2, "on each half"
    [between] = {str(c) for c in events[events["msg"] >= 0]["comm"]}
    assert re.fullmatch(r"inter\d+\[0, 2\|1, 3\]", between)


def test_merge_makes_a_traced_communicator_of_both_groups(pool4):
    res = pool4.run(
        HALVES +
        "merged = inter.Merge(high=rank % 2 == 1)\n"
        "order = merged.Get_rank()\n"
        "total = merged.allreduce(rank)\n"
        "merged.Free()\ninter.Free()\nhalf.Free()\n")
    assert pool4.run("order, total").value == {0: (0, 6), 1: (2, 6), 2: (1, 6), 3: (3, 6)}
    groups = {str(e["op"]): str(e["comm"]) for e in res.trace.events if e["kind"] == COLLECTIVE}
    assert re.fullmatch(r"inter\d+\[0, 2\|1, 3\]", groups["Merge"]), "named by both groups, alike on all"
    assert groups["allreduce"] == groups["Merge"] + ".0@0"
    merges = [m for m in res.trace.collective_groups().values() if res.trace.events["op"][m[0]] == "Merge"]
    assert [len(m) for m in merges] == [4], "one Merge of all four ranks"


def test_a_group_that_never_joins_the_intercommunicator_is_diagnosed(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run("half = comm.Split(rank % 2, rank)\n"
                  "if rank % 2 == 0:\n"
                  "    inter = half.Create_intercomm(0, comm, 1, tag=7)\n", timeout=4)
    diagnosis = info.value.diagnosis
    assert sorted(diagnosis.waits) == [0, 2] and sorted(diagnosis.finished) == [1, 3]
    assert {s["op"] for s in diagnosis.waits.values()} == {"Create_intercomm"}
    assert diagnosis.waits[0]["peer"] == 1, "the local leader waits for the remote leader"
    text = str(info.value)
    assert "Create_intercomm" in text and "rank 1" in text
    assert pool4.run("comm.allreduce(rank)").value == {r: 6 for r in range(4)}


def test_a_receive_between_groups_that_nobody_sends_names_the_world_rank(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(HALVES + "if rank == 3:\n    inter.recv(source=0)\n", timeout=4)
    diagnosis = info.value.diagnosis
    assert list(diagnosis.waits) == [3] and diagnosis.waits[3]["peer"] == 0
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}


def test_collectives_between_two_groups_are_recorded_over_both_with_mpis_results(pool4):
    # world ranks 0, 2 form group A, 1, 3 group B; A's rank 0 (world 0) is the root
    res = pool4.run(
        "import numpy as np\n" + HALVES +
        "a = rank % 2 == 0\n"
        "root = (MPI.ROOT if half.Get_rank() == 0 else MPI.PROC_NULL) if a else 0\n"
        "word = inter.bcast('hello' if a else None, root=root)\n"
        "buf = np.arange(3.0) if a else np.zeros(3)\n"
        "inter.Bcast(buf, root=root)\n"
        "total = inter.allreduce(rank)\n"
        "inter.Barrier()\n"
        "request = inter.Ibarrier()\nrequest.Wait()\n"
        "copy = inter.Dup()\n"
        "copy.send(rank, dest=half.Get_rank()) if a else copy.recv(source=half.Get_rank())\n"
        "copy.Free()\ninter.Free()\nhalf.Free()\n")
    assert pool4.run("word, buf.sum(), total").value == {0: (None, 3.0, 4), 1: ("hello", 3.0, 2),
                                                          2: (None, 3.0, 4), 3: ("hello", 3.0, 2)}
    trace = res.trace
    found = [c for c in trace.collectives() if c["comm"].startswith("inter")]
    assert [c["op"] for c in found] == ["bcast", "Bcast", "allreduce", "Barrier", "Ibarrier", "Dup"]
    assert all(sorted(c["ranks"]) == [0, 1, 2, 3] for c in found), "every member of both groups"
    events = trace.events
    bcast = events[events["op"] == "Bcast"]
    moved = {int(e["rank"]): (int(e["sent"]), int(e["received"])) for e in bcast}
    assert moved == {0: (24, 0), 1: (0, 24), 2: (0, 0), 3: (0, 24)}, "the root sends, the other group receives"
    copied = {(m["source"], m["dest"], m["comm"]) for m in trace.messages()}
    (copy,) = {comm for *_, comm in copied}
    assert {(s, d) for s, d, _ in copied} == {(0, 1), (2, 3)} and copy == found[-1]["comm"] + ".0"


def test_a_collective_between_groups_that_one_member_skips_is_diagnosed(pool4):
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(HALVES + "if rank != 3:\n    inter.allreduce(rank)\n", timeout=4)
    diagnosis = info.value.diagnosis
    assert sorted(diagnosis.waits) == [0, 1, 2] and diagnosis.finished == [3]
    assert {s["op"] for s in diagnosis.waits.values()} == {"allreduce"}
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}
