"""Persistent, partitioned and matched-probe calls on real pools: each Start recorded as the
operation it starts and matched to its message, matched probes' receives paired with their sends,
and a started request or a matched probe that never completes diagnosed and interrupted."""

from __future__ import annotations

import pytest

import mpinb
from mpinb.common._events import COLLECTIVE, PROBE

pytestmark = pytest.mark.every_mpi

RING = """\
import numpy as np
out, got = np.full(2, rank * 1.0), np.zeros(2)
send = comm.Send_init(out, (rank + 1) % size, tag=5)
recv = comm.Recv_init(got, (rank - 1) % size, tag=5)
seen = []
for step in range(3):
    MPI.Prequest.Startall([recv, send])
    MPI.Request.Waitall([recv, send])
    seen.append(float(got[0]))
    out += 10
send.Free(); recv.Free()
total = np.zeros(1)
reduction = comm.Allreduce_init(np.full(1, rank * 1.0), total)
reduction.Start(); reduction.Wait(); reduction.Free()
(seen, float(total[0]), type(send) == MPI.Prequest, isinstance(send, MPI.Request))
"""


def test_a_persistent_ring_matches_each_start_to_its_message(any_pool):
    size = any_pool.size
    res = any_pool.run(RING)
    assert res.value == any_pool.run(RING, trace=False).value
    left = {r: (r - 1) % size for r in range(size)}
    assert res.value == {r: ([left[r] + 10 * k for k in range(3)], size * (size - 1) / 2, True, True)
                         for r in range(size)}
    messages = res.trace.messages()
    assert len(messages) == 3 * size
    assert {(m["send_op"], m["recv_op"], m["tag"], m["bytes"]) for m in messages} == {
        ("Start (Send_init)", "Start (Recv_init)", 5, 16)}
    assert sorted((m["source"], m["dest"]) for m in messages) == sorted([(r, (r + 1) % size) for r in range(size)] * 3)
    events = res.trace.events
    starts = events[events["op"] == "Start (Allreduce_init)"]
    assert len(starts) == size and set(starts["kind"]) == {COLLECTIVE} and set(starts["line"]) == {14}


def test_partitioned_sends_are_matched_like_sends(pool4):
    # Every rank takes part: Open MPI's first partitioned request is set up with every rank of the
    # world (4 ranks where two make none hang under its own mpiexec too).
    res = pool4.run(
        "import numpy as np\n"
        "if rank % 2 == 0:\n"
        "    buf = np.arange(8.0) + rank\n"
        "    request = comm.Psend_init(buf, 4, dest=rank + 1, tag=2)\n"
        "    request.Start()\n"
        "    request.Pready_range(0, 3)\n"
        "    request.Wait(); request.Free()\n"
        "else:\n"
        "    buf = np.zeros(8)\n"
        "    request = comm.Precv_init(buf, 4, source=rank - 1, tag=2)\n"
        "    request.Start(); request.Wait(); request.Free()\n"
        "buf.tolist()")
    assert res.value[1] == list(range(8)) and res.value[3] == [2.0 + k for k in range(8)]
    pairs = sorted((m["source"], m["dest"], m["send_op"], m["recv_op"], m["bytes"]) for m in res.trace.messages())
    assert pairs == [(0, 1, "Start (Psend_init)", "Start (Precv_init)", 64),
                     (2, 3, "Start (Psend_init)", "Start (Precv_init)", 64)]


def test_a_matched_probes_receive_is_paired_with_its_send(pool4):
    code = ("import numpy as np\n"
            "got = None\n"
            "if rank == 0:\n"
            "    comm.send({'a': 1}, dest=1, tag=3)\n"
            "    comm.Send(np.arange(4.0), dest=2, tag=4)\n"
            "elif rank == 1:\n"
            "    got = comm.mprobe(source=0, tag=3).recv()\n"
            "elif rank == 2:\n"
            "    message = MPI.Message.Probe(comm, 0, 4)\n"
            "    got = np.zeros(4)\n"
            "    message.Recv(got)\n"
            "    got = got.tolist()\n"
            "got")
    res = pool4.run(code)
    assert res.value == pool4.run(code, trace=False).value == {0: None, 1: {"a": 1}, 2: [0, 1, 2, 3], 3: None}
    pairs = sorted((m["source"], m["dest"], m["send_op"], m["recv_op"], m["recv_line"]) for m in res.trace.messages())
    assert pairs == [(0, 1, "send", "Message.recv", 7), (0, 2, "Send", "Message.Recv", 11)]
    probes = res.trace.events[res.trace.events["kind"] == PROBE]
    assert sorted((int(p["rank"]), p["op"], int(p["peer"]), int(p["tag"])) for p in probes) == [
        (1, "mprobe", 0, 3), (2, "Mprobe", 0, 4)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["started receive", "matched probe"])
def test_a_started_request_or_a_probe_that_never_completes_is_diagnosed(pool4, case):
    code = {"started receive": "if rank == 1:\n    r = comm.Recv_init(np.zeros(1), source=0, tag=7)\n"
                               "    r.Start()\n    r.Wait()\n",
            "matched probe": "if rank == 1:\n    comm.mprobe(source=0, tag=7)\n"}[case]
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(code, timeout=3)
    state = info.value.diagnosis.waits[1]
    assert (state["kind"], state["peer"], state["tag"]) == ("recv", 0, 7)
    assert state["op"] == ("Start (Recv_init)" if case == "started receive" else "mprobe")
    assert "rank 1 waits for rank 0, which will not take part" in str(info.value)
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}
