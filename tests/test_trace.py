"""Tracing on real pools: what is recorded, how sends pair with receives, and transparency."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mpinb
from mpinb._colors import WAIT_COLOR
from mpinb.common._events import COLLECTIVE, RECV
from mpinb.trace._svg import summary_text

pytestmark = pytest.mark.every_mpi


def ops(trace, rank=None, kind=None) -> list[str]:
    events = trace.events
    if rank is not None:
        events = events[events["rank"] == rank]
    if kind is not None:
        events = events[events["kind"] == kind]
    return list(events["op"])


@pytest.mark.quick
def test_ring_messages_pair_each_send_with_its_receive(pool4):
    res = pool4.run(
        "comm.send([rank] * 5, dest=(rank + 1) % size, tag=7)\n"
        "got = comm.recv(source=(rank - 1) % size, tag=7)\n"
    )
    messages = res.trace.messages()
    assert sorted((m["source"], m["dest"]) for m in messages) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    for m in messages:
        assert m["tag"] == 7 and m["bytes"] > 0 and m["send_line"] == 1 and m["recv_line"] == 2
        assert m["recv_end"] >= m["send_start"], "a receive never ends before its send began"
    np.testing.assert_array_equal(res.trace.matrix("messages"), np.roll(np.eye(4, dtype=int), 1, axis=1))


def test_wildcard_receives_are_matched_by_their_actual_source_and_tag(pool4):
    res = pool4.run(
        "if rank == 0:\n"
        "    got = sorted(comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) for _ in range(size - 1))\n"
        "else:\n"
        "    comm.send(rank, dest=0, tag=10 + rank)\n"
    )
    received = [e for e in res.trace.events if e["kind"] == RECV]
    assert sorted((int(e["peer_world"]), int(e["tag"])) for e in received) == [(1, 11), (2, 12), (3, 13)]
    assert sorted((m["source"], m["tag"]) for m in res.trace.messages()) == [(1, 11), (2, 12), (3, 13)]


def test_nonblocking_buffers_with_waitall(pool4):
    res = pool4.run(
        "a = np.full(1000, float(rank)); b = np.empty(1000)\n"
        "reqs = [comm.Irecv(b, source=MPI.ANY_SOURCE, tag=5), comm.Isend(a, dest=(rank + 1) % size, tag=5)]\n"
        "MPI.Request.Waitall(reqs)\n"
        "b[0]"
    )
    assert res.value == {r: float((r - 1) % 4) for r in range(4)}
    messages = res.trace.messages()
    assert len(messages) == 4 and all(m["bytes"] == 8000 for m in messages)
    assert {m["send_op"] for m in messages} == {"Isend"} and {m["recv_op"] for m in messages} == {"Irecv"}
    assert "Waitall" in ops(res.trace, rank=0)


def test_lowercase_nonblocking_with_wait_and_test(pool4):
    res = pool4.run(
        "req = comm.irecv(source=MPI.ANY_SOURCE, tag=3)\n"
        "comm.isend({'from': rank}, dest=(rank + 1) % size, tag=3).wait()\n"
        "while True:\n"
        "    done, got = req.test()\n"
        "    if done: break\n"
        "got['from']"
    )
    assert res.value == {r: (r - 1) % 4 for r in range(4)}
    assert sorted((m["source"], m["dest"]) for m in res.trace.messages()) == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_messages_on_split_communicators_use_world_ranks(pool4):
    res = pool4.run(
        "row = comm.Split(rank // 2, rank)\n"
        "row.send(rank, dest=1 - row.rank)\n"
        "row.recv(source=1 - row.rank)"
    )
    assert res.value == {0: 1, 1: 0, 2: 3, 3: 2}
    pairs = sorted((m["source"], m["dest"]) for m in res.trace.messages())
    assert pairs == [(0, 1), (1, 0), (2, 3), (3, 2)]
    comms = {m["comm"] for m in res.trace.messages()}
    assert len(comms) == 2, "the two halves of a Split are different communicators"


def test_cartesian_topology_shift(pool4):
    res = pool4.run(
        "cart = comm.Create_cart([size], periods=[True])\n"
        "left, right = cart.Shift(0, 1)\n"
        "cart.sendrecv(rank, dest=right, source=left)"
    )
    assert res.value == {r: (r - 1) % 4 for r in range(4)}
    assert len(res.trace.messages()) == 4
    assert res.trace.summary()[0]["messages_sent"] == 1


COLLECTIVE_CODE = {
    "barrier": "comm.barrier()",
    "bcast": "comm.bcast(rank, root=1)",
    "scatter": "comm.scatter(list(range(size)) if rank == 0 else None, root=0)",
    "gather": "comm.gather(rank, root=0)",
    "allgather": "comm.allgather(rank)",
    "reduce": "comm.reduce(rank, root=0)",
    "allreduce": "comm.allreduce(rank)",
    "alltoall": "comm.alltoall(list(range(size)))",
    "scan": "comm.scan(rank)",
    "exscan": "comm.exscan(rank)",
    "Barrier": "comm.Barrier()",
    "Bcast": "comm.Bcast(np.zeros(10), root=0)",
    "Scatter": "comm.Scatter(np.zeros(4 * size), np.zeros(4), root=0)",
    "Scatterv": "comm.Scatterv([np.zeros(size), [1] * size, None, MPI.DOUBLE], np.zeros(1), root=0)",
    "Gather": "comm.Gather(np.zeros(4), np.zeros(4 * size), root=0)",
    "Gatherv": "comm.Gatherv(np.zeros(1), [np.zeros(size), [1] * size, None, MPI.DOUBLE], root=0)",
    "Allgather": "comm.Allgather(np.zeros(4), np.zeros(4 * size))",
    "Allgatherv": "comm.Allgatherv(np.zeros(1), [np.zeros(size), [1] * size, None, MPI.DOUBLE])",
    "Reduce": "comm.Reduce(np.zeros(8), np.zeros(8), root=0)",
    "Allreduce": "comm.Allreduce(np.zeros(8), np.zeros(8))",
    "Reduce_scatter_block": "comm.Reduce_scatter_block(np.zeros(size), np.zeros(1))",
    "Reduce_scatter": "comm.Reduce_scatter(np.zeros(size), np.zeros(1), [1] * size)",
    "Alltoall": "comm.Alltoall(np.zeros(size), np.zeros(size))",
    "Alltoallv": "comm.Alltoallv([np.zeros(size), [1] * size], [np.zeros(size), [1] * size])",
    "Scan": "comm.Scan(np.zeros(3), np.zeros(3))",
    "Exscan": "comm.Exscan(np.zeros(3), np.zeros(3))",
    "Ibarrier": "comm.Ibarrier().Wait()",
    "Ibcast": "comm.Ibcast(np.zeros(10), root=0).Wait()",
    "Iallreduce": "comm.Iallreduce(np.zeros(8), np.zeros(8)).Wait()",
    "Iallgather": "comm.Iallgather(np.zeros(4), np.zeros(4 * size)).Wait()",
    "Ialltoall": "comm.Ialltoall(np.zeros(size), np.zeros(size)).Wait()",
    "Ireduce": "comm.Ireduce(np.zeros(8), np.zeros(8), root=0).Wait()",
    "Iscan": "comm.Iscan(np.zeros(3), np.zeros(3)).Wait()",
}


def test_every_collective_is_recorded_on_every_rank(pool4):
    code = "\n".join(COLLECTIVE_CODE.values())
    res = pool4.run(code)
    for rank in range(4):
        assert ops(res.trace, rank=rank, kind=COLLECTIVE) == list(COLLECTIVE_CODE)
    events = res.trace.events
    allreduce = events[(events["op"] == "Allreduce")]
    assert set(allreduce["sent"]) == {64} and set(allreduce["received"]) == {64}
    bcast = events[(events["op"] == "Bcast")]
    assert {(int(e["rank"]), int(e["sent"]), int(e["received"])) for e in bcast} == {
        (0, 80, 0), (1, 0, 80), (2, 0, 80), (3, 0, 80)}
    lines = events[events["op"] == "gather"]["line"]
    assert set(lines) == {list(COLLECTIVE_CODE).index("gather") + 1}


def test_counts_and_bytes_match_what_the_code_sent(pool4):
    res = pool4.run(
        "for k in range(rank + 1):\n"
        "    comm.Send(np.zeros(100 * (k + 1), dtype=np.uint8), dest=(rank + 1) % size, tag=k)\n"
        "for k in range((rank - 1) % size + 1):\n"
        "    comm.Recv(np.empty(1000, dtype=np.uint8), source=(rank - 1) % size, tag=k)\n"
    )
    summary = {row["rank"]: row for row in res.trace.summary()}
    for rank in range(4):
        assert summary[rank]["messages_sent"] == rank + 1
        assert summary[rank]["bytes_sent"] == sum(100 * (k + 1) for k in range(rank + 1))
    matrix = res.trace.matrix()
    assert matrix[3, 0] == 100 + 200 + 300 + 400 and matrix.sum() == sum(
        sum(100 * (k + 1) for k in range(r + 1)) for r in range(4))
    assert all(row["mpi"] + row["compute"] == pytest.approx(row["wall"]) for row in summary.values())


TRANSPARENCY = (
    "out = []\n"
    "out.append(comm.allreduce(rank, op=MPI.MAX))\n"
    "out.append(comm.sendrecv(rank * 10, dest=(rank + 1) % size, source=(rank - 1) % size))\n"
    "buf = np.zeros(3); comm.Allreduce(np.full(3, rank, dtype=float), buf); out.append(buf.tolist())\n"
    "st = MPI.Status(); comm.send(rank, dest=(rank + 1) % size, tag=4)\n"
    "out.append((comm.recv(source=MPI.ANY_SOURCE, tag=4, status=st), st.Get_source(), st.Get_tag()))\n"
    "sub = comm.Split(rank % 2, -rank); out.append((sub.Get_rank(), sub.Get_size(), type(sub).__mro__[-3].__name__))\n"
    "try:\n"
    "    comm.send(1, dest=size + 5)\n"
    "except MPI.Exception as e:\n"
    "    out.append(('error', e.Get_error_class()))\n"
    "try:\n"
    "    comm.Send(np.zeros(2), dest=(rank + 1) % size, tag='x')\n"
    "except TypeError as e:\n"
    "    out.append(('typeerror', str(e)))\n"
    "out.append(isinstance(comm, MPI.Intracomm)\n"
    "           and isinstance(comm.Irecv(np.zeros(1), source=rank, tag=99), MPI.Request))\n"
    "comm.Send(np.zeros(1), dest=rank, tag=99)\n"
    "out\n"
)


def test_traced_calls_behave_exactly_like_mpi4py(pool4):
    traced = pool4.run(TRANSPARENCY, trace=True)
    plain = pool4.run(TRANSPARENCY, trace=False)
    assert traced.value == plain.value
    assert plain.trace is None and len(traced.trace) > 0


FUTURES = (
    "from mpi4py.futures import MPICommExecutor\n"
    "with MPICommExecutor(comm, root=0) as executor:\n"
    "    squares = None if executor is None else list(executor.map(pow, range(20), [2] * 20))\n"
    "squares\n"
)


@pytest.mark.timeout(120)
def test_mpi4py_futures_leader_and_workers_run_traced_as_untraced(pool4):
    # Its intercommunicator's plain requests reach MPI.Request.test, which is ours while tracing.
    for trace in (True, False):
        result = pool4.run(FUTURES, trace=trace, timeout=60)
        assert result.value == {0: [x * x for x in range(20)], 1: None, 2: None, 3: None}


def test_untraced_runs_use_mpi4py_objects_directly(pool4):
    who = "type(comm) is MPI.Intracomm, MPI.COMM_WORLD is comm, MPI.Request.__module__"
    res = pool4.run(who, trace=False)
    assert set(res.value.values()) == {(True, True, "mpi4py.MPI")}
    # mpi4py's objects come back as their repr: unpickling them would start MPI in the notebook
    res = pool4.run("from mpi4py import MPI as M\nM.Intracomm, comm", trace=False)
    assert all(repr(v).startswith("(<class 'mpi4py.MPI.Intracomm'>, <mpi4py.MPI.Intracomm object")
               for v in res.value.values())
    assert all("does not start" in v.why for v in res.value.values())
    assert "mpi4py.MPI" not in sys.modules, "the notebook's process never initializes MPI"
    res = pool4.run(who)
    assert set(res.value.values()) == {(False, True, "mpinb.rank.mpi._requests")}


def test_twins_look_like_mpi4py_objects(pool4):
    """Names, class equality, handles and pickling are mpi4py's, so code that inspects them
    behaves as under mpiexec."""
    res = pool4.run(
        "import pickle\n"
        "cart = comm.Create_cart([size], periods=[True])\n"
        "req = MPI.Request(MPI.REQUEST_NULL)\n"
        "(type(comm).__name__, type(comm) == MPI.Intracomm, type(cart) == MPI.Cartcomm,\n"
        " type(MPI.Comm.f2py(cart.py2f())) == type(cart), MPI.Request.__name__,\n"
        " pickle.loads(pickle.dumps(comm)) is comm, pickle.loads(pickle.dumps(MPI.Intracomm(comm))) == comm,\n"
        " type(pickle.loads(pickle.dumps(req))) == MPI.Request, isinstance(MPI.REQUEST_NULL, MPI.Request))"
    )
    assert set(res.value.values()) == {("Intracomm", True, True, True, "Request", True, True, True, True)}
    (made,) = res.trace.collectives()
    assert made["op"] == "Create_cart" and sorted(made["ranks"]) == [0, 1, 2, 3]


def test_a_call_made_in_library_code_is_told_at_the_users_line(pool4):
    """The standard library's contextlib calls the cell's callbacks when the with block ends: the
    calls (Barrier in Python, Allreduce in C where the C tracer is in use) are the cell's line 3,
    with contextlib's line beside it."""
    import contextlib

    cell = (
        "import contextlib\n"
        "a, b = np.ones(2), np.zeros(2)\n"
        "with contextlib.ExitStack() as stack:\n"
        "    stack.callback(comm.Barrier)\n"
        "    stack.callback(comm.Allreduce, a, b)\n"
        "comm.Bcast(a)\n"
    )
    trace = pool4.run(cell).trace
    sites = {(str(e["op"]), int(e["rank"])): (str(e["file"]), int(e["line"])) for e in trace.events}
    cell_file = sites["Bcast", 0][0]
    assert {sites[op, r] for op in ("Barrier", "Allreduce") for r in range(4)} == {(cell_file, 3)}
    assert set(trace.via) == set(range(4))
    behind = trace.via[0][cell_file, 3]
    assert behind[0] == contextlib.__file__ and behind[1] > 0
    slices = [e for e in trace.to_chrome()["traceEvents"] if e.get("name") == "Barrier"]
    assert {e["args"].get("library line") for e in slices} == {f"{contextlib.__file__}:{behind[1]}"}
    from mpinb.widgets.trace import TraceView  # the view's hover reads it from here

    view = TraceView(trace)
    assert view.library_lines[f"0 {view.files.index(cell_file)} 3"] == f"{contextlib.__file__}:{behind[1]}"


