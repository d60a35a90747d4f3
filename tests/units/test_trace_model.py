"""The trace model (mpinb/trace/) on made-up events: matching, clocks, waits, critical path, drawings; no run."""

from __future__ import annotations

import pytest

from mpinb.common._events import EPOCH, FIELDS, RECV, RMA, SEND, WAIT
from mpinb.trace import Trace
from mpinb.trace._arrays import busy_until

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


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
    from mpinb.common._events import COLLECTIVE, IO
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
