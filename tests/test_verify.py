"""``verify``: MPI correctness checks beyond the cheap ones. One known-answer program per check
(found, with its ranks and lines) and its correct twin (nothing found), on a real pool; the
checks change nothing the code computes, and the C tracer is back after a verified run."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from _processes import SKIP_ON_INTEL

import mpinb
from mpinb.common._events import COLLECTIVE, RECV, SEND, WAIT
from mpinb.trace import Trace

pytestmark = [pytest.mark.every_mpi, SKIP_ON_INTEL,
              pytest.mark.timeout(120)]


def _checks(result) -> list[tuple[str, int, int]]:
    return [(f.check, f.rank, f.line) for f in result.findings]


def _found(pool, cell: str, expected: list[tuple[str, int, int]], text: str):
    """Run ``cell`` verified: its findings are ``expected``, and the first one's text begins with ``text``."""
    result = pool.run(cell, verify=True)
    assert _checks(result) == expected
    assert str(result.findings[0]).startswith(text), str(result.findings[0])
    return result


UNSAFE_RING = """\
a = np.full(4, rank, dtype='d'); b = np.empty(4)
comm.Send(a, dest=(rank + 1) % size, tag=1)
comm.Recv(b, source=(rank - 1) % size, tag=1)
b[0]
"""

SAFE_RINGS = """\
a = np.full(4, rank, dtype='d'); b = np.empty(4)
right, left = (rank + 1) % size, (rank - 1) % size
comm.Sendrecv(a, right, 1, b, left, 1)
req = comm.Isend(a, dest=right, tag=2); comm.Recv(b, source=left, tag=2); req.Wait()
reqs = [comm.Irecv(b, source=left, tag=3), comm.Isend(a, dest=right, tag=3)]
MPI.Request.Waitall(reqs)
if size > 1:
    if rank % 2 == 0:
        comm.Send(a, dest=right, tag=4); comm.Recv(b, source=left, tag=4)
    else:
        comm.Recv(b, source=left, tag=4); comm.Send(a, dest=right, tag=4)
got = comm.sendrecv(rank, dest=right, source=left)
total = comm.allreduce(rank); comm.Barrier()
(b[0], got, total)
"""


@pytest.mark.quick
def test_a_ring_that_relies_on_buffering_is_found_with_its_line(pool4):
    verified = pool4.run(UNSAFE_RING, verify=True)
    assert _checks(verified) == [("buffering", 0, 2)]
    text = str(verified.findings[0])
    assert text.startswith("Send at line 2 on ranks 0-3: this exchange finishes only because MPI buffered")
    assert "deadlock" in text and "sendrecv" in text
    plain = pool4.run(UNSAFE_RING)
    assert plain.findings == [], "the check runs only with verify"
    assert verified.value == plain.value == {r: (r - 1) % 4 for r in range(4)}, "verify changes no result"


def test_the_same_ring_of_pickles_is_found_too(pool4):
    cell = "comm.send(rank, dest=(rank + 1) % size)\ncomm.recv(source=(rank - 1) % size)"
    assert _checks(pool4.run(cell, verify=True)) == [("buffering", 0, 1)]