def test_mpinbs_own_helpers_count_as_library_code_wherever_they_sit(pool4):
    """The training tutorials' ``ring_allreduce`` (``mpinb/train``) makes its calls for the cell:
    each is told at the cell's line, whatever folder of mpinb the tracer's own modules are in."""
    import mpinb.train

    trace = pool4.run("from mpinb.train import ring_allreduce\ntotal = ring_allreduce(comm, np.ones(8))").trace
    files = {(str(e["file"]), int(e["line"])) for e in trace.events}
    assert len(files) == 1 and next(iter(files))[1] == 2, files
    assert mpinb.train.__file__.rsplit("/", 1)[0] not in next(iter(files))[0]


@pytest.mark.parametrize("world", ["started", "fresh"])
def test_freeing_the_world_behaves_as_in_mpi4py(pool4, world):
    """Also once an aborted run gave the ranks a fresh world (a copy of MPI's, which MPI itself
    does not know as predefined): freeing a copy of it once freed the world for good."""
    import mpinb

    constant = pool4.run("MPI.COMM_WORLD.py2f()").value
    if world == "fresh":
        with pytest.raises(mpinb.DeadlockError):
            pool4.run("comm.recv(source=MPI.ANY_SOURCE)", timeout=2)
    res = pool4.run(
        "comm.free(); MPI.COMM_WORLD.free()\n"
        "try:\n    comm.Free()\nexcept MPI.Exception as err:\n    refused = err.Get_error_class()\n"
        "copy = type(comm)(comm); copy.free()\n"
        "again = type(comm).fromhandle(comm.handle); again.free()\n"
        "import pickle\nunpickled = pickle.loads(pickle.dumps(MPI.COMM_WORLD)) is MPI.COMM_WORLD\n"
        "(refused != 0, copy == MPI.COMM_NULL, again == MPI.COMM_NULL, unpickled, comm.allreduce(1))"
    )
    assert set(res.value.values()) == {(True, True, True, True, 4)}
    assert pool4.run("MPI.COMM_WORLD.py2f()").value == constant, "the constant's handle, as under mpiexec"


