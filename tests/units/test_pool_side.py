"""The pool's pure rules (mpinb/pool/): hang/death reports, hosts, results, rows, output, stacks, options; no pool."""

from __future__ import annotations

import functools
import os
import socket

import numpy as np
import pytest

from mpinb.common._protocol import wait_state
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

pytestmark = [pytest.mark.unit, pytest.mark.timeout(20)]


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


# -- Pool's options ----------------------------------------------------------------------------------

def test_every_pool_option_is_read_back_and_described():
    from mpinb.pool._pool import OPTIONS, Pool

    assert OPTIONS and "encrypt" in OPTIONS and "n" not in OPTIONS
    undescribed = [name for name in ["n", *OPTIONS] if f":param {name}: " not in (Pool.__doc__ or "")]
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



# -- placement -------------------------------------------------------------------------------------

def test_open_mpi_ranks_are_placed_as_its_mpiexec_places_them_unless_the_user_places_them(monkeypatch):
    from mpinb.pool import _launch

    monkeypatch.setattr(_launch, "_launcher_is_prrte", lambda mpiexec: True)  # (Open MPI 5's: a process to ask)
    monkeypatch.setattr(_launch, "_cores", lambda: 8)
    for name in [name for name in os.environ if name.startswith(("OMPI_MCA_", "PRTE_MCA_"))]:
        monkeypatch.delenv(name)
    place = functools.partial(_launch.placement_arguments, "mpiexec")
    assert place(2, [], {}) == ["--map-by", "core:OVERSUBSCRIBE", "--bind-to", "core:overload-allowed"]
    assert place(3, [], {}) == ["--map-by", "package:OVERSUBSCRIBE", "--bind-to", "package:overload-allowed"]
    assert place(9, [], {}) == [], "more ranks than cores: Open MPI binds none"
    assert place(2, ["--rank-by", "slot"], {})[:2] == ["--map-by", "core:OVERSUBSCRIBE"], "ranking places nothing"
    for own in (["--map-by=slot"], ["-bind-to", "none"], ["--use-hwthread-cpus"], ["--nooversubscribe"],
                ["--mca", "rmaps_base_mapping_policy", "slot"], ["--prtemca", "hwloc_default_binding_policy", "none"],
                ["-x", "OMPI_MCA_rmaps_base_mapping_policy=slot"], ["-N", "1"], ["--tune", "placement.conf"]):
        assert place(2, own, {}) == [], own
    assert place(2, ["-x", "OMPI_MCA_btl=self,vader", "--mca", "btl", "self,vader"], {})[:2] == [
        "--map-by", "core:OVERSUBSCRIBE"], "other parameters place nothing"
    assert place(2, [], {"PRTE_MCA_hwloc_default_binding_policy": "none"}) == []
    monkeypatch.setenv("OMPI_MCA_rmaps_base_mapping_policy", "slot")
    assert place(2, [], {}) == []
    monkeypatch.setattr(_launch, "_launcher_is_prrte", lambda mpiexec: False)
    monkeypatch.delenv("OMPI_MCA_rmaps_base_mapping_policy")
    assert place(2, [], {}) == [], "Open MPI 4's, MPICH's and Intel MPI's mpiexec place ranks their own way"


# -- a batch script: any names, the values Slurm reads back --------------------------------------------

def test_a_batch_script_carries_any_folder_and_name_or_refuses_it(tmp_path):
    """Whatever the folder and notebook are called, the batch script either carries them so that
    sbatch reads back the same output path and job name, with no line of commands more, or refuses
    them saying why (a line break would start a command of its own in the script)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from mpinb.pool._slurm import batch_script, output_path, read_directives

    launch = {"launcher": "mpi", "mpiexec": "/usr/bin/mpiexec"}
    plain = batch_script("/home/u/run.py", 2, "nb.ipynb", launch).splitlines()
    names = st.text(st.characters(blacklist_characters="/\0"), min_size=1, max_size=12)

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(folder=names, stem=names, origin=st.text(max_size=12))
    def carried_or_refused(folder: str, stem: str, origin: str) -> None:
        script = f"/home/u/{folder}/{stem}.py"
        try:
            text = batch_script(script, 2, origin, launch)
        except ValueError as refused:
            assert "rename it" in str(refused) and any(not c.isprintable() for c in script + origin)
            return
        options = read_directives(text)
        named = os.path.splitext(f"{stem}.py")[0]  # ("..py" has no extension to Python)
        assert output_path(options["--output"], "42") == f"/home/u/{folder}/{named}-42.out"
        assert options["--job-name"] == named
        assert len(text.splitlines()) == len(plain), "no line more than a plain name gives"

    carried_or_refused()
