"""Fast tests of the pure functions (no MPI, no pool): each rule on its own, edge cases included.

The integration tests run the same rules end to end; these say which rule broke, in milliseconds.
"""

from __future__ import annotations

import io
import socket
import sys

import numpy as np
import pytest

from mpinb._events import EPOCH, FIELDS, RECV, RMA, SEND, WAIT, world_rank
from mpinb._protocol import wait_state
from mpinb._ranges import format_ranks, parse_ranks, rank_count, rank_count_in_text
from mpinb._values import ReprOnly, pack, unpack
from mpinb.pool import RankFailure, RunResult
from mpinb.pool._hang import (
    HangWatch,
    _find_cycle,
    death_report,
    describe_wait,
    diagnose,
    launcher_report,
    peer_loss_report,
)
from mpinb.pool._launch import other_hosts
from mpinb.rank._output import capped_output
from mpinb.trace import Trace
from mpinb.trace._arrays import busy_until

pytestmark = pytest.mark.timeout(20)


# -- the package ------------------------------------------------------------------------------------

def test_every_public_name_is_exported_and_resolves():
    import mpinb

    assert sorted(mpinb.__all__) == sorted(mpinb._EXPORTS)
    for name in mpinb.__all__:
        assert getattr(mpinb, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Poool'"):
        mpinb.Poool  # noqa: B018


# -- rank ranges and counts ------------------------------------------------------------------------

@pytest.mark.parametrize("spec, ranks", [
    (None, [0, 1, 2, 3]), ("all", [0, 1, 2, 3]), ("", [0, 1, 2, 3]), (2, [2]), ("0,2-3", [0, 2, 3]),
    (" 3, 1 ", [1, 3]), ([3, 1, 3], [1, 3]), (range(1, 3), [1, 2]), ("1-1", [1]),
])
def test_targets_are_read_as_people_write_them(spec, ranks):
    assert parse_ranks(spec, 4) == ranks


@pytest.mark.parametrize("spec, error, message", [
    ("4", ValueError, r"rank 4 outside the pool: it has 4 ranks \(0-3\)"),
    ([9, -1], ValueError, r"ranks -1, 9 outside the pool"),
    ("3-1", ValueError, "runs backwards"),
    ("1,,2", ValueError, "empty rank"),
    ("one", ValueError, "write ranks like '0,2-3'"),
    ("+3", ValueError, "write ranks like"), ("1_0", ValueError, "write ranks like"),  # int() takes both
    ([], ValueError, "selects no rank"),
    (True, TypeError, "must be ranks"),
    ([1.0], TypeError, "integer ranks"),
    (1.5, TypeError, "an int, a list"),
    ("0-3000000000", ValueError, r"ranks 4-3000000000 outside the pool"),
    (range(3_000_000_000), ValueError, r"ranks 4-2999999999 outside the pool"),
    (iter(range(10**12)), ValueError, r"rank 4 outside the pool"),
    (__import__("itertools").repeat(1), ValueError, "give each rank once"),
])
def test_bad_targets_say_what_is_wrong(spec, error, message):
    with pytest.raises(error, match=message):
        parse_ranks(spec, 4)


def test_rank_sets_are_written_compactly():
    assert format_ranks([5, 0, 1, 2, 2]) == "0-2, 5"
    assert format_ranks([3], word=True) == "rank 3"
    assert format_ranks(range(4), word=True) == "ranks 0-3"
    assert format_ranks([]) == ""


def test_one_rule_for_a_number_of_ranks():
    assert rank_count(3) == 3
    assert rank_count_in_text(" 12 ", "-n") == 12
    for bad, error in [(0, ValueError), (-1, ValueError), (2.0, TypeError), ("2", TypeError), (True, TypeError)]:
        with pytest.raises(error, match="must be a whole number, at least 1"):
            rank_count(bad)
    for text in ("0", "two", "-3", "1.5", ""):
        with pytest.raises(ValueError, match="-n must be a whole number, at least 1, not ") as info:
            rank_count_in_text(text, "-n")
        assert str(info.value).endswith(text if text.isdigit() else repr(text))


def test_world_rank_of_a_communicator_rank():
    assert world_rank([4, 6, 7], 1) == 6
    assert world_rank([4, 6, 7], 3) == -1  # not a member
    assert world_rank([4, 6, 7], -1) == -1  # ANY_SOURCE
    assert world_rank(None, 0) == -1  # members unknown
    assert world_rank([0, 1], None) == -1


# -- values ----------------------------------------------------------------------------------------

def test_values_travel_pickled_or_as_their_repr():
    data, text, why = pack({"a": np.arange(3)})
    assert data is not None and text.startswith("{'a': array") and why == ""
    assert unpack(data, text, why)["a"].tolist() == [0, 1, 2]
    data, text, why = pack(lambda: 1)
    assert data is None and "PicklingError" in why or "AttributeError" in why
    assert isinstance(unpack(data, text, why), ReprOnly)
    assert unpack(b"not a pickle", "x", "") == ReprOnly("x", "")


def test_a_broken_repr_does_not_lose_the_value():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no")

    _, text, _ = pack(Broken())
    assert "repr failed" in text


# -- output caps -----------------------------------------------------------------------------------

def test_output_is_cut_at_the_line_cap_with_a_count(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with capped_output(max_lines=3, max_chars=10_000) as dropped:
        for i in range(10):
            print(i)
    lines = out.getvalue().splitlines()
    expected = {"lines": 7, "chars": 14, "wrote": 1}
    assert lines[:4] == ["0", "1", "2", ""] and dropped == expected, "no fourth line begins"
    assert "7 more lines" in out.getvalue()


def test_output_is_cut_at_the_character_cap_inside_one_write(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    with capped_output(max_lines=100, max_chars=5) as dropped:
        sys.stdout.write("abcdefgh")
    assert out.getvalue().startswith("abcde\n[mpinb] output cut") and dropped["chars"] == 3


# -- hang diagnosis --------------------------------------------------------------------------------

def test_cycles_are_found_smallest_rank_first():
    assert _find_cycle({0: [1], 1: [2], 2: [0]}) == [0, 1, 2]
    assert _find_cycle({0: [1], 1: [2], 2: [3], 3: [2]}) == [2, 3]
    assert _find_cycle({0: [1], 1: [], 2: [1]}) is None
    assert _find_cycle({0: [0]}) == [0]
    assert _find_cycle({}) is None


def _send(peer: int, line: int = 2):
    return wait_state("send", "send", ("<mpi-cell-1>", line), comm="world", members=[0, 1, 2, 3], peer=peer,
                      nbytes=4_000_000, tag=0)


def test_a_ring_of_sends_is_a_deadlock_with_its_fix():
    diagnosis = diagnose({r: _send((r + 1) % 4) for r in range(4)}, finished=[], idle=[])
    assert diagnosis.deadlock and diagnosis.cycle == [0, 1, 2, 3]
    text = diagnosis.text()
    assert "Wait-for cycle: 0 -> 1 -> 2 -> 3 -> 0" in text
    assert "rank 0: send to rank 1 (tag 0, 3.8 MB) at line 2" in text
    assert "Small messages are buffered" in text
    synchronous = {r: {**_send((r + 1) % 4), "op": "ssend"} for r in range(4)}
    text = diagnose(synchronous, finished=[], idle=[]).text()
    assert "synchronous send (ssend)" in text and "Small messages are buffered" not in text


def test_a_long_ring_is_told_in_a_sentence():
    receives = {r: wait_state("recv", "recv", ("<mpi-cell-1>", 1), comm="world", members=list(range(64)),
                              peer=(r - 1) % 64) for r in range(64)}
    for state in receives.values():
        state["waited"] = 8.0
    text = diagnose(receives, finished=[], idle=[]).text()
    assert "  ranks 0-63: each recv from its left neighbour (rank - 1) at line 1, waiting 8.0 s" in text
    assert "Wait-for cycle: 0 -> 63 -> 62 -> ... -> 1 -> 0 (64 ranks)" in text
    assert len(text.splitlines()) < 8
    mixed = {**receives, 5: wait_state("send", "send", ("<mpi-cell-1>", 2), comm="world", members=[], peer=9)}
    assert "  rank 5: send to rank 9 at line 2" in diagnose(mixed, finished=[], idle=[]).text()


def test_waiting_for_a_rank_that_finished_is_a_deadlock_without_a_cycle():
    recv = wait_state("recv", "recv", ("/work/x.py", 7), comm="world", members=[0, 1], peer=1)
    diagnosis = diagnose({0: recv}, finished=[1], idle=[])
    assert diagnosis.deadlock and diagnosis.cycle is None
    assert diagnosis.stuck_on_absent() == {0: [1]}
    assert "recv from rank 1 at line 7 of /work/x.py" in diagnosis.text()


def test_a_receive_under_another_tag_than_the_message_sent_asks_if_that_tag_was_meant():
    sent = {"source": 0, "tag": 2, "bytes": 8}
    waiting = wait_state("recv", "recv", ("<mpi-cell-1>", 3), comm="world", peer=0, tag=1, unmatched=sent)
    text = diagnose({1: waiting}, finished=[0], idle=[]).text()
    assert ("rank 1 waits for a message with tag 1 from rank 0, but the one that rank 0 sent has tag 2 (8 bytes): "
            "did you mean tag 2?") in text
    assert "Usual fixes" not in text, "the slip is the fix"
    anyone = wait_state("recv", "recv", ("<mpi-cell-1>", 3), comm="world", any_source=True, tag=1, unmatched=sent)
    assert "tag 1 from any rank, but the one that rank 0 sent has tag 2" in diagnose({1: anyone}, [0], []).text()
    matched_any_tag = wait_state("recv", "recv", ("<mpi-cell-1>", 3), comm="world", peer=0)
    assert "did you mean" not in diagnose({1: matched_any_tag}, [0], []).text()


def test_a_receive_on_another_communicator_than_the_send_is_named():
    send = wait_state("Ssend", "send", ("<mpi-cell-1>", 2), comm="world", peer=1, tag=0, nbytes=8)
    receive = wait_state("Recv", "recv", ("<mpi-cell-1>", 3), comm="world.0@0", peer=0, tag=0, nbytes=8)
    text = diagnose({0: send, 1: receive}, finished=[], idle=[]).text()
    assert ("rank 1 receives on communicator 'world.0@0', but rank 0 sends to it on 'world' (line 2): a message "
            "is received only on the communicator it was sent on.") in text
    same = wait_state("Recv", "recv", ("<mpi-cell-1>", 3), comm="world", peer=0, tag=5, nbytes=8)
    assert "receives on communicator" not in diagnose({0: send, 1: same}, [], []).text()


def test_a_collective_waits_for_the_members_not_in_it():
    bcast = wait_state("bcast", "collective", ("<mpi-cell-1>", 1), comm="world", members=[0, 1, 2], root=0)
    barrier = wait_state("barrier", "collective", ("<mpi-cell-1>", 2), comm="world", members=[0, 1, 2])
    diagnosis = diagnose({0: bcast, 1: bcast, 2: barrier}, finished=[], idle=[])
    assert diagnosis.waits_for(0) == {2} and diagnosis.waits_for(2) == {0, 1}
    assert diagnosis.cycle is not None
    assert describe_wait(bcast) == "bcast on communicator 'world' (root 0) at line 1"


def test_the_hang_watch_reports_only_when_every_running_rank_waits_and_once_per_picture():
    watch = HangWatch([0, 1], idle=[])
    waiting = [{"mpinb_wait": _send(1)}, {"mpinb_wait": _send(0)}]
    assert watch.update([waiting[0], {}], [False, False]) is None, "rank 1 still computes"
    first = watch.update(waiting, [False, False])
    assert first is not None and first.cycle == [0, 1]
    assert watch.update(waiting, [False, False]) is None, "the same picture is not shown twice"


@pytest.mark.parametrize("output, dead, expected", [
    ("BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n   PID 1002 RUNNING AT host\n"
     "   KILLED BY SIGNAL: 9 (Killed)", [2], "rank 2 died: killed by signal 9 (SIGKILL (out of memory, or kill -9))"),
    ("   PID 1001 RUNNING AT host\n   EXIT CODE: 3", [1], "rank 1 died: its process exited with code 3"),
    ("   PID 1001 RUNNING AT host\n   EXIT CODE: 139", [1], "rank 1 died: killed by signal 11 (SIGSEGV (a crash))"),
    ("", [0, 1], "one of ranks 0-1 died (its process ended)"),
    ("   PID 1002 RUNNING AT host\n   EXIT CODE: 9", [0, 1, 2], "rank 2 died: its process exited with code 9"),
    # several gone, one named SIGKILLed: MPICH's clean-up kills the others so; the cause is not known
    ("   PID 1001 RUNNING AT host\n   KILLED BY SIGNAL: 9", [1, 2], "one of ranks 1-2 died (its process ended)"),
    ("   PID 1002 RUNNING AT host\n   EXIT CODE: 3", [1], "rank 1 died (its process ended)"),  # about another
    # Open MPI 5.0.11's words, as prterun prints them
    ("prterun noticed that process rank 3 with PID 1003 on node vm exited on\nsignal 6 (Aborted).", [],
     "rank 3 died: killed by signal 6 (SIGABRT)"),
    ("prterun noticed that process rank 0 with PID 27997 on node vm exited on\nsignal 9 (Killed).", [0],
     "rank 0 died: killed by signal 9 (SIGKILL (out of memory, or kill -9))"),
    ("The first process to do so was:\n\n   Process name: [prterun-vm-28005@1,1]\n   Exit code:    3\n", [1],
     "rank 1 died: its process exited with code 3"),
    ("   Process name: [prterun-vm-28005@1,1]\n   Exit code:    3\n", [0], "rank 0 died (its process ended)"),
    ("   PID 4242 RUNNING AT host\n   EXIT CODE: 3", [], "a rank died (its process ended)"),  # not a rank's pid
])
def test_death_reports_name_the_rank_and_how(output, dead, expected):
    pids = {1000: 0, 1001: 1, 1002: 2, 1003: 3}
    assert death_report(output, pids, dead) == expected


def test_death_reports_name_the_host_of_ranks_on_several_hosts():
    pids, hosts = {1000: 0, 1001: 1}, {0: "node1", 1: "node2"}
    assert death_report("   PID 1001 RUNNING AT node2\n   KILLED BY SIGNAL: 9", pids, [1], hosts) == (
        "rank 1 on node2 died: killed by signal 9 (SIGKILL (out of memory, or kill -9))")
    # Seen gone together across hosts: MPICH's report may name a rank it ended in its clean-up
    # (tests/test_faults.py saw rank 0 named when rank 2 was killed), so neither is blamed.
    assert death_report("   PID 1001 RUNNING AT node2\n   KILLED BY SIGNAL: 9", pids, [0, 1], hosts) == (
        "one of ranks 0-1 on node1, node2 died (its process ended)")
    assert death_report("", pids, [1], hosts) == "rank 1 on node2 died (its process ended)"


# Open MPI 5's words when rank 2 on node1 was killed in a collective and rank 3 on node2 noticed first
_PEER_LOST = """[node2:00000] *** An error occurred in Socket closed
[node2:00000] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,
An MPI communication peer process has unexpectedly disconnected.  This
usually indicates a failure in the peer process (e.g., a crash or
  Local host: node2
  Local PID:  7834
  Peer host:  node1
--------------------------------------------------------------------------
prterun has exited due to process rank 3 with PID 0 on node node2 calling
"abort". This may have caused other processes in the application to be
"""


def test_a_lost_peer_names_the_host_whose_rank_died_not_the_rank_that_noticed():
    hosts = {0: "node1", 1: "node2", 2: "node1", 3: "node2"}
    assert launcher_report(_PEER_LOST, {})[0] is None, "prterun's report names the rank that noticed"
    expected = "rank 2 on node1 died (its process ended: a rank on node2 saw its connection close)"
    assert peer_loss_report(_PEER_LOST, [1, 2], hosts) == expected, "the ranks seen gone first, on node1"
    assert peer_loss_report(_PEER_LOST, [3], hosts) == (
        "one of ranks 0, 2 on node1 died (its process ended: a rank on node2 saw its connection close)")
    # (the help text that names the peer's host may be missing: the rank that noticed was on node2)
    without_help = "\n".join(line for line in _PEER_LOST.splitlines() if line.startswith(("[", "prterun")))
    assert peer_loss_report(without_help, [2, 3], hosts) == (
        "rank 2 on node1 died (its process ended: a rank on node2 saw its connection close)")
    assert peer_loss_report("prterun has exited due to process rank 3", [3], hosts) is None


# -- hosts -----------------------------------------------------------------------------------------

def test_the_hosts_that_mpiexec_arguments_name_besides_this_one(tmp_path):
    here = socket.gethostname()
    assert other_hosts([]) == [] and other_hosts(["-genv", "A=B", "-n", "2"]) == []
    assert other_hosts(["-hosts", f"node2,{here},localhost,node1"]) == ["node1", "node2"]
    assert other_hosts(["--host=a:2,b:2", "--map-by", "slot"]) == ["a", "b"]
    assert other_hosts(["-H", "127.0.0.1:4"]) == [], "an address of this machine"
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# the nodes\n{here} slots=2\nnode3 slots=2  # Open MPI's spelling\nnode4:2\n\n")
    assert other_hosts(["-f", str(hostfile)]) == ["node3", "node4"]
    assert other_hosts(["--hostfile", str(tmp_path / "missing")]) == [str(tmp_path / "missing")], (
        "what cannot be read may name other hosts")
    assert other_hosts(["-rf", "ranks.txt"]) == ["the hosts of rankfile ranks.txt"]


@pytest.mark.parametrize("variable", ["HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile",
                                      "PRTE_MCA_prte_default_hostfile", "PBS_NODEFILE"])
def test_hosts_that_the_environment_gives_mpiexec_count_too(tmp_path, monkeypatch, variable):
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{socket.gethostname()}\nnode7\n")
    monkeypatch.setenv(variable, str(hostfile))
    assert other_hosts([]) == ["node7"]
    hostfile.write_text(f"{socket.gethostname()}\nlocalhost\n")
    assert other_hosts([]) == []


def test_a_batch_allocation_of_several_nodes_counts_as_other_hosts(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    assert other_hosts([]) == []
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "3")
    assert other_hosts([]) == ["the nodes of this Slurm allocation ($SLURM_JOB_NUM_NODES=3)"]


# -- traces ----------------------------------------------------------------------------------------

def _event(op, kind, peer, tag, start, end, returned=None, sent=0, received=0, comm="world"):
    values = {"op": op, "kind": kind, "comm": comm, "peer": peer, "tag": tag, "sent": sent, "received": received,
              "start": start, "end": end, "returned": end if returned is None else returned,
              "file": "<mpi-cell-1>", "line": 1}
    return tuple(values[name] for name in FIELDS)


def _trace(events_by_rank: dict[int, list[tuple]], ended: dict[int, float] | None = None,
           windows: tuple[str, ...] = ()) -> Trace:
    size = len(events_by_rank)
    comms = {name: list(range(size)) for name in ("world", *windows)}
    return Trace({rank: {"events": events, "dropped": 0, "comms": comms,
                         "began": 0.0, "ended": (ended or {}).get(rank, 10.0), "offset": 0.0}
                  for rank, events in events_by_rank.items()}, world_size=size)


def test_a_request_never_completed_is_a_finding_with_its_rank_and_line():
    nan = float("nan")
    trace = _trace({
        0: [_event("Isend", SEND, 1, 3, 1.0, nan, returned=1.1, sent=8), _event("Send", SEND, 1, 5, 3.0, 3.1, sent=8)],
        1: [_event("Recv", RECV, 0, 3, 0.5, 1.2, received=8)],
    })
    found = trace.findings()
    assert [(f.check, f.rank, f.line) for f in found] == [("never-completed", 0, 1)]
    assert str(found[0]).startswith("rank 0: Isend at line 1 was never completed")
    correct = _trace({
        0: [_event("Isend", SEND, 1, 3, 1.0, 1.5, returned=1.1, sent=8)],
        1: [_event("Recv", RECV, 0, 3, 0.5, 1.2, received=8)],
    })
    assert correct.findings() == []
    stopped = _trace({0: [_event("Isend", SEND, 1, 5, 3.0, nan, returned=3.1, sent=8)],
                      1: [_event("Recv", RECV, 0, 6, 2.0, nan, returned=nan)]})
    assert stopped.findings() == [], "a stopped run does not say what would have completed"


def test_the_kth_send_on_a_channel_matches_the_kth_receive():
    trace = _trace({
        0: [_event("Send", SEND, 1, 5, 1.0, 1.1, sent=8), _event("Send", SEND, 1, 5, 2.0, 2.1, sent=16),
            _event("Send", SEND, 1, 6, 3.0, 3.1, sent=4)],
        1: [_event("Recv", RECV, 0, 6, 0.5, 3.2, received=4), _event("Recv", RECV, 0, 5, 3.3, 3.4, received=8),
            _event("Recv", RECV, 0, 5, 3.5, 3.6, received=16)],
    })
    messages = trace.messages()
    assert [(m["tag"], m["bytes"]) for m in messages] == [(5, 8), (5, 16), (6, 4)]
    assert trace.matrix()[0, 1] == 28 and trace.matrix("messages")[0, 1] == 3


def test_a_send_without_its_receive_stays_unmatched():
    trace = _trace({0: [_event("Send", SEND, 1, 0, 1.0, 1.1)], 1: []})
    assert trace.messages() == [] and list(trace.events["msg"]) == [-1]


def test_a_clock_estimate_that_erred_never_draws_a_message_arriving_before_it_left():
    # Rank 1's offset was estimated 50 us too early: its receive seems to end before rank 0 sent.
    trace = _trace({0: [_event("Send", SEND, 1, 0, 1.000100, 1.000110), _event("Recv", RECV, 1, 1, 2.0, 2.1)],
                    1: [_event("Recv", RECV, 0, 0, 0.999000, 1.000050), _event("Send", SEND, 0, 1, 1.9, 1.95)]})
    messages = {m["tag"]: m for m in trace.messages()}
    assert messages[0]["recv_end"] == pytest.approx(messages[0]["send_start"]), "rank 1 moved by the least delay"
    assert all(m["recv_end"] >= m["send_start"] for m in messages.values())
    assert trace.span[0] == (0.0, 10.0) and trace.span[1][0] == pytest.approx(0.00005)
    agreeing = _trace({0: [_event("Send", SEND, 1, 0, 1.0, 1.1)], 1: [_event("Recv", RECV, 0, 0, 0.9, 1.2)]})
    assert agreeing.events["start"].tolist() == [0.9, 1.0], "clocks that agree are left alone"


def test_busy_until_one_rule_for_every_view():
    trace = _trace({0: [_event("Isend", SEND, 1, 0, 1.0, 5.0, returned=1.1), _event("Wait", WAIT, -1, -1, 4.0, 5.0,
                                                                                      returned=5.2),
                        _event("Send", SEND, 1, 0, 6.0, 6.5)],
                    1: []})
    assert busy_until(trace.events).tolist() == [1.1, 5.0, 6.5]
    (row,) = [r for r in trace.summary() if r["rank"] == 0]
    assert row["mpi"] == pytest.approx(0.1 + 1.0 + 0.5)
    chrome = [e for e in trace.to_chrome()["traceEvents"] if e["ph"] == "X"]
    assert [round(e["dur"]) for e in chrome] == [100_000, 1_000_000, 500_000]


def test_the_static_diagram_draws_each_layer_in_the_views_colours():
    import re

    from mpinb._colors import KIND_COLORS, PATH_COLOR, WAIT_COLOR
    from mpinb.trace._svg import space_time_svg

    trace = _trace({0: [_event("Send", SEND, 1, 0, 1.0, 1.5), _event("Recv", RECV, 1, 1, 4.0, 9.0, received=8)],
                    1: [_event("Recv", RECV, 0, 0, 0.5, 2.0), _event("Send", SEND, 0, 1, 8.5, 8.6, sent=8)]})
    svg = space_time_svg(trace, width=1000)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<text") == 2 + 4 + 1, "two lane labels, four kinds in the legend, the note"
    for kind in (SEND, RECV):
        assert f'fill="{KIND_COLORS[kind]}"' in svg
    assert svg.count("<line") == 2, "one arrow per message"
    assert f'fill="{WAIT_COLOR}"' in svg, "rank 1 waited for its message, rank 0 for its late sender"
    assert svg.count("<polyline") == 1 and f'stroke="{PATH_COLOR}"' in svg
    assert re.search(r">10000\.00 ms, 4 calls, 2 messages<", svg), "the run's length and what it holds"
    stopped = _trace({0: [_event("Recv", RECV, 1, 0, 1.0, 3.0)], 1: [_event("Recv", RECV, 0, 0, 1.0, 3.0)]})
    stopped.events["open"][:] = 1
    drawn = space_time_svg(stopped)
    assert drawn.count('stroke-dasharray="4 3"') == 2 + 2, "each open call's box, and a line to its peer"


def test_one_palette_for_python_and_the_widgets():
    from mpinb import _colors
    from mpinb._events import KIND_NAMES

    assert len(_colors.KIND_COLORS) == len(KIND_NAMES)
    assert [_colors.WIDGET_COLORS[f"kind-{name}"] for name in KIND_NAMES] == list(_colors.KIND_COLORS)
    assert _colors.rank_color(11) == _colors.PALETTE[1]
    assert _colors.tint("#4e79a7", 0.5) == "rgba(78,121,167,0.5)"


def test_spawned_processes_get_the_lanes_after_the_pools_ranks_in_every_list_of_ranks():
    first, second = 2_000_000, 1_000_000  # rank 1's spawn #0 and rank 0's spawn #0 (provisional lanes)
    inter0, inter1 = "spawn0@0", "spawn0@1"

    def recording(events, comms, remote=None, spawned=None, running=0):
        data = {"events": events, "dropped": 0, "comms": comms, "began": 0.0, "ended": 10.0, "offset": 0.0}
        if remote:
            data["remote"] = remote
        if spawned:
            data["spawned"] = spawned
        if running:
            data["spawned_running"] = running
        return data

    child_of_1 = recording([_event("Send", SEND, 0, 0, 1.0, 1.1, sent=8, comm=inter1)],
                           {inter1: [1, first]}, remote={inter1: [1]})
    children_of_0 = {second + c: recording([_event("Send", SEND, 0, 0, 2.0, 2.1, sent=4, comm=inter0)],
                                           {inter0: [0, second, second + 1]}, remote={inter0: [0]})
                     for c in (0, 1)}
    trace = Trace({
        0: recording([_event("Recv", RECV, c, 0, 1.5, 2.5, received=4, comm=inter0) for c in (0, 1)],
                     {"world": [0, 1], inter0: [0, second, second + 1]}, remote={inter0: [second, second + 1]},
                     spawned=children_of_0),
        1: recording([_event("Recv", RECV, 0, 0, 0.5, 1.2, received=8, comm=inter1)],
                     {"world": [0, 1], inter1: [1, first]}, remote={inter1: [first]},
                     spawned={first: child_of_1}, running=1),
    }, world_size=2)
    assert trace.ranks == [0, 1, 2, 3, 4] and trace.lanes == 5
    assert trace.spawned == {2: {"root": 0, "spawn": 0, "rank": 0}, 3: {"root": 0, "spawn": 0, "rank": 1},
                             4: {"root": 1, "spawn": 0, "rank": 0}}
    assert trace.lane_names() == ["rank 0", "rank 1", "child 0.0", "child 0.1", "child 1.0"]
    assert sorted((m["source"], m["dest"]) for m in trace.messages()) == [(2, 0), (3, 0), (4, 1)]
    assert trace.comms[inter0] == [0, 2, 3] and trace.matrix("bytes")[4, 1] == 8
    assert trace.spawned_running == 1
    assert repr(trace) == "<Trace 6 MPI calls on 2 ranks and 3 spawned processes>"
    alone = Trace({0: recording([], {"world": [0]}, spawned={second: recording([], {})})}, world_size=1)
    assert alone.lane_names() == ["rank 0", "child 0"]


def test_a_python_command_line_splits_into_pythons_options_and_the_program():
    from mpinb.rank._spawned import python_program

    assert python_program(["child.py", "-u", "x"]) == ([], ["child.py", "-u", "x"])
    assert python_program(["-u", "-X", "dev", "-Wignore", "-m", "mpi4py.futures.server"]) == (
        ["-u", "-X", "dev", "-Wignore"], ["-m", "mpi4py.futures.server"])
    assert python_program(["-OB", "-c", "print(1)", "a"]) == (["-OB"], ["-c", "print(1)", "a"])
    for unreadable in ([], ["-"], ["-i", "x.py"], ["--help"], ["-m"], ["-u"]):
        assert python_program(unreadable) is None, unreadable


def test_a_spawned_program_runs_as_python_runs_it(tmp_path):
    """What the bootstrap of a spawned program runs (script, -m module, -c code) sees what it
    would under ``python`` itself: its name, argv, path, and a ``__main__`` its classes pickle in."""
    import subprocess

    probe = ("import sys, pickle, json, os\n"
             "class Thing: pass\n"
             "print(json.dumps([__name__, [os.path.basename(a) for a in sys.argv], os.path.basename(sys.path[0]),\n"
             "                  type(pickle.loads(pickle.dumps(Thing()))).__name__]))\n")
    (tmp_path / "probe.py").write_text(probe)
    bootstrap = "import sys\nfrom mpinb.rank._spawned import run\nrun(sys.argv[1:])"
    for program in (["probe.py", "x", "-y"], ["-m", "probe", "z"], ["-c", probe, "w"]):
        plain = subprocess.run([sys.executable, *program], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        booted = subprocess.run([sys.executable, "-c", bootstrap, *program], cwd=tmp_path, capture_output=True,
                                text=True, timeout=30)
        assert plain.returncode == 0, plain.stderr
        assert (booted.returncode, booted.stdout) == (0, plain.stdout), (program, booted.stderr)
    missing = subprocess.run([sys.executable, "-c", bootstrap, "gone.py"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=30)
    assert missing.returncode == 2 and "can't open file" in missing.stderr and "gone.py" in missing.stderr


# -- results ---------------------------------------------------------------------------------------

def _failure(kind: str) -> RankFailure:
    return RankFailure(type=kind, message="", traceback=f"{kind}\n")


def test_which_ranks_failed_has_one_answer():
    result = RunResult(ranks=[0, 1, 2], errors={0: _failure("ValueError"), 1: _failure("KeyboardInterrupt")},
                       released=[1])
    assert result.failed_ranks() == [0]
    assert [ranks for ranks, _ in result.error_groups()] == [[0]]
    stopped = RunResult(ranks=[0, 1], errors={0: _failure("KeyboardInterrupt"), 1: _failure("KeyboardInterrupt")},
                        stopped="timeout")
    assert stopped.failed_ranks() == []
    raised = RunResult(ranks=[0], errors={0: _failure("KeyboardInterrupt")})
    assert raised.failed_ranks() == [0], "user code that raises KeyboardInterrupt itself failed"


# -- the tutorials' data --------------------------------------------------------------------------

def test_the_shipped_digits_are_the_uci_test_set():
    from mpinb.train import load_digits_data

    X, y = load_digits_data()
    assert X.shape == (1797, 64) and X.dtype == np.float64 and 0 <= X.min() and X.max() == 1.0
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert X.sum() == 35107.375, "the same pixels as scikit-learn's copy (checked against load_digits)"


# -- the live output widget ------------------------------------------------------------------------

def test_the_live_view_is_sent_only_what_is_new(monkeypatch):
    from mpinb.widgets import RankOutput
    from mpinb.widgets import output as output_module

    sent: list[dict] = []
    view = RankOutput([0, 1])
    monkeypatch.setattr(view, "send", lambda content, buffers=None: sent.append(content))
    monkeypatch.setattr(output_module, "_SYNC_INTERVAL", 0.0)
    view.append(0, "stdout", "hello ")
    view.append(1, "stderr", "warning\n")
    view.append(0, "stdout", "world\n")
    assert [m["items"] for m in sent] == [[["text", 0, "stdout", "hello "]], [["text", 1, "stderr", "warning\n"]],
                                          [["text", 0, "stdout", "world\n"]]]
    assert view.stdout == ["", ""], "the whole output is state only at the end"
    view._on_view_message(view, {"type": "snapshot"}, None)  # a view that opens late gets everything
    assert view.stdout == ["hello world\n", ""] and view.stderr == ["", "warning\n"]
    view.append(1, "stdout", "more\n")
    assert sent[-1]["items"] == [["text", 1, "stdout", "more\n"]]
    view.finish(RunResult(ranks=[0, 1], stdout={0: "hello world\n", 1: "more\n"}, stderr={1: "warning\n"}))
    assert view.stdout == ["hello world\n", "more\n"] and view.state == ["ok", "ok"]
    assert view.merged == [[0, "stdout", "hello "], [1, "stderr", "warning\n"], [0, "stdout", "world\n"],
                           [1, "stdout", "more\n"]]


@pytest.mark.parametrize("count, parts", [(10, 4), (3, 4), (100, 7), (0, 3), (5, 1)])
def test_scatter_rows_split_as_numpy_does(count, parts):
    from mpinb.pool._data import _split_rows

    expected = [len(block) for block in np.array_split(np.arange(count), parts)]
    rows = _split_rows(count, parts)
    assert [stop - first for first, stop in rows] == expected
    assert rows[0][0] == 0 and rows[-1][1] == count and all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_ranks_with_the_same_output_are_shown_once():
    from mpinb.pool._render import as_html, as_text

    ranks = list(range(6))
    stdout = {r: "odd one\n" if r == 4 else "hello\n" for r in ranks}
    stderr = {5: "careful\n"}
    text = as_text(ranks, stdout, stderr, {}, {})
    assert text.splitlines() == ["[0-3] hello", "[4] odd one", "[5] hello", "[5:err] careful"]
    assert as_html(ranks, stdout, stderr, {}, {}).count("hello") == 2


# -- wait states, the critical path, comparisons ---------------------------------------------------

NAN = float("nan")


def _pipeline() -> Trace:
    """Three stages: each computes 1 s, then passes on; stage k receives at k s."""
    return _trace({
        0: [_event("send", SEND, 1, 0, 1.0, 1.01)],
        1: [_event("recv", RECV, 0, 0, 0.0, 1.02), _event("send", SEND, 2, 0, 2.02, 2.03)],
        2: [_event("recv", RECV, 1, 0, 0.0, 2.04)],
    }, ended={0: 1.01, 1: 2.03, 2: 3.04})


def test_a_pipelines_waits_and_critical_path_exactly():
    trace = _pipeline()
    waits = trace.waits()
    assert [(w["kind"], w["rank"], w["peer"], round(w["seconds"], 2)) for w in waits] == [
        ("late sender", 2, 1, 2.02), ("late sender", 1, 0, 1.0)]
    path = trace.critical_path()
    assert path.ranks() == [0, 1, 2] and path.wall == pytest.approx(3.04)
    assert {rank: round(seconds, 2) for rank, seconds in path.by_rank().items()} == {0: 1.0, 1: 1.02, 2: 1.02}
    assert [(s["rank"], s["op"]) for s in path.steps] == [
        (0, "computing"), (1, "recv"), (1, "computing"), (2, "recv"), (2, "computing")]
    assert dict(path.by_line())["computing before line 1"] == pytest.approx(2.0, abs=0.01)


def test_the_waits_and_the_critical_path_are_said_in_the_notebooks_language():
    from mpinb._language import set_language
    from mpinb.trace._waits import explain

    set_language("zh")
    try:
        trace = _pipeline()
        said = explain(trace.waits())
        text = trace.critical_path().text()
    finally:
        set_language(None)
    assert said[0] == "rank 2 在 recv（第 1 行）中等待了 2.02 s：rank 1 晚了 2.02 s 才发送（send，第 1 行）"
    assert text.startswith("关键路径（3.04 s）：rank 0 \u2192 rank 1 \u2192 rank 2") and "第 1 行之前的计算" in text
    assert explain(_pipeline().waits())[0].startswith("rank 2 waited 2.02 s in recv (line 1) for rank 1")


def _lock_contention(holder_exclusive: int) -> Trace:
    # Rank 2's Lock returns at once (MPI may acquire a lock lazily); its Get waits until rank 1's
    # hold is released. Rank 1 returns from Unlock late (descheduled), after the grant.
    win = "win0@world"
    unlock = _event("Unlock", EPOCH, 0, -1, 3.2, 3.21, comm=win)
    return _trace({
        0: [],
        1: [_event("Lock", EPOCH, 0, holder_exclusive, 1.0, 1.00001, comm=win),
            _event("Unlock", EPOCH, 0, -1, 3.0, 3.5, comm=win)],
        2: [_event("Lock", EPOCH, 0, 0, 1.5, 1.50001, comm=win),
            _event("Get", RMA, 0, 0, 1.6, 3.1, received=8, comm=win), unlock],
    }, windows=(win,))


def test_a_lock_granted_lazily_waits_in_the_first_call_of_its_epoch_that_lasted():
    trace = _lock_contention(holder_exclusive=1)
    [wait] = [w for w in trace.waits() if w["kind"] == "lock held"]
    assert (wait["rank"], wait["peer"], wait["op"], wait["peer_op"]) == (2, 1, "Get", "Lock")
    assert wait["seconds"] == pytest.approx(1.5)
    epochs = [(e["holder"], e["exclusive"], e["start"], e["end"]) for e in trace.lock_epochs()]
    assert epochs == [(1, True, 1.00001, 3.5), (2, False, 3.1, 3.21)], "the shared epoch begins at its grant"
    shared = _lock_contention(holder_exclusive=0)
    assert [w for w in shared.waits() if w["kind"] == "lock held"] == [], "two shared locks do not exclude"
    assert [e["start"] for e in shared.lock_epochs()] == [1.00001, 1.50001]


def test_each_read_and_write_of_a_file_is_an_arrow_between_its_rank_and_the_file():
    from mpinb._events import COLLECTIVE, IO
    from mpinb.trace._svg import space_time_svg

    f = "file0@world"
    trace = _trace({
        0: [_event("File.Open", COLLECTIVE, -1, -1, 0.5, 0.6, comm="world"),
            _event("Write_at_all", COLLECTIVE, -1, 0, 1.0, 1.5, sent=32, comm=f),
            _event("Allreduce", COLLECTIVE, -1, -1, 2.0, 2.1, sent=8, received=8)],
        1: [_event("File.Open", COLLECTIVE, -1, -1, 0.5, 0.6, comm="world"),
            _event("Write_at_all", COLLECTIVE, -1, 32, 1.0, 1.4, sent=32, comm=f),
            _event("Read_at", IO, -1, 0, 1.6, 1.7, received=16, comm=f),
            _event("Allreduce", COLLECTIVE, -1, -1, 2.0, 2.1, sent=8, received=8)],
    }, windows=(f,))
    trace.file_names[f] = name = "/data/out.bin"
    calls = [(c["rank"], c["op"], c["offset"], c["bytes"], c["write"], c["name"]) for c in trace.io_calls()]
    assert calls == [(0, "Write_at_all", 0, 32, True, name), (1, "Write_at_all", 32, 32, True, name),
                     (1, "Read_at", 0, 16, False, name)], "not the Open (no bytes) nor the Allreduce"
    svg = space_time_svg(trace)
    assert ">out.bin</text>" in svg and svg.count('stroke-dasharray="2 2"') == 3


def test_a_wait_call_takes_the_loss_of_the_nonblocking_receive_it_completed():
    trace = _trace({
        0: [_event("Irecv", RECV, 1, 0, 0.0, 3.0, returned=0.01), _event("Irecv", RECV, 2, 0, 0.02, 3.0, returned=0.03),
            _event("Waitall", WAIT, -1, -1, 1.0, 3.0)],
        1: [_event("Send", SEND, 0, 0, 2.0, 2.01)],
        2: [_event("Send", SEND, 0, 0, 2.9, 2.91)],
    })
    (wait,) = trace.waits()
    assert (wait["op"], wait["peer"], wait["seconds"]) == ("Waitall", 2, pytest.approx(1.9)), "once, the latest"


def test_a_broken_off_call_is_open_matches_nothing_and_leaves_no_critical_path():
    trace = _trace({0: [_event("recv", RECV, 1, 0, 1.0, NAN, returned=NAN)],
                    1: [_event("send", SEND, 0, 0, 0.5, 0.6)]}, ended={0: 4.0, 1: 0.7})
    (row,) = trace.unfinished()
    assert row["rank"] == 0 and row["end"] == row["returned"] == 4.0 and row["msg"] == -1
    assert trace.messages() == [] and trace.waits() == []
    assert trace.critical_path().stopped and "stopped" in str(trace.critical_path())


def test_a_comparison_says_what_changed_per_rank_and_per_operation():
    from mpinb.trace import Comparison

    before, after = _pipeline(), _trace({0: [_event("send", SEND, 1, 0, 0.1, 0.11)],
                                         1: [_event("recv", RECV, 0, 0, 0.0, 0.12)]}, ended={0: 0.2, 1: 0.3})
    comparison = Comparison(before, after)
    assert comparison.wall() == (pytest.approx(3.04), pytest.approx(0.3))
    ranks = {row["rank"]: row for row in comparison.per_rank()}
    assert ranks[2]["wall_a"] == pytest.approx(3.04) and ranks[2]["wall_b"] == 0.0, "a rank only one run had"
    recv = next(row for row in comparison.per_op() if row["op"] == "recv")
    assert (recv["calls_a"], recv["calls_b"]) == (2, 1)
    text = comparison.text()
    assert "wall time" in text and "3.04 s" in text and "-2.74 s (-90%)" in text


def test_matrix_of_time_and_histograms_of_a_known_trace():
    trace = _pipeline()
    assert trace.matrix("time")[0, 1] == pytest.approx(1.02) and trace.matrix("time")[1, 2] == pytest.approx(2.04)
    hist = trace.histograms()
    assert hist["sizes"]["counts"] == {"send": [2, 0]}, "two empty messages, in the first bin"
    assert sum(hist["durations"]["counts"]["recv"]) == 2


def test_progress_view_lag_time_left_and_saved_text():
    from mpinb.widgets.progress import ProgressView

    view = ProgressView([0, 1, 2, 3])
    state = {"bar": 0, "desc": "fit", "total": 100, "done": False, "ended": False}
    view.update({r: {**state, "n": 50, "elapsed": 1.0} for r in (0, 1, 2)} | {3: {**state, "n": 10, "elapsed": 1.0}})
    assert view.lagging == [3]
    assert "9.0 s" in view.line, "the slowest rank's time left: 90 more at 10 per second"
    assert view.line.startswith("fit:  40%") and view.line.endswith("on 4 ranks")
    view.update({3: {**state, "n": 10, "elapsed": 1.0, "ended": True}})
    assert view.lagging == [], "a rank that left the loop does not lag"
    view.finish()
    assert "left the loop early: rank 3" in view._fallback()[0]
    unknown = ProgressView([0, 1])
    unknown.update({0: {**state, "total": None, "n": 100, "elapsed": 1.0}, 1: {**state, "total": None, "n": 30,
                                                                                 "elapsed": 1.0}})
    assert unknown.lagging == [1] and unknown.line.startswith("fit: 130 [")
    # rank 1 reported 0.3 s before the others, at the same rate: not behind
    stale = ProgressView([0, 1, 2])
    stale.update({0: {**state, "n": 60, "elapsed": 1.2}, 1: {**state, "n": 45, "elapsed": 0.9},
                  2: {**state, "n": 30, "elapsed": 1.2}})
    assert stale.lagging == [2]


# -- the language of what mpinb says ---------------------------------------------------------------

@pytest.fixture
def automatic_language(monkeypatch):
    """No explicit choice and none in the environment: the notebook's folder and the locale decide."""
    from mpinb import _language

    monkeypatch.setattr(_language, "_chosen", None)
    for variable in ("MPINB_LANGUAGE", "JPY_SESSION_NAME", "LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(variable, raising=False)
    return _language


def test_the_language_follows_the_choice_the_notebooks_folder_and_the_locale(automatic_language, monkeypatch,
                                                                             tmp_path_factory):
    lang = automatic_language
    assert lang.language() == "en"
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert lang.language() == "zh"
    monkeypatch.setenv("LANG", "C.UTF-8")
    assert lang.language() == "en"
    monkeypatch.setenv("JPY_SESSION_NAME", "tutorials/notebooks/zh/01-point-to-point.ipynb")
    assert lang.language() == "zh", "a notebook in a zh folder"
    monkeypatch.setenv("JPY_SESSION_NAME", "zh.ipynb")
    assert lang.language() == "en", "only folders count, not the notebook's own name"
    monkeypatch.delenv("JPY_SESSION_NAME")
    zh_folder = tmp_path_factory.mktemp("x") / "zh"
    zh_folder.mkdir()
    monkeypatch.chdir(zh_folder)
    assert lang.language() == "zh", "a kernel started in its notebook's zh folder"
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/en/a.ipynb")
    assert lang.language() == "en", "the notebook's path, when known, decides"
    monkeypatch.setenv("MPINB_LANGUAGE", "en")
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/zh/x.ipynb")
    assert lang.language() == "en"
    lang.set_language("zh-Hans")
    assert lang.language() == "zh" and lang.say("any rank") == "任意 rank"
    assert lang.say("{ranks} raised {error}", ranks="rank 1", error="ValueError") == "rank 1 引发了 ValueError"
    assert lang.say("a sentence nobody translated") == "a sentence nobody translated"
    with pytest.raises(ValueError, match="mpinb speaks 'en' and 'zh', not 'fr'"):
        lang.set_language("fr")
    lang.set_language(None)
    assert lang.language() == "en"


def test_every_word_the_trace_view_says_is_sent_in_the_notebooks_language():
    """trace.js says its words through say("..."): each is one of trace.py's VIEW_WORDS (which go
    to the browser translated), or the view would stay English in a Chinese notebook."""
    import pathlib
    import re

    from mpinb.widgets import trace

    module = pathlib.Path(trace.__file__).with_name("trace.js").read_text()
    said = set(re.findall(r'say\("((?:[^"\\]|\\.)*)"', module))  # say("...") itself
    said |= set(re.findall(r'key\("[^"]*", "([^"]*)"', module))  # the legend's keys
    said |= set(re.findall(r'(?:text|choice|check)\("show_\w+", "([^"]*)"', module))  # the filters' labels
    said |= set(re.findall(r'\["\w+", "([^"]*)"\]', module))  # the tabs
    header = re.search(r'for \(const label of \[([^\]]*)\]', module)  # the summary's columns
    assert header is not None, "the summary's columns are said in a loop over their labels"
    said |= set(re.findall(r'"([^"]*)"', header.group(1)))
    said = {word.encode().decode("unicode_escape") for word in said}
    assert len(said) > 30
    unknown = sorted(said - set(trace.VIEW_WORDS))
    assert not unknown, f"trace.js says these, which VIEW_WORDS lacks: {unknown}"
    zh = trace.TraceView.__init__.__globals__["say"]
    from mpinb._language import set_language

    set_language("zh")
    try:
        assert zh("{count} MPI calls", count=3) == "3 次 MPI 调用"
    finally:
        set_language(None)


def test_every_sentence_mpinb_says_has_its_chinese(monkeypatch):
    """Each template given to say() (and each plain hint of the exercises) is in the catalog, with
    the same fields: a sentence added in English only would fall back silently otherwise."""
    import ast
    import pathlib
    import string

    import mpinb
    from mpinb._zh import ZH

    root = pathlib.Path(mpinb.__file__).parent
    said = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "say" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    said.append(first.value)
            if path.name == "_exercises.py" and isinstance(node, ast.Return) and isinstance(node.value, ast.List):
                said += [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if isinstance(node, ast.keyword) and node.arg == "hang_hint":
                said.append(node.value.value)
    from mpinb.pool import _hang
    from mpinb.widgets.trace import VIEW_WORDS

    said += [_hang.SYNCHRONOUS_SENDS, _hang.USUAL_FIXES, _hang.WINDOW_FIXES, *_hang.FIXES.values(), *VIEW_WORDS]
    assert len(said) > 60
    missing = sorted({s for s in said if s not in ZH})
    assert not missing, missing
    fields = lambda text: {f for _, f, _, _ in string.Formatter().parse(text) if f}
    assert all(fields(english) == fields(chinese) for english, chinese in ZH.items())


def test_a_deadlock_and_a_failed_run_are_told_in_chinese(automatic_language):
    automatic_language.set_language("zh")
    try:
        text = diagnose({r: _send((r + 1) % 4) for r in range(4)}, finished=[], idle=[]).text()
        assert text.startswith("死锁：") and "等待环：0 -> 1 -> 2 -> 3 -> 0" in text
        assert "rank 0: send 发往 rank 1 (tag 0, 3.8 MB)，第 2 行" in text and "常见修复" in text
        result = RunResult(ranks=[0, 1])
        result.errors[1] = RankFailure(type="ValueError", message="bad", traceback="", line=3)
        from mpinb.errors import RankError

        assert str(RankError(result)) == "rank 1 引发了 ValueError: bad (line 3)；rank 0 正常结束"
    finally:
        automatic_language.set_language(None)


def test_the_critical_path_of_a_long_ping_pong_alternates_through_every_wait():
    events = {0: [], 1: []}
    t = 0.0
    for _ in range(300):  # each receive waits 1 ms for its sender
        events[0].append(_event("send", SEND, 1, 0, t + 0.001, t + 0.0011))
        events[1].append(_event("recv", RECV, 0, 0, t, t + 0.0012))
        t += 0.002
        events[1].append(_event("send", SEND, 0, 1, t + 0.001, t + 0.0011))
        events[0].append(_event("recv", RECV, 1, 1, t, t + 0.0012))
        t += 0.002
    trace = _trace(events, ended={0: t, 1: t})
    assert len(trace.waits()) == 600
    path = trace.critical_path()
    assert path.ranks() == [0, 1] * 300 + [0], "each message hands the path to the other rank"
    assert all(a["end"] <= b["start"] + 1e-9 for a, b in zip(path.steps, path.steps[1:]))
    assert sum(path.by_rank().values()) == pytest.approx(path.wall), "no gap: the path spans the run"


# -- where a stuck rank is: its stack, written by faulthandler --------------------------------------

def test_the_main_threads_stack_is_read_from_the_last_dump(tmp_path):
    import os

    import mpinb
    from mpinb.pool._stacks import _parse, where

    execute = os.path.join(os.path.dirname(mpinb.__file__), "rank", "_execute.py")
    path = tmp_path / "2.stack"
    old_dump = ('Current thread 0x00007f0000000001 (most recent call first):\n'
                '  File "<mpi-cell-1>", line 1 in <module>\n')
    new_dump = ('Thread 0x00007f00000000aa (most recent call first):\n'
                '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n\n'
                'Current thread 0x00007f0000000001 (most recent call first):\n'
                '  File "/site-packages/numpy/linalg/_linalg.py", line 1700 in svd\n'
                '  File "<mpi-cell-7>", line 3 in <module>\n'
                f'  File "{execute}", line 66 in _exec_cell\n')
    path.write_text("main thread 0x7f0000000001\n" + old_dump + new_dump)
    offset = len("main thread 0x7f0000000001\n" + old_dump)
    frames, whole = _parse(str(path), offset)
    assert not whole, "a dump paused before the engine's outermost frame is not the whole stack yet"
    with open(path, "a") as dump:
        dump.write('  File "/x/mpinb/rank/_engine_main.py", line 160 in <module>\n')
    assert _parse(str(path), offset)[1], "its outermost frame written: whole"
    assert [(f["file"], f["line"]) for f in frames] == [("/site-packages/numpy/linalg/_linalg.py", 1700),
                                                        ("<mpi-cell-7>", 3), (execute, 66)]
    cell = "a = np.ones((9, 9))\nb = a + 1\nu, s, v = np.linalg.svd(b)\n"
    assert where(frames, {"<mpi-cell-7>": cell}) == "in `u, s, v = np.linalg.svd(b)`, line 3, inside svd of _linalg.py"
    assert where(frames[1:], {"<mpi-cell-7>": cell}) == "in `u, s, v = np.linalg.svd(b)`, line 3"
    assert where(frames[1:], {}) == "at line 3"  # a cell whose code the pool no longer has
    assert where(None, {}) == "its stack could not be read"
    assert where(frames[2:], {}) == "in _exec_cell of _execute.py"  # no user frame at all
    assert _parse(str(path), path.stat().st_size) == (None, False)  # nothing written since


def test_a_stop_that_comes_when_a_data_move_is_done_still_stops_the_cell():
    import os
    import signal as signals
    import time

    from mpinb.pool._data import stop_button

    handler = signals.getsignal(signals.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="the data move had ended when the interrupt came"):
        with stop_button() as interrupts:
            os.kill(os.getpid(), signals.SIGINT)
            time.sleep(0.01)
            assert interrupts, "noted, not raised inside the move"
    assert signals.getsignal(signals.SIGINT) is handler, "the notebook's own handler is back"


def test_the_background_start_reads_the_size_the_notebooks_first_pool_cell_asks_for(tmp_path, monkeypatch):
    import nbformat

    from mpinb.notebook._prestart import planned_size
    from mpinb.pool._pool import default_size

    def notebook(*cells: str) -> str:
        path = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
        return str(path)

    monkeypatch.delenv("MPINB_RANKS", raising=False)
    assert planned_size(notebook("%load_ext mpinb", "x = 1", "%%mpi -n 6\nprint(rank)", "%%mpi -n 2\npass")) == 6
    assert planned_size(notebook("%load_ext mpinb", "%mpi start -n 8 --hosts a,b")) == 8
    assert planned_size(notebook("%%mpi --timeout 3 -n4\npass")) == 4
    assert planned_size(notebook("%%mpi --no-trace\npass")) == default_size()  # the default, asked for
    assert planned_size(notebook("%load_ext mpinb", "print('no pool here')")) is None
    assert planned_size(str(tmp_path / "missing.ipynb")) is None
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert planned_size(str(tmp_path / "broken.ipynb")) is None
    monkeypatch.setenv("MPINB_RANKS", "5")  # a default set on purpose (the MPI kernel's spec)
    assert planned_size(str(tmp_path / "missing.ipynb")) == 5


def test_the_bench_starts():
    """``make test`` runs no benchmark: this keeps a rename in mpinb from breaking ``make bench``
    (``--help`` imports every module that the bench's runs use)."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    usage = subprocess.run([sys.executable, "-m", "bench", "--help"], cwd=root, capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode == 0 and "--only" in usage.stdout, usage.stderr


# -- Pool's options ----------------------------------------------------------------------------------

def test_every_pool_option_is_read_back_and_described():
    from mpinb.pool._pool import OPTIONS, Pool

    assert OPTIONS and "encrypt" in OPTIONS and "n" not in OPTIONS
    undescribed = [name for name in OPTIONS if f"``{name}``" not in (Pool.__doc__ or "")]
    assert not undescribed, f"Pool's docstring does not describe {undescribed}"
    chosen = {"launcher": "mpi", "mpiexec": "/usr/bin/mpiexec", "mpiexec_args": ["-f", "hosts"],
              "env": {"OMP_NUM_THREADS": "2"}, "yield_when_idle": True, "start_timeout": 30.0,
              "max_output_lines": 7, "max_output_chars": 70, "trace_capacity": 5, "trace_budget": 50,
              "controller_ip": "10.0.0.1", "launcher_options": {"a": 1}, "stop_timeout": 3.0, "encrypt": False,
              "verify": True}
    assert set(chosen) == set(OPTIONS), "this test names every option"
    pool = Pool(3, **chosen)
    assert pool.options() == chosen
    pool.options()["env"]["X"] = "changed"
    assert pool.options()["env"] == {"OMP_NUM_THREADS": "2"}, "options() hands out copies"


def test_the_protocols_constructors_give_every_key_their_type_requires():
    from mpinb import _protocol

    def required(kind: type) -> set[str]:
        return {key for key, note in kind.__annotations__.items() if "NotRequired" not in str(note)}

    failed = _protocol.failure("ValueError", "bad", "Traceback ...")
    assert set(failed) == required(_protocol.Failure) and failed["line"] is None
    assert set(_protocol.reply()) == required(_protocol.Reply)
    assert _protocol.reply(failed)["error"] is failed and not _protocol.reply()["has_value"]
    hello = _protocol.hello(ready=True, failure=None, rank=0, size=1, host="h", pid=1, mpi="MPICH", tracer="C")
    assert set(hello) == required(_protocol.Hello)