def test_the_buffer_is_bounded_and_says_what_it_dropped(pool4):
    pool4.trace_capacity = 50
    try:
        res = pool4.run("for _ in range(80): comm.Barrier()")
    finally:
        pool4.trace_capacity = 100_000
    assert len(res.trace) == 4 * 50
    assert res.trace.dropped == {r: 30 for r in range(4)}
    assert "dropped" in repr(res.trace)


def test_a_run_on_many_ranks_shares_the_trace_budget(pool4):
    """Each rank records its share of the pool's budget, so a traced cell on many ranks cannot send
    the notebook ranks x capacity calls; two ranks of the same pool get twice the share of four."""
    self_exchange = "for _ in range(900): comm.sendrecv(None, dest=rank, source=rank)"  # 1,800 calls
    pool4.trace_budget = 4_000
    try:
        wide = pool4.run(self_exchange)
        narrow = pool4.run(self_exchange, targets=[0, 1])
    finally:
        pool4.trace_budget = 1_000_000
    assert len(wide.trace) == 4 * 1_000 and wide.trace.dropped == {r: 800 for r in range(4)}, "1,000 each"
    assert len(narrow.trace) == 2 * 1_800 and narrow.trace.dropped == {}, "2 ranks: 2,000 each"
    assert "trace_budget" in summary_text(wide.trace)


def test_chrome_trace_is_valid_and_every_flow_has_an_end(pool4, tmp_path):
    res = pool4.run(
        "comm.send(rank, dest=(rank + 1) % size)\ncomm.recv(source=(rank - 1) % size)\ncomm.Barrier()"
    )
    path = tmp_path / "trace.json"
    res.trace.to_chrome(str(path))
    document = json.loads(path.read_text())
    events = document["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "s", "f"}
    assert sorted(e["args"]["name"] for e in events if e["name"] == "thread_name") == [
        "rank 0", "rank 1", "rank 2", "rank 3"]
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    assert starts == ends and len(starts) == 4
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] > 0 and isinstance(e["ts"], float) and e["tid"] in range(4)


def test_scripts_are_traced_too(pool4, tmp_path):
    script = tmp_path / "pingpong.py"
    script.write_text(
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank == 0:\n"
        "    comm.send('ping', dest=1)\n"
        "elif comm.rank == 1:\n"
        "    comm.recv(source=0)\n"
    )
    res = pool4.run_file(script)
    (message,) = res.trace.messages()
    assert (message["source"], message["dest"], message["send_line"]) == (0, 1, 4)


def test_messages_to_self_at_sizes_1_and_4(any_pool):
    # A blocking send to oneself may deadlock (it does with MPICH), so post it nonblocking.
    res = any_pool.run("req = comm.isend(rank, dest=rank)\ncomm.recv(source=rank)\nreq.wait()")
    pairs = sorted((m["source"], m["dest"]) for m in res.trace.messages())
    assert pairs == [(r, r) for r in range(any_pool.size)]


def test_collectives_are_grouped_across_the_ranks_that_took_part(pool4):
    res = pool4.run("comm.Barrier()\nhalf = comm.Split(rank // 2)\nhalf.allreduce(rank)\ncomm.bcast(1)")
    found = [(c["op"], sorted(c["ranks"])) for c in res.trace.collectives()]
    assert found[0] == ("Barrier", [0, 1, 2, 3])
    assert sorted(found[1:]) == [("Split", [0, 1, 2, 3]), ("allreduce", [0, 1]), ("allreduce", [2, 3]),
                                 ("bcast", [0, 1, 2, 3])]
    for c in res.trace.collectives():
        assert c["end"] >= c["start"]