def test_safe_exchanges_are_not_findings(any_pool):
    result = any_pool.run(SAFE_RINGS, verify=True)
    assert result.findings == []
    assert result.trace.verified
    size = any_pool.size
    assert result.value[0] == (float(size - 1), size - 1, size * (size - 1) // 2)


def test_a_collective_that_one_rank_reaches_after_a_receive_is_found(pool4):
    cell = textwrap.dedent("""\
        a = np.zeros(2)
        if rank == 0:
            comm.Bcast(a, root=0); comm.Send(a, dest=1)
        elif rank == 1:
            comm.Recv(a, source=0); comm.Bcast(a, root=0)
        else:
            comm.Bcast(a, root=0)
        """)
    result = pool4.run(cell, verify=True)
    assert _checks(result) == [("buffering", 0, 3)]
    assert str(result.findings[0]).startswith(
        "Bcast at line 3 on rank 0, Recv at line 5 on rank 1, Bcast at line 7 on ranks 2-3: "
        "this run finishes only because MPI let a collective end before every rank joined it")
    twin = cell.replace("comm.Recv(a, source=0); comm.Bcast(a, root=0)",
                        "comm.Bcast(a, root=0); comm.Recv(a, source=0)")
    assert pool4.run(twin, verify=True).findings == []


@pytest.mark.parametrize("receive", ["got = np.empty(8, dtype=np.int32)", "got = [np.empty(8, dtype='i'), MPI.INT]"])
def test_doubles_received_as_ints_are_found_with_both_lines(pool4, receive):
    cell = textwrap.dedent(f"""\
        if rank == 0:
            comm.Send(np.arange(4.0), dest=1, tag=5)
        elif rank == 1:
            {receive}
            comm.Recv(got, source=0, tag=5)
        """)
    result = pool4.run(cell, verify=True)
    assert _checks(result) == [("type-mismatch", 1, 5)]
    assert str(result.findings[0]) == (
        "rank 1: Recv at line 5 received float64 values (sent by Send at line 2 on rank 0) into a buffer of "
        "int32 values: MPI copies the bytes, so the values read are wrong. Receive into a buffer of the sender's "
        "type (np.empty(n, dtype=np.float64)), or send int32.")


def test_matching_types_and_byte_buffers_are_not_findings(pool4):
    cell = textwrap.dedent("""\
        right, left = (rank + 1) % size, (rank - 1) % size
        a, b = np.arange(4, dtype=np.int32), np.empty(4, dtype=np.uint32)
        comm.Sendrecv(a, right, 0, b, left, 0)
        raw = bytearray(32)
        req = comm.Irecv(raw, source=left, tag=1)
        comm.Send(np.arange(4.0), dest=right, tag=1)
        req.Wait()
        int(b.sum())
        """)
    result = pool4.run(cell, verify=True)
    assert result.findings == []
    assert result.value == {r: 6 for r in range(4)}


def test_a_send_buffer_changed_before_its_wait_is_found(pool4):
    cell = textwrap.dedent("""\
        a = np.zeros(4)
        if rank == 0:
            req = comm.Isend(a, dest=1)
            a[:] = 7
            req.Wait()
        elif rank == 1:
            comm.Recv(a, source=0)
        """)
    _found(pool4, cell, [("buffer-touched", 0, 3)],
           "rank 0: the buffer of Isend at line 3 changed before the send completed (seen when line 5 completed it)")
    twin = cell.replace("    a[:] = 7\n    req.Wait()", "    req.Wait()\n    a[:] = 7")
    assert pool4.run(twin, verify=True).findings == []


def test_a_receive_buffer_written_before_its_wait_is_found(pool4):
    # the Barrier after the send lets the message arrive before rank 1 writes over it
    cell = textwrap.dedent("""\
        b = np.zeros(4)
        if rank == 1:
            req = comm.Irecv(b, source=0, tag=7)
        if rank == 0:
            comm.Send(np.arange(4.0), dest=1, tag=7)
        comm.Barrier()
        if rank == 1:
            b[0] = -1
            req.Wait()
        float(b[0])
        """)
    result = _found(pool4, cell, [("receive-touched", 1, 3)],
                    "rank 1: the buffer of Irecv at line 3 was written while the receive was pending (line 9 "
                    "completed it): it no longer holds what Send at line 5 on rank 0 sent.")
    assert result.value[1] == -1.0, "verify changes nothing the code computes"
    twin = cell.replace("    b[0] = -1\n    req.Wait()", "    req.Wait()\n    b[0] = -1")
    assert pool4.run(twin, verify=True).findings == []
    reads = cell.replace("    b[0] = -1\n", "    seen = b.copy()\n")  # a read is not seen: nothing to compare
    assert pool4.run(reads, verify=True).findings == []


def test_two_pending_calls_on_the_same_memory_are_found(pool4):
    cell = textwrap.dedent("""\
        b = np.zeros(8)
        left, right = (rank - 1) % size, (rank + 1) % size
        first = comm.Irecv(b[:4], source=left, tag=1)
        second = comm.Irecv(b[2:6], source=right, tag=2)
        comm.Send(np.ones(4), dest=right, tag=1); comm.Send(np.ones(4), dest=left, tag=2)
        MPI.Request.Waitall([first, second])
        """)
    _found(pool4, cell, [("buffer-overlap", 0, 4)],
           "ranks 0-3: Irecv at line 4 receives into memory that Irecv at line 3, still pending, receives into too:")
    twin = cell.replace("b[2:6]", "b[4:]")
    assert pool4.run(twin, verify=True).findings == []
    two_sends = textwrap.dedent("""\
        a, x, y = np.ones(4), np.zeros(4), np.zeros(4)
        reqs = [comm.Isend(a, dest=(rank + 1) % size), comm.Isend(a, dest=(rank - 1) % size)]
        comm.Recv(x, source=MPI.ANY_SOURCE); comm.Recv(y, source=MPI.ANY_SOURCE)
        MPI.Request.Waitall(reqs)
        """)
    assert not [f for f in pool4.run(two_sends, verify=True).findings if f.check == "buffer-overlap"], \
        "two sends may read the same memory"


def test_a_reduction_whose_ranks_give_different_ops_is_named(pool4):
    cell = "op = MPI.MAX if rank == 2 else MPI.SUM\nx = np.empty(4)\ncomm.Allreduce(np.ones(4), x, op=op)"
    if pool4.run("MPI.get_vendor()[0]").value[0] == "MPICH":
        # a polled reduction does not wait for the others: its members' ops are compared afterwards
        result = pool4.run(cell, verify=True)
        assert _checks(result) == [("collective-mismatch", 0, 3)]
        assert str(result.findings[0]).startswith(
            "Allreduce at line 3: ranks 0-1, 3 gave 32 bytes with SUM; rank 2 gave 32 bytes with MAX. MPI requires "
            "the same amount of data and the same operation on every rank and does not check it")
    else:  # Open MPI's traced reductions agree first: the ops too, before MPI combines anything
        with pytest.raises(mpinb.RankError, match="ranks 0, 1, 3 called Allreduce of 32 bytes with SUM; "
                                                  "rank 2 called Allreduce of 32 bytes with MAX"):
            pool4.run(cell, verify=True)
    assert pool4.run(cell).findings == [], "only a verified run compares"


def test_a_pickled_reduction_with_different_ops_stops_before_it_runs(pool4):
    with pytest.raises(mpinb.RankError) as raised:
        pool4.run("comm.allreduce(rank, op=MPI.MIN if rank == 0 else MPI.MAX)", verify=True)
    assert "rank 0 called allreduce with MIN; ranks 1, 2, 3 called allreduce with MAX" in str(raised.value)
    assert "with the same root, the same amount of data, the same operation" in str(raised.value)
    assert pool4.run("comm.allreduce(1)").value == {r: 4 for r in range(4)}, "the pool goes on"


def test_collectives_that_agree_where_it_is_known_pass(pool4):
    cell = textwrap.dedent("""\
        whole = np.zeros(8)
        buf = [whole, 4, MPI.DOUBLE] if rank == 0 else np.zeros(4)   # a spec: its bytes are not compared
        comm.Bcast(buf, root=0)
        total = np.full(2, 1.0)
        comm.Allreduce(MPI.IN_PLACE if rank == 1 else np.ones(2), total)
        comm.allreduce(rank, op=MPI.SUM), float(total[0])
        """)
    result = pool4.run(cell, verify=True)
    assert result.value == {r: (6, 4.0) for r in range(4)}
    assert result.findings == []


def test_counts_that_do_not_say_what_a_rank_gives_are_named(pool4):
    """Rank 2 gives one value where the counts say two: MPI fills half its slot and says nothing."""
    cell = textwrap.dedent("""\
        counts = [2, 2, 2, 2]
        mine = np.full(1 if rank == 2 else 2, float(rank))
        got = np.zeros(8) if rank == 0 else None
        comm.Gatherv(mine, [got, counts], root=0)
        everyone = np.zeros(8)
        comm.Allgatherv(mine, [everyone, (counts, [0, 2, 4, 6])])
        """)
    result = pool4.run(cell, verify=True)
    assert _checks(result) == [("count-mismatch", 0, 4), ("count-mismatch", 0, 6)]
    assert str(result.findings[0]).startswith(
        "Gatherv at line 4: rank 2 gives 8 bytes where the counts say 16 (counts in bytes: 16, 16, 16, 16).")
    twin = textwrap.dedent("""\
        counts = [r + 1 for r in range(size)]
        mine = np.full(rank + 1, float(rank))
        got = np.zeros(sum(counts)) if rank == 0 else None
        comm.Gatherv(mine, [got, counts], root=0)
        everyone = np.zeros(sum(counts))
        comm.Allgatherv([mine, MPI.DOUBLE], [everyone, counts, MPI.DOUBLE])
        part = np.zeros(rank + 1)
        comm.Scatterv([everyone, counts] if rank == 0 else None, part, root=0)
        part[0]
        """)
    right = pool4.run(twin, verify=True)
    assert right.findings == [] and right.value == {r: float(r) for r in range(4)}


def test_an_alltoallv_whose_send_and_receive_counts_disagree_is_named(pool4):
    """Rank 2 makes room for two values from rank 1, which sends one: MPI fills half of the slot
    and says nothing."""
    cell = textwrap.dedent("""\
        send_counts = [1] * size
        receive_counts = [2 if (rank, r) == (2, 1) else 1 for r in range(size)]
        sent = np.full(size, float(rank))
        got = np.zeros(sum(receive_counts))
        displacements = list(np.cumsum([0] + receive_counts[:-1]))
        comm.Alltoallv([sent, (send_counts, list(range(size)))], [got, (receive_counts, displacements)])
        """)
    _found(pool4, cell, [("count-mismatch", 0, 6)],
           "Alltoallv at line 6: rank 1 sends 8 bytes to rank 2, which expects 16.")
    right = pool4.run(cell.replace("2 if (rank, r) == (2, 1) else 1", "1"), verify=True)
    assert right.findings == []


def test_an_alltoallw_whose_counts_disagree_is_named(pool4):
    """As above with a datatype per partner: rank 3 expects two doubles from rank 0, which sends one."""
    cell = textwrap.dedent("""\
        types = [MPI.DOUBLE] * size
        receive_counts = [2 if (rank, r) == (3, 0) else 1 for r in range(size)]
        sent, got = np.full(size, float(rank)), np.zeros(sum(receive_counts))
        received_at = [8 * int(d) for d in np.cumsum([0] + receive_counts[:-1])]
        comm.Alltoallw([sent, [1] * size, [8 * r for r in range(size)], types],
                       [got, (receive_counts, received_at), types])
        got.tolist()
        """)
    _found(pool4, cell, [("count-mismatch", 0, 5)],
           "Alltoallw at line 5: rank 0 sends 8 bytes to rank 3, which expects 16.")
    right = pool4.run(cell.replace("2 if (rank, r) == (3, 0) else 1", "1"), verify=True)
    assert right.findings == []
    assert right.value == {r: [0.0, 1.0, 2.0, 3.0] for r in range(4)}


RACY_WILDCARD = """\
if rank == 0:
    a = comm.recv(source=MPI.ANY_SOURCE, tag=1)
    b = comm.recv(source=MPI.ANY_SOURCE, tag=1)
    difference = a - b
elif rank in (1, 2):
    time.sleep(0.3 * (rank - 1) * late)
    comm.send(rank * 10, dest=0, tag=1)
"""


@pytest.mark.parametrize("late", [0, 1], ids=["at-once", "rank-2-late"])
def test_a_wildcard_receive_whose_match_depends_on_timing_is_named(pool4, late):
    """However this run went (rank 2's message arriving long after rank 1's), nothing ordered
    the two sends: on another run the other message comes first."""
    result = pool4.run(f"import time\nlate = {late}\n" + RACY_WILDCARD, verify=True)
    assert _checks(result) == [("wildcard-race", 0, 4)]
    text = str(result.findings[0])
    assert text.startswith("rank 0: recv at line 4 receives from ANY_SOURCE: it took the message of rank ")
    assert "(send at line 9)" in text and "status.Get_source()" in text
    assert pool4.run(f"import time\nlate = {late}\n" + RACY_WILDCARD).findings == [], "only with verify"


def test_wildcard_receives_that_read_their_status_or_are_ordered_are_not_findings(pool4):
    cell = textwrap.dedent("""\
        status = MPI.Status()
        if rank == 0:   # leader and workers: the leader reads who sent each result
            got = {}
            for _ in range(size - 1):
                value = comm.recv(source=MPI.ANY_SOURCE, tag=2, status=status)
                got[status.Get_source()] = value
        else:
            comm.send(rank, dest=0, tag=2)
        if rank == 0:   # a chain: rank 2 sends only after rank 0 took rank 1's message and told it
            first = comm.recv(source=MPI.ANY_SOURCE, tag=3)
            comm.send('go', dest=2, tag=4)
            second = comm.recv(source=MPI.ANY_SOURCE, tag=3)
        elif rank == 1:
            comm.send(1, dest=0, tag=3)
        elif rank == 2:
            comm.recv(source=0, tag=4)
            comm.send(2, dest=0, tag=3)
        comm.Barrier()
        if rank == 0:   # ordered by a collective
            third = comm.recv(source=MPI.ANY_SOURCE, tag=5)
        elif rank == 3:
            comm.send(3, dest=0, tag=5)
        comm.Barrier()
        if rank == 1:
            comm.send(1, dest=0, tag=5)
        elif rank == 0:
            fourth = comm.recv(source=MPI.ANY_SOURCE, tag=5)
        """)
    result = pool4.run(cell, verify=True)
    assert result.findings == [], result.findings


# What a run leaves behind (cheap: every traced run looks, verified or not; see mpinb.rank.mpi._left_behind).

def test_a_message_that_no_receive_took_is_named_with_its_send(pool4):
    cell = textwrap.dedent("""\
        if rank == 0:
            comm.send('stale', dest=size - 1, tag=5)
        comm.Barrier()
        """)
    result = pool4.run(cell)
    last = pool4.size - 1
    assert _checks(result) == [("unreceived", 0, 2)]
    text = str(result.findings[0])
    assert text.startswith(f"rank {last}: the message that send at line 2 on rank 0 sent (tag 5, ")
    assert "never received" in text and "a later cell" in text
    # still waiting at the end of the next run, which did not send it: told as an earlier cell's
    again = pool4.run("comm.Barrier()")
    assert [str(f) for f in again.findings][0].startswith(
        f"rank {last}: a message from rank 0 (tag 5, "), again.findings
    assert "sent in an earlier cell) waits on communicator world" in str(again.findings[0])
    taken = pool4.run(f"x = comm.recv(source=0, tag=5) if rank == {last} else None\nx")
    assert taken.findings == [] and taken.value[last] == "stale"


def test_messages_taken_by_forms_that_are_not_traced_are_not_findings(pool4):
    cell = textwrap.dedent("""\
        a = np.arange(3.0)
        if rank == 0:
            comm.send('by a matched probe', dest=size - 1, tag=6)
            comm.Send(a, dest=size - 1, tag=7)
        if rank == size - 1:
            got = comm.mprobe(source=0, tag=6).recv()
            b = np.empty(3); request = comm.Recv_init(b, source=0, tag=7); request.Start(); request.Wait()
            request.Free()
        comm.Barrier()
        """)
    assert pool4.run(cell).findings == []


def test_a_communicator_dropped_without_free_is_named_with_the_call_that_made_it(pool4):
    split = "sub = comm.Split(rank % 2)\nsub.allreduce(1)"
    assert pool4.run(split).findings == [], "kept in the namespace: for later cells"
    again = pool4.run(split)  # the first one is dropped: nothing can free it any more
    assert _checks(again) == [("communicator-dropped", 0, 1)]
    text = str(again.findings[0])
    assert text.startswith("ranks 0-3: a communicator made by Split at line 1 of an earlier cell was dropped "
                           "without Free() (")
    assert "Call Free() on it" in text
    in_one = pool4.run("d = comm.Dup()\nd.Barrier()\ndel d")
    assert _checks(in_one) == [("communicator-dropped", 0, 1)]
    assert "made by Dup at line 1 was dropped" in str(in_one.findings[0])
    freed = pool4.run("sub.Free()\nd = comm.Dup(); copy = type(d).fromhandle(d.handle); del d\n"
                      "s2 = comm.Split(0); s2.free()")
    assert freed.findings == [], "freed, or held by another object that stands for it"
    assert pool4.run("copy.Free(); del copy").findings == []


def _dropped(result, text: bool = False) -> list:
    """The run's findings of windows and datatypes dropped (a shared pool's earlier tests may drop
    communicators, which the same look tells)."""
    mine = [f for f in result.findings if f.check in ("window-dropped", "datatype-dropped")]
    return mine if text else [(f.check, f.rank, f.line) for f in mine]


def test_a_window_dropped_without_free_is_named_with_the_call_that_made_it(pool4):
    make = "win = MPI.Win.Allocate(8, comm=comm)\nwin.Fence(); win.Fence()"
    assert _dropped(pool4.run(make)) == [], "kept in the namespace: for later cells"
    again = pool4.run(make)
    assert _dropped(again) == [("window-dropped", 0, 1)]
    assert str(_dropped(again, text=True)[0]).startswith(
        "ranks 0-3: a window made by Win.Allocate at line 1 of an earlier cell was dropped without Free() (")
    in_one = pool4.run("def exposed():\n    return MPI.Win.Create(np.zeros(2), comm=comm)\nexposed()\nNone")
    assert _dropped(in_one) == [("window-dropped", 0, 2)]
    kept = pool4.run("win.Free()\nw2 = MPI.Win.Create(np.zeros(2), comm=comm); w2.free()\n"
                     "held = [MPI.Win.Allocate(8, comm=comm)]\n"
                     "(isinstance(win, MPI.Win), type(held[0]) == MPI.Win, MPI.Win.__name__, bool(win))")
    assert _dropped(kept) == [], "freed (Free or free), or held in a list"
    assert kept.value[0] == (True, True, "Win", False), "MPI.Win is still what mpi4py's is"
    assert _dropped(pool4.run("held[0].Free(); del held")) == []


def test_a_derived_datatype_dropped_without_free_is_named_where_first_used(pool4):
    make = textwrap.dedent("""\
        every_other = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
        a, b = np.arange(4.0), np.zeros(4)
        comm.Sendrecv([a, 1, every_other], (rank + 1) % size, 0, [b, 1, every_other], (rank - 1) % size, 0)
        b.tolist()
        """)
    first = pool4.run(make)
    assert _dropped(first) == [], "kept in the namespace: for later cells"
    assert first.value[0] == [0.0, 0.0, 2.0, 0.0]
    again = pool4.run(make)
    assert _dropped(again) == [("datatype-dropped", 0, 3)]
    assert str(_dropped(again, text=True)[0]).startswith(
        "ranks 0-3: a derived datatype (first used at line 3 of an earlier cell) was dropped without Free() (")
    freed = pool4.run("every_other.Free()\npair = MPI.DOUBLE.Create_contiguous(2).Commit()\n"
                      "x = np.zeros(2)\nif rank == 0:\n    comm.Send([np.ones(2), 1, pair], dest=1)\n"
                      "elif rank == 1:\n    comm.Recv([x, 1, pair], source=0)\npair.Free()\n"
                      "y = np.zeros(2); same = MPI.Datatype(MPI.DOUBLE)\ncomm.Bcast([y, 2, same], root=0)\nx.tolist()")
    assert _dropped(freed) == [], "freed, or MPI's own"
    assert freed.value[1] == [1.0, 1.0]


def test_a_verified_run_gives_the_c_tracer_back(pool4):
    if pool4.tracer != "C":
        pytest.skip(f"the C tracer is not in use: {pool4.tracer}")
    probe = "type(type(comm).__dict__['Send']).__name__"
    in_c = pool4.run(probe).value[0]
    assert pool4.run(probe, verify=True).value[0] == "function", "a verified run takes the Python methods"
    assert pool4.run(probe).value[0] == in_c != "function"


def test_verify_needs_tracing_and_a_flag():
    pool = mpinb.Pool(2)  # (never started: the arguments are checked first)
    with pytest.raises(ValueError, match="verify=True checks the MPI calls that tracing records"):
        pool._limits(False, None, True)
    with pytest.raises(TypeError, match="verify must be True or False, not 'yes'"):
        mpinb.Pool(2, verify="yes")
    with pytest.raises(TypeError, match="verify must be True or False"):
        pool._limits(True, None, 1)
    pool.verify = True  # a verifying pool runs what is asked untraced untraced, unverified
    assert pool._limits(False, None, None)["verify"] is False
    assert pool._limits(True, None, None)["verify"] is True


def test_mpinb_verify_sets_the_default(monkeypatch):
    monkeypatch.setenv("MPINB_VERIFY", "1")
    assert mpinb.Pool(2).verify is True
    monkeypatch.setenv("MPINB_VERIFY", "maybe")
    with pytest.raises(ValueError, match="MPINB_VERIFY='maybe': set it to 1"):
        mpinb.Pool(2)
    monkeypatch.delenv("MPINB_VERIFY")
    assert mpinb.Pool(2, verify=True).options()["verify"] is True
    assert mpinb.Pool(2).verify is False


@pytest.mark.quick
def test_the_magics_take_verify_and_show_what_was_found(ip, capsys):
    ip.run_cell_magic("mpi", "--verify --view none", UNSAFE_RING)
    shown = capsys.readouterr().out
    assert "MPI correctness: this run works only by accident (1):" in shown
    assert "Send at line 3 on ranks 0-3" in shown  # the %%mpi line counts as line 1
    ip.run_cell_magic("mpi", "--verify --view none", "comm.Barrier()")
    assert "MPI correctness (--verify): nothing found in 4 MPI calls." in capsys.readouterr().out
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--verify checks the MPI calls that tracing records"):
        ip.run_cell_magic("mpi", "--verify --no-trace", "pass")


def test_a_script_run_with_verify_is_checked(ip, tmp_path, capsys):
    script = tmp_path / "ring.py"
    script.write_text("from mpi4py import MPI\nimport numpy as np\ncomm = MPI.COMM_WORLD\n"
                      "rank, size = comm.Get_rank(), comm.Get_size()\n" + UNSAFE_RING)
    ip.run_line_magic("mpi", f"run --verify --view none {script}")
    assert "Send at line 6 on ranks 0-3: this exchange finishes only because" in capsys.readouterr().out


# -- the replay, on traces made by hand ----------------------------------------------------------

def _event(op, kind, peer, tag, start, end, returned=None):
    return (op, kind, "world", peer, tag, 8, 8, start, end, end if returned is None else returned,
            "<mpi-cell-1>", int(start * 10))


def _trace(events_by_rank) -> Trace:
    size = len(events_by_rank)
    return Trace({rank: {"events": events, "dropped": 0, "comms": {"world": list(range(size))}, "began": 0.0,
                         "ended": 10.0, "offset": 0.0, "checks": []}
                  for rank, events in events_by_rank.items()}, world_size=size)


@pytest.mark.unit
def test_the_replay_holds_a_send_until_its_receive_is_posted():
    unsafe = _trace({0: [_event("Send", SEND, 1, 0, 1.0, 1.1), _event("Recv", RECV, 1, 0, 1.2, 1.3)],
                     1: [_event("Send", SEND, 0, 0, 1.0, 1.1), _event("Recv", RECV, 0, 0, 1.2, 1.3)]})
    assert [(f.check, f.rank, f.line) for f in unsafe.findings()] == [("buffering", 0, 10)]
    # Isend, then Recv, then a Wait that saw the Isend complete: safe
    safe = _trace({r: [_event("Isend", SEND, 1 - r, 0, 1.0, 1.25, returned=1.05),
                       _event("Recv", RECV, 1 - r, 0, 1.1, 1.2), _event("Wait", WAIT, -1, -1, 1.22, 1.3)]
                   for r in (0, 1)})
    assert safe.findings() == []
    # a buffered send needs no receive
    bsend = _trace({0: [_event("Bsend", SEND, 1, 0, 1.0, 1.1), _event("Recv", RECV, 1, 0, 1.2, 1.3)],
                    1: [_event("Bsend", SEND, 0, 0, 1.0, 1.1), _event("Recv", RECV, 0, 0, 1.2, 1.3)]})
    assert bsend.findings() == []
    # a message whose receive was not traced holds nothing (no finding can be false)
    unknown = _trace({0: [_event("Send", SEND, 1, 0, 1.0, 1.1)], 1: []})
    assert unknown.findings() == []
    # a collective waits for every member
    late = _trace({0: [_event("Bcast", COLLECTIVE, 0, -1, 1.0, 1.1), _event("Send", SEND, 1, 0, 1.2, 1.3)],
                   1: [_event("Recv", RECV, 0, 0, 1.0, 1.3), _event("Bcast", COLLECTIVE, 0, -1, 1.4, 1.5)]})
    assert [f.check for f in late.findings()] == ["buffering"]


@pytest.mark.unit
def test_members_of_a_collective_that_gave_different_bytes_are_named():
    def bcast(rank, size):
        return {"events": [_event("Bcast", COLLECTIVE, 0, -1, 1.0, 1.1)], "dropped": 0,
                "comms": {"world": [0, 1, 2]}, "began": 0.0, "ended": 10.0, "offset": 0.0,
                "checks": [(1.0, COLLECTIVE, "signature", size, -1)]}
    trace = Trace({0: bcast(0, 32), 1: bcast(1, 32), 2: bcast(2, 40)}, world_size=3)
    assert [str(f) for f in trace.findings()] == [
        "Bcast at line 10: ranks 0-1 gave 32 bytes; rank 2 gave 40 bytes. MPI requires the same amount of data "
        "and the same operation on every rank and does not check it: the result is wrong or the run hangs on "
        "another MPI. Give every rank the same count, type and op."]
    unknown = Trace({0: bcast(0, 32), 1: bcast(1, -1), 2: bcast(2, 32)}, world_size=3)
    assert unknown.findings() == [], "what a rank could not tell is not compared"


@pytest.mark.unit
def test_a_run_without_verify_has_no_replay():
    trace = _trace({0: [_event("Send", SEND, 0, 0, 1.0, 1.1), _event("Recv", RECV, 0, 0, 1.2, 1.3)]})
    assert trace.verified
    assert [f.check for f in trace.findings()] == ["buffering"], "a send to oneself before its receive"
    unverified = Trace({0: {"events": [_event("Send", SEND, 0, 0, 1.0, 1.1), _event("Recv", RECV, 0, 0, 1.2, 1.3)],
                            "dropped": 0, "comms": {"world": [0]}, "began": 0.0, "ended": 10.0, "offset": 0.0}},
                       world_size=1)
    assert not unverified.verified and unverified.findings() == []
    assert np.all(unverified.events["checks"] == None)  # noqa: E711 - elementwise