def test_buffer_sendrecv_pairs_with_its_partner(pool4):
    res = pool4.run(
        "buf = np.zeros(4)\n"
        "comm.Sendrecv(np.full(4, float(rank)), dest=(rank + 1) % size, sendtag=3, recvbuf=buf,\n"
        "              source=(rank - 1) % size, recvtag=3)\n"
        "buf[0]"
    )
    assert res.value == {r: float((r - 1) % 4) for r in range(4)}
    messages = res.trace.messages()
    assert sorted((m["source"], m["dest"], m["tag"], m["bytes"]) for m in messages) == [
        (r, (r + 1) % 4, 3, 32) for r in range(4)]


def test_testall_fills_in_wildcard_sources(pool4):
    res = pool4.run(
        "b = np.empty(2)\n"
        "reqs = [comm.Irecv(b, source=MPI.ANY_SOURCE, tag=6), comm.Isend(np.ones(2), dest=(rank + 1) % size, tag=6)]\n"
        "while not MPI.Request.Testall(reqs):\n"
        "    pass\n"
    )
    assert sorted((m["source"], m["dest"]) for m in res.trace.messages()) == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_communicators_made_and_freed_in_a_loop_release_everything(pool4):
    """Each traced communicator's private copy is freed with it: MPICH has about 2,000 context
    ids, which a loop of Dup/Free (or Split/Free) would otherwise use up."""
    res = pool4.run("for i in range(1500):\n    c = comm.Dup()\n    c.Free()\n"
                    "    s = comm.Split(rank % 2)\n    s.free()\n"
                    "(c == MPI.COMM_NULL, s == MPI.COMM_NULL, comm.Dup().allreduce(1))", trace=False)
    assert set(res.value.values()) == {(True, True, 4)}


def test_communicator_ids_agree_when_only_some_ranks_make_one(pool4):
    """Create_group is called by the group's members only; the communicators made after it must
    still have the same id on every member, or their messages could not be matched."""
    res = pool4.run(
        "if rank < 2:\n    pair = comm.Create_group(comm.group.Incl([0, 1]))\n"
        "ring = comm.Dup()\n"
        "ring.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)"
    )
    assert res.value == {r: (r - 1) % 4 for r in range(4)}
    messages = res.trace.messages()
    assert len(messages) == 4 and len({m["comm"] for m in messages}) == 1


def test_communicators_made_after_an_aborted_run_get_new_ids(pool4):
    pool4.run("before = comm.Dup()")
    with pytest.raises(TimeoutError):
        pool4.run("comm.recv(source=(rank + 1) % size)", timeout=1)
    res = pool4.run("after = comm.Dup()\n"
                    "before.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)\n"
                    "after.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)")
    comms = {m["comm"] for m in res.trace.messages()}
    assert len(comms) == 2 and len(res.trace.messages()) == 8


# -- wait states (mpinb.trace._waits) ------------------------------------------------------------


@pytest.mark.quick
def test_a_late_sender_is_found_on_the_receiving_line(pool4):
    res = pool4.run(
        "import time\n"
        "if rank == 1:\n"
        "    time.sleep(0.2)\n"
        "    comm.send('late', dest=0)\n"
        "elif rank == 0:\n"
        "    comm.recv(source=1)\n"
    )
    (late,) = [w for w in res.trace.waits() if w["kind"] == "late sender"]
    assert (late["rank"], late["peer"], late["line"], late["peer_line"]) == (0, 1, 6, 4)
    assert 0.15 < late["seconds"] < 0.4
    rows = {row["rank"]: row for row in res.trace.summary()}
    assert rows[0]["waiting"] == pytest.approx(late["seconds"]) and rows[1]["waiting"] == 0.0
    assert "rank 0 waited 0.2" in summary_text(res.trace) and "for rank 1, which sent only" in summary_text(res.trace)


def test_load_imbalance_before_a_collective_is_a_wait_on_every_other_rank(pool4):
    res = pool4.run("import time\nif rank == 2:\n    time.sleep(0.2)\ncomm.allreduce(rank)")
    found = [w for w in res.trace.waits() if w["kind"] == "wait at collective"]
    assert sorted(w["rank"] for w in found) == [0, 1, 3] and {w["peer"] for w in found} == {2}
    assert all(0.15 < w["seconds"] < 0.4 and w["line"] == 4 for w in found)


def test_a_balanced_exchange_has_no_wait_states(pool4):
    res = pool4.run("comm.Barrier()\nfor _ in range(3):\n    comm.allreduce(rank)")
    assert [w for w in res.trace.waits() if w["seconds"] > 0.05] == []


def test_a_synchronous_send_waits_for_a_late_receiver(pool4):
    res = pool4.run(
        "import time\n"
        "if rank == 0:\n"
        "    comm.Ssend(np.zeros(1), dest=1)\n"
        "elif rank == 1:\n"
        "    time.sleep(0.2)\n"
        "    comm.Recv(np.zeros(1), source=0)\n"
    )
    (late,) = [w for w in res.trace.waits() if w["kind"] == "late receiver"]
    assert (late["rank"], late["peer"], late["line"], late["peer_line"]) == (0, 1, 3, 6)
    assert 0.15 < late["seconds"] < 0.4


def test_a_late_sender_is_found_at_the_wait_of_a_nonblocking_receive(pool4):
    res = pool4.run(
        "import time\n"
        "if rank == 1:\n"
        "    time.sleep(0.2)\n"
        "    comm.Send(np.ones(4), dest=0)\n"
        "elif rank == 0:\n"
        "    buf = np.zeros(4)\n"
        "    request = comm.Irecv(buf, source=1)\n"
        "    request.Wait()\n"
    )
    (late,) = [w for w in res.trace.waits() if w["kind"] == "late sender"]
    assert (late["rank"], late["op"], late["line"], late["peer_line"]) == (0, "Wait", 8, 4)
    assert 0.15 < late["seconds"] < 0.4


def test_a_waitall_on_several_late_senders_loses_its_time_once(pool4):
    res = pool4.run(
        "import time\n"
        "if rank == 0:\n"
        "    requests = [comm.irecv(source=r) for r in (1, 2, 3)]\n"
        "    MPI.Request.waitall(requests)\n"
        "else:\n"
        "    time.sleep(0.1 * rank)\n"
        "    comm.send(rank, dest=0)\n"
    )
    (waited,) = [w for w in res.trace.waits() if w["rank"] == 0]
    assert (waited["op"], waited["peer"]) == ("waitall", 3) and 0.25 < waited["seconds"] < 0.5


def test_imbalance_before_a_nonblocking_collective_is_lost_in_its_wait(pool4):
    res = pool4.run(
        "import time\n"
        "if rank == 3:\n"
        "    time.sleep(0.2)\n"
        "out = np.zeros(1)\n"
        "comm.Iallreduce(np.ones(1), out).Wait()\n"
    )
    found = [w for w in res.trace.waits() if w["kind"] == "wait at collective"]
    assert sorted(w["rank"] for w in found) == [0, 1, 2] and {w["op"] for w in found} == {"Wait"}
    assert all(0.15 < w["seconds"] < 0.4 for w in found)


def test_a_deadlocked_run_keeps_its_trace_with_the_calls_it_broke_off(pool4):
    import mpinb

    with pytest.raises(mpinb.DeadlockError):
        pool4.run(
            "comm.Barrier()\n"
            "if rank < 2:\n"
            "    comm.recv(source=1 - rank, tag=3)\n",
            targets=None, timeout=3,
        )
    trace = pool4.last_result.trace
    unfinished = trace.unfinished()
    assert sorted(zip(unfinished["rank"], unfinished["peer_world"], unfinished["op"])) == [
        (0, 1, "recv"), (1, 0, "recv")]
    assert set(unfinished["line"]) == {3} and all(unfinished["kind"] == RECV)
    assert len(trace.collectives()) == 1 and trace.messages() == []  # broken-off calls match nothing
    for row in unfinished:  # each ends where its rank stopped recording, after it had waited
        assert row["end"] == pytest.approx(trace.span[int(row["rank"])][1]) and row["end"] - row["start"] > 1
    assert trace.critical_path().steps == [] and "stopped" in trace.critical_path().text()


STAGE_SECONDS = 0.25
PIPELINE = (
    "import time\n"
    "if rank > 0:\n"
    "    comm.recv(source=rank - 1)\n"
    f"time.sleep({STAGE_SECONDS})\n"
    "if rank < size - 1:\n"
    "    comm.send(rank, dest=rank + 1)\n"
)


def test_a_pipelines_critical_path_runs_through_every_stage_in_order(pool4):
    trace = pool4.run(PIPELINE).trace
    path = trace.critical_path()
    assert path.ranks() == [0, 1, 2, 3]
    held = path.by_rank()
    # Each stage holds the path for its own work and the hop to the next, never for its wait
    # (rank r waits r stages): a loaded machine (4 ranks beside other work on 2 cores) may make
    # a hop take a tenth of a second or more, and a stage's wait is at least a whole stage.
    assert all(0.8 * STAGE_SECONDS < held[r] < 1.8 * STAGE_SECONDS for r in range(4)), held
    assert sum(held.values()) == pytest.approx(path.wall, rel=0.05)
    (biggest, seconds), *_ = path.by_line()
    assert biggest in ("computing before line 6", "computing after the last MPI call") \
        and seconds > 2.5 * STAGE_SECONDS
    steps = path.steps
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(steps, steps[1:]))  # a chain in time


def test_the_critical_path_of_an_imbalance_runs_through_the_slow_rank(pool4):
    trace = pool4.run("import time\nif rank == 2:\n    time.sleep(0.3)\ncomm.allreduce(rank)").trace
    path = trace.critical_path()
    assert path.ranks()[0] == 2 and path.by_rank()[2] > 0.25
    assert "critical path" in path.text() and "rank 2" in path.text()


LATE_SENDER = (
    "import time\n"
    "if rank == 1:\n"
    "    time.sleep(0.2)\n"
    "    comm.Send(np.zeros(1000), dest=0, tag=4)\n"
    "elif rank == 0:\n"
    "    comm.Recv(np.zeros(1000), source=1, tag=4)\n"
    "comm.Barrier()\n"
)


@pytest.mark.quick
def test_the_matrix_counts_bytes_messages_and_time(pool4):
    trace = pool4.run(LATE_SENDER).trace
    assert trace.matrix("bytes")[1, 0] == 8000 and trace.matrix("messages")[1, 0] == 1
    time = trace.matrix("time")
    assert 0.15 < time[1, 0] < 0.4 and time.sum() == time[1, 0]
    with pytest.raises(ValueError, match="'bytes', 'messages', 'time'"):
        trace.matrix("seconds")


def test_histograms_of_sizes_and_durations_per_operation(pool4):
    trace = pool4.run(LATE_SENDER + "for n in (1, 100, 10000):\n    comm.bcast(np.zeros(n))\n").trace
    hist = trace.histograms()
    sizes, durations = hist["sizes"], hist["durations"]
    assert list(sizes["counts"]) == ["Send"] and sum(sizes["counts"]["Send"]) == 1
    (bin_index,) = [i for i, n in enumerate(sizes["counts"]["Send"]) if n]
    assert sizes["edges"][bin_index] <= 8000 < sizes["edges"][bin_index + 1]
    assert sum(durations["counts"]["bcast"]) == 12 and sum(durations["counts"]["Barrier"]) == 4
    (slow,) = [i for i, n in enumerate(durations["counts"]["Recv"]) if n]
    assert durations["edges"][slow] <= 0.2 < durations["edges"][slow + 1] * 2


def test_to_pandas_has_a_row_per_call(pool4):
    trace = pool4.run(LATE_SENDER).trace
    frame = trace.to_pandas()
    assert len(frame) == len(trace) and set(frame["kind"]) == {"send", "recv", "collective"}
    recv = frame[frame["op"] == "Recv"].iloc[0]
    assert recv["stop"] - recv["start"] > 0.15 and recv["line"] == 6
    assert frame.groupby("rank").size().to_dict() == {0: 2, 1: 2, 2: 1, 3: 1}


def test_chrome_export_carries_wait_states_and_unfinished_calls(pool4):
    import mpinb

    trace = pool4.run(LATE_SENDER).trace
    waits = [e for e in trace.to_chrome()["traceEvents"] if e.get("cat") == "wait state"]
    assert {e["name"] for e in waits} == {"late sender", "wait at barrier"}
    (late,) = [e for e in waits if e["name"] == "late sender"]
    assert late["tid"] == 0 and late["args"]["waited for rank"] == 1
    assert 150e3 < late["dur"] < 400e3
    with pytest.raises(mpinb.DeadlockError):
        pool4.run("if rank == 0:\n    comm.recv(source=1)\n", timeout=2)
    (open_call,) = [e for e in pool4.last_result.trace.to_chrome()["traceEvents"]
                    if e.get("args", {}).get("unfinished")]
    assert open_call["name"] == "recv" and open_call["tid"] == 0


# -- the C tracer (mpinb/rank/mpi/_tracer.c) and the Python tracer it falls back to --------------------

def test_the_ranks_trace_their_hottest_calls_in_c(pool4):
    assert pool4.tracer == "C", "make install builds the C tracer: without it every traced call is slower"
    res = pool4.run("[(type(getattr(type(comm), name)).__name__, getattr(type(comm), name).fallback.__module__,\n"
                    "  getattr(comm, name).__name__,\n"
                    "  getattr(comm, name).__doc__ == getattr(MPI.Intracomm, name).__doc__)\n"
                    " for name in ('Send', 'Recv', 'send', 'recv', 'Allreduce')]")
    expected = [("Method", module, name, True) for name, module in (
        ("Send", "mpinb.rank.mpi._p2p"), ("Recv", "mpinb.rank.mpi._p2p"), ("send", "mpinb.rank.mpi._p2p"),
        ("recv", "mpinb.rank.mpi._p2p"), ("Allreduce", "mpinb.rank.mpi._collectives"))]
    assert set(map(str, res.value.values())) == {str(expected)}
    assert {row["tracer"] for row in pool4.status()} == {"C"}


@pytest.fixture(scope="module")
def python_tracer_pool():
    import mpinb

    with mpinb.Pool(4, env={"MPINB_TRACER": "python", **REPRODUCIBLE}) as pool:
        yield pool


# Intel MPI's reductions in their reproducible mode (other MPIs ignore it): the tests that compare
# a traced reduction's bits with an untraced one's need MPI to give the same bits twice.
REPRODUCIBLE = {"I_MPI_CBWR": "1"}


# Every form the C path takes and the ones it hands to Python, blocking and not, small and large.
BOTH_TRACERS = (
    "right, left = (rank + 1) % size, (rank - 1) % size\n"
    "out = []\n"
    "a = np.arange(5, dtype='i') + rank; b = np.empty(5, dtype='i')\n"
    "if rank % 2 == 0:\n"
    "    comm.Send(a, dest=right, tag=1); comm.Recv(b, source=left, tag=1)\n"
    "else:\n"
    "    comm.Recv(b, source=left, tag=1); comm.Send(a, dest=right, tag=1)\n"
    "out.append(b.tolist())\n"
    "st = MPI.Status()\n"
    "if rank % 2 == 0:\n"
    "    comm.Send([a, 3, MPI.INT], dest=right, tag=2)\n"
    "    comm.Recv([b, MPI.INT], source=MPI.ANY_SOURCE, tag=2, status=st)\n"
    "else:\n"
    "    comm.Recv(b, MPI.ANY_SOURCE, 2, st); comm.Send([a, 3, MPI.INT], dest=right, tag=2)\n"
    "out.append((b[:3].tolist(), st.Get_source(), st.Get_tag(), st.Get_count(MPI.INT)))\n"
    "big = np.full(300_000, float(rank))\n"
    "if rank % 2 == 0:\n"
    "    comm.send({'r': rank, 'big': big}, dest=right, tag=3); got = comm.recv(source=left, tag=3)\n"
    "else:\n"
    "    got = comm.recv(source=left, tag=3); comm.send({'r': rank, 'big': big}, dest=right, tag=3)\n"
    "out.append((got['r'], float(got['big'].sum())))\n"
    "comm.send(('small', rank), dest=right)\n"
    "out.append(comm.recv(None, left, MPI.ANY_TAG, st) + (st.Get_tag(),))\n"
    "comm.Send(np.zeros(1), dest=MPI.PROC_NULL); comm.Recv(np.zeros(1), source=MPI.PROC_NULL)\n"
    "out.append(comm.recv(source=MPI.PROC_NULL))\n"
    "x = np.full(4, float(rank)); y = np.empty(4); comm.Allreduce(x, y, op=MPI.MAX); out.append(y.tolist())\n"
    "comm.Allreduce(MPI.IN_PLACE, x); out.append(x.tolist())\n"
    "z = np.arange(3.0) if rank == 1 else np.zeros(3); comm.Bcast(z, root=1); out.append(z.tolist())\n"
    "L = np.full(40_000, float(rank)); M = np.empty(40_000); comm.Allreduce(L, M); out.append(float(M[0]))\n"
    "comm.Allreduce(MPI.IN_PLACE, M); out.append(float(M[-1]))\n"
    "comm.Bcast(L, root=2); out.append(float(L[-1]))\n"
    "R = np.empty(40_000) if rank == 1 else None\n"
    "comm.Reduce(L, R, op=MPI.SUM, root=1); out.append(None if R is None else float(R.sum()))\n"
    "g = np.empty(size, dtype='i') if rank == 0 else None\n"
    "comm.Gather(np.array([rank], dtype='i'), g, root=0); out.append(None if g is None else g.tolist())\n"
    "try:\n"
    "    comm.Send(np.zeros(2), dest=size + 3)\n"
    "except MPI.Exception as e:\n"
    "    out.append(('error', e.Get_error_class()))\n"
    "try:\n"
    "    comm.Recv(b'readonly', source=left)\n"
    "except Exception as e:\n"
    "    out.append(type(e).__name__)\n"
    "try:\n"
    "    comm.send(lambda: 1, dest=right)\n"
    "except Exception as e:\n"
    "    out.append(type(e).__name__)\n"
    "exposed = np.zeros(1); w = MPI.Win.Create(exposed, comm=comm)\n"
    "w.Fence(); w.Put(np.full(1, rank * 1.0), right); w.Fence(assertion=MPI.MODE_NOSUCCEED); w.Free()\n"
    "out.append(float(exposed[0]))\n"
    "out\n"
)


def _schema(trace) -> list[tuple]:
    """Everything a trace says but its times."""
    return sorted((int(e["rank"]), str(e["op"]), int(e["kind"]), int(e["peer"]), int(e["tag"]), int(e["sent"]),
                   int(e["received"]), int(e["line"])) for e in trace.events)


def test_the_c_and_the_python_tracer_give_the_same_results_and_the_same_trace(pool4, python_tracer_pool):
    assert python_tracer_pool.tracer == "python: MPINB_TRACER=python asks for the Python tracer"
    in_c, in_python = pool4.run(BOTH_TRACERS), python_tracer_pool.run(BOTH_TRACERS)
    untraced = pool4.run(BOTH_TRACERS, trace=False)
    assert in_c.value == in_python.value == untraced.value
    assert in_c.value[1][-4:] == [("error", 6), "BufferError", "PicklingError", 0.0], "rank 0 put into rank 1"
    assert _schema(in_c.trace) == _schema(in_python.trace)
    assert len(in_c.trace) > 40


def test_a_run_names_a_request_it_never_completed(pool4):
    cell = ("x = np.zeros(1)\nif rank == 0:\n    req = comm.Isend(np.ones(1), dest=1, tag=3)\n"
            "elif rank == 1:\n    comm.Recv(x, source=0, tag=3)")
    result = pool4.run(cell)
    assert [(f.check, f.rank, f.line) for f in result.findings] == [("never-completed", 0, 3)]
    assert "rank 0: Isend at line 3 was never completed" in str(result.findings[0])
    # the correct twin: the request waited for (the one left above too)
    twin = ("if rank == 0:\n    req.wait()\n    req = comm.isend('x', dest=1)\n    req.wait()\n"
            "elif rank == 1:\n    comm.recv(source=0)")
    assert pool4.run(twin).findings == []
    assert pool4.run("comm.allreduce(1)", trace=False).findings == []


def test_a_send_request_freed_is_mpis_to_complete_but_a_receives_is_named(pool4):
    # mpi4py.futures' way: a task's issend freed once the worker's answer shows it arrived
    freed = ("if rank == 0:\n    req = comm.issend('task', dest=1)\n    answer = comm.recv(source=1)\n"
             "    MPI.Request.Free(req)\nelif rank == 1:\n    comm.send(comm.recv(source=0).upper(), dest=0)")
    result = pool4.run(freed)
    assert result.findings == [] and pool4.run("answer", targets=[0]).value[0] == "TASK"
    [send] = result.trace.events[result.trace.events["op"] == "issend"]
    assert not send["pending"] and send["end"] >= send["start"]
    # (on a communicator of its own: the receive stays posted, and must never take a later message)
    dropped = ("own = comm.Dup()\nif rank == 1:\n    req = own.Irecv(np.zeros(1), source=0, tag=9)\n"
               "    req.Free()\nown.Free()")
    assert [(f.check, f.rank, f.line) for f in pool4.run(dropped).findings] == [("never-completed", 1, 3)]


# Float reductions whose result depends on the order of the sums (values of 16 magnitudes), in
# the forms the C path takes and in the ones it hands to Python, mixed across the ranks.
REDUCTIONS = (
    "rng = np.random.default_rng(rank)\n"
    "x = rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000)\n"
    "y = np.empty_like(x); out = []\n"
    "comm.Allreduce(x, y); out.append(y.tobytes())\n"
    "comm.Allreduce([x, MPI.DOUBLE], [y, MPI.DOUBLE]) if rank % 2 else comm.Allreduce(x, y); out.append(y.tobytes())\n"
    "r = np.empty_like(x) if rank == 0 else None; comm.Reduce(x, r, root=0)\n"
    "out.append(None if r is None else r.tobytes())\n"
    "comm.Scan(x, y); out.append(y.tobytes())\n"
    "comm.Exscan(x, y); out.append(y.tobytes() if rank else None)\n"
    "comm.Reduce_scatter_block(np.tile(x, size), y); out.append(y.tobytes())\n"
    "comm.Reduce_scatter(np.tile(x, size), y, [len(x)] * size); out.append(y.tobytes())\n"
    "big = np.tile(x, 300); total = np.empty_like(big); comm.Allreduce(big, total); out.append(total.tobytes())\n"
    "out\n"
)


@pytest.mark.timeout(120)
def test_traced_reductions_give_the_bits_of_untraced_ones(pool4, python_tracer_pool):
    """Open MPI's nonblocking reductions add in another order than its blocking ones (a sum of
    1000 such values on 4 ranks differs in the last bits): tracing must not change a result.

    Intel MPI's own large Allreduce differs in the last bits from call to call unless asked for
    reproducible results (plain mpiexec gave 10 to 25 different sums of 2.4 MB in 40 calls, and
    one with I_MPI_CBWR=1): there both pools run in that mode (see python_tracer_pool)."""
    from _processes import intel_mpi

    if intel_mpi():
        with mpinb.Pool(4, env=REPRODUCIBLE) as pool:
            compare_reductions(pool, python_tracer_pool)
    else:
        compare_reductions(pool4, python_tracer_pool)


def compare_reductions(c_tracer_pool, python_tracer_pool) -> None:
    untraced = c_tracer_pool.run(REDUCTIONS, trace=False).value
    assert not (changed := changed_bits(c_tracer_pool.run(REDUCTIONS).value, untraced)), changed
    assert not (changed := changed_bits(python_tracer_pool.run(REDUCTIONS).value, untraced)), changed
    assert len({untraced[r][0] for r in range(4)}) == 1, "every rank has the same sum"


REDUCTION_NAMES = ["Allreduce", "Allreduce (given as [buffer, type] on odd ranks)", "Reduce", "Scan", "Exscan",
                   "Reduce_scatter_block", "Reduce_scatter", "Allreduce of 2.4 MB"]


def changed_bits(traced: dict[int, list], untraced: dict[int, list]) -> list[str]:
    """Which of REDUCTIONS' results differ, on which ranks, in how many values (a diff of the
    bytes themselves would take pytest minutes to print)."""
    changed = []
    for rank in sorted(untraced):
        for name, got, expected in zip(REDUCTION_NAMES, traced[rank], untraced[rank], strict=True):
            if got != expected:
                values = [np.frombuffer(blob, dtype=np.float64) if blob is not None else np.array([])
                          for blob in (got, expected)]
                differ = (values[0] != values[1]).sum() if values[0].shape == values[1].shape else "all"
                changed.append(f"{name} on rank {rank}: {differ} of {values[1].size} values differ")
    return changed


def blocking_reductions(pool) -> list[str]:
    """The reductions that this MPI's traced calls run as the blocking call (see _collectives)."""
    return pool.run("from mpinb.rank.mpi._collectives import BLOCKING_AFTER_AGREEMENT\n"
                    "sorted(BLOCKING_AFTER_AGREEMENT)").value[0]


def enters_ahead(pool) -> bool:
    """Whether this pool's traced Allreduce enters MPI ahead of its members (mpinb.rank.mpi._entered_ahead)."""
    return pool.run("from mpinb.rank.mpi import _entered_ahead\n_entered_ahead.counts()['on']").value[0]


def test_members_in_different_reductions_are_told_so(pool4):
    if not blocking_reductions(pool4):
        pytest.skip("this MPI's traced reductions are polled nonblocking calls (the hang watch names a mismatch)")
    cell = "x = np.ones(3); y = np.empty(3)\ncomm.Reduce(x, y) if rank else comm.Scan(x, y)"
    result = pool4.run(cell, check=False, timeout=60)
    said = "mismatched collectives on communicator 'world': rank 0 called Scan; ranks 1, 2, 3 called Reduce (root 0)"
    assert {r: (e.type, said in e.message) for r, e in result.errors.items()} == dict.fromkeys(
        range(4), ("RuntimeError", True)), result.errors
    assert pool4.run("comm.allreduce(1)").value == dict.fromkeys(range(4), 4)


def test_an_allreduce_that_meets_another_reduction_is_a_diagnosed_hang(pool4):
    """An Allreduce entered ahead does not ask the others first, so a member in another reduction
    is seen as a hang (as where reductions are polled): named, interrupted, and the pool goes on."""
    if not enters_ahead(pool4):
        pytest.skip("this pool's traced Allreduce agrees first (told so above)")
    pids = pool4.run("import os\nos.getpid()").value
    cell = "x = np.ones(3); y = np.empty(3)\ncomm.Allreduce(x, y) if rank else comm.Scan(x, y)"
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(cell, timeout=5)
    ops = {rank: state["op"] for rank, state in info.value.diagnosis.waits.items()}
    assert ops == {0: "Scan", 1: "Allreduce", 2: "Allreduce", 3: "Allreduce"}, str(info.value)
    assert "not in the same collective call" in str(info.value)
    assert pool4.run("comm.allreduce(1)").value == dict.fromkeys(range(4), 4)
    assert pool4.run("import os\nos.getpid()").value == pids, "the same processes: no restart"


def test_an_allreduce_enters_mpi_ahead_of_its_members(pool4):
    """Where the pool has a board (Open MPI, Intel MPI, one host), a traced Allreduce does not
    wait for the members to agree first; the sums are MPI's own."""
    if not enters_ahead(pool4):
        pytest.skip("this pool's traced Allreduce is polled, or agrees first")
    cell = ("from mpinb.rank.mpi import _entered_ahead\nimport time\nbefore = _entered_ahead.counts()\n"
            "x = np.full(1000, rank + 1.0); y = np.empty(1000)\nsub = comm.Split(rank % 2)\nz = np.zeros(1000)\n"
            "for i in range(30):\n    if rank == 3 and i % 10 == 0:\n        time.sleep(0.05)\n"
            "    comm.Allreduce(x, y)\n    sub.Allreduce(MPI.IN_PLACE, z) if i == 0 else sub.Allreduce(x, z)\n"
            "after = _entered_ahead.counts()\nsub.Free()\n(y[0], z[0], after['ahead'] - before['ahead'])")
    values = pool4.run(cell, timeout=60).value
    sums = {rank: (values[rank][0], values[rank][1]) for rank in range(4)}
    assert sums == {rank: (10.0, 4.0 if rank % 2 == 0 else 6.0) for rank in range(4)}
    assert sum(values[rank][2] for rank in range(4)) > 0, "no call entered ahead"


@pytest.mark.timeout(120)
def test_reductions_on_two_communicators_in_opposite_orders_are_released(pool4):
    """Half the ranks reduce on a then b, half on b then a: under mpiexec a deadlock. Of two calls
    entered at once at least one rank waits where an interrupt reaches it (the board's rule), so
    the hang is named, the ranks inside MPI are released by the others, and the pool goes on."""
    if not enters_ahead(pool4):
        pytest.skip("this pool's traced Allreduce is polled, or agrees first")
    pids = pool4.run("import os\nos.getpid()").value
    cell = ("a = comm.Dup(); b = comm.Dup()\nx = np.ones(3); y = np.empty(3)\n"
            "first, second = (a, b) if rank % 2 == 0 else (b, a)\nfirst.Allreduce(x, y)\nsecond.Allreduce(x, y)\n")
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(cell, timeout=5)
    waits = info.value.diagnosis.waits
    assert {rank: (state["op"], state["line"]) for rank, state in waits.items()} == dict.fromkeys(
        range(4), ("Allreduce", 4)), str(info.value)
    assert "restarted" not in str(info.value)
    again = pool4.run("x = np.ones(3); y = np.empty(3)\na.Allreduce(x, y); b.Allreduce(y, x)\na.Free(); b.Free()\nx[0]",
                      timeout=30)
    assert again.value == dict.fromkeys(range(4), 16.0)
    assert pool4.run("import os\nos.getpid()").value == pids, "the same processes: no restart"


# A reduction that runs as the blocking call is first tried on a revoked copy, unless arguments of
# the same key passed that already (mpinb/rank/mpi/_tracer.c, CallKey): after a run of good calls, each
# way one rank's arguments change must still be tried, or the others would block for good.
CHANGED_ARGUMENTS = {
    "read-only receive buffer": ("y.setflags(write=False)", "BufferError"),
    "other format, same memory": ("y = y.view(np.int64)", "ValueError"),
    "shorter receive buffer": ("y = y[:2]", "ValueError"),
    "every other element": ("y = np.empty(8)[::2]", "BufferError"),
    "an operation the datatype has not": ("op = MPI.BAND", "mpi4py.MPI.Exception"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CHANGED_ARGUMENTS, ids=list(CHANGED_ARGUMENTS))
def test_a_reduction_whose_arguments_change_on_one_rank_is_refused_there_alone(pool4, case):
    if "Allreduce" not in blocking_reductions(pool4):
        pytest.skip("this MPI's traced reductions are polled nonblocking calls (nothing is rehearsed)")
    change, error = CHANGED_ARGUMENTS[case]
    if ("operation" in case and not pool4.run("from mpinb.rank.mpi._collectives import _REVOCABLE\n_REVOCABLE").value[0]
            and not enters_ahead(pool4)):
        pytest.skip("only MPI refuses this, this MPI cannot revoke a rehearsal's copy, and the others agreed first "
                    "(docs/guide/hangs.md: the pool restarts)")
    # (one call site, so that its fourth call is the same call as the three good ones but for the change)
    cell = ("x = np.ones(4); y = np.empty(4); op = MPI.SUM\n"
            "for i in range(4):\n"
            f"    if i == 3 and rank == 2:\n        {change}\n"
            "    comm.Allreduce(x, y, op=op)\n")
    began = time.monotonic()
    with pytest.raises(mpinb.RankError) as info:
        pool4.run(cell, timeout=20)
    assert time.monotonic() - began < 5, "the other ranks waited where an interrupt reaches them"
    (ranks, failure), = info.value.groups()
    assert (ranks, failure.type) == ([2], error), str(info.value)
    assert "restarted" not in str(info.value)
    assert pool4.run("comm.allreduce(rank)").value == dict.fromkeys(range(4), 6)


@pytest.mark.timeout(120)
def test_a_reduction_that_one_rank_never_joins_is_interrupted_and_the_next_ones_run(pool4):
    """Rank 1 waits for a message instead: the others are named, interrupted where they wait, and
    the reductions after it (on the world and on a communicator made later) run as before."""
    pool4.run("kept = rank")
    cell = ("x = np.ones(3); y = np.empty(3)\n"
            "comm.Recv(y, source=0) if rank == 1 else comm.Allreduce(x, y)")
    with pytest.raises(mpinb.DeadlockError) as info:
        pool4.run(cell, timeout=5)
    assert "Allreduce" in str(info.value) and "line 2" in str(info.value), str(info.value)
    assert "restarted" not in str(info.value), "the ranks recovered without a restart"
    for _ in range(2):
        after = ("sub = comm.Split(rank % 2)\nz = np.full(3, float(rank)); w = np.empty(3)\n"
                 "comm.Allreduce(z, w); v = np.empty(3); sub.Allreduce(z, v); sub.Free()\n(w[0], v[0], kept)")
        assert pool4.run(after, timeout=30).value == {r: (6.0, 2.0 + 2 * (r % 2), r) for r in range(4)}


def test_without_an_mpi_compiler_the_pool_says_so_and_traces_in_python():
    import mpinb

    with pytest.warns(RuntimeWarning, match="C tracer could not be built or loaded .*/nowhere/mpicc"):
        pool = mpinb.Pool(2, env={"MPINB_MPICC": "/nowhere/mpicc"}).start()
    try:
        assert pool.tracer.startswith("python: ") and "/nowhere/mpicc" in pool.tracer
        res = pool.run("comm.send(rank, dest=1 - rank)\ncomm.recv(source=1 - rank)")
        assert res.value == {0: 1, 1: 0} and len(res.trace.messages()) == 2
    finally:
        pool.stop()


# -- the README's picture of the views (docs/figures/views.svg) ---------------------------------------
def test_the_readmes_picture_is_what_its_script_draws_from_a_real_run(pool4):
    """The picture on the front page is drawn by docs/draw_views.py from a traced run: a fresh
    drawing has the kept one's calls and messages, its waits and its critical path (the times
    differ from run to run, so the kept file is not compared byte for byte)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("draw_views", Path(__file__).parent.parent / "docs" / "draw_views.py")
    draw_views = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draw_views)
    fresh, kept = draw_views.draw(pool4), draw_views.PICTURE.read_text()

    def counted(svg: str) -> tuple[str, str]:
        return re.search(r" ms, (\d+) calls, (\d+) messages<", svg).groups()

    # 3 steps x 4 ranks x (sendrecv's send and receive, allreduce): 36 calls; 12 messages round the ring
    assert counted(kept) == counted(fresh) == ("36", "12"), "run docs/draw_views.py to draw the picture again"
    for svg in (kept, fresh):
        assert "<polyline" in svg and f'height="4" fill="{WAIT_COLOR}"' in svg, "the critical path and the waits"
