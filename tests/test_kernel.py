"""The MPI kernel through jupyter_client: cells on the ranks, %%local, completion and inspection
from rank 0, interrupt of a deadlocked cell, and shutdown that leaves no process."""

from __future__ import annotations

import os
import time

import jupyter_client
import pytest
from _processes import wait_until_gone

from mpinb.cli import _kernelspec as kernelspec


def execute(client, code: str, timeout: float = 60) -> tuple[dict, str]:
    """Run ``code``; return its execute reply's content and the text it printed or displayed."""
    msg_id = client.execute(code)
    texts = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            texts.append(content["text"])
        elif kind in ("execute_result", "display_data"):
            texts.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            texts.append(f"{content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            break
    reply = client.get_shell_msg(timeout=timeout)["content"]
    assert reply["status"] != "aborted", f"the kernel aborted {code!r} (sent right after an error?)"
    return reply, "".join(texts)


@pytest.fixture(scope="module")
def mpi_kernel(tmp_path_factory):
    """The MPI kernel, as installed by `mpinb kernel install -n 3` (into a private Jupyter path)."""
    from _processes import pool_processes

    existing_pools = {p.pid for p in pool_processes()}
    path = tmp_path_factory.mktemp("jupyter")
    kernelspec.render(str(path / "kernels"), ranks=3)
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(path)
    # (its debugger writes copies of cells to $TMPDIR/ipykernel_<pid>, and leaves them: here, they go
    # with the test's folder)
    temporary = path / "tmp"
    temporary.mkdir()
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="mpinb", startup_timeout=90,
                                                              env={**os.environ, "TMPDIR": str(temporary)})
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=False)
    if saved is None:
        del os.environ["JUPYTER_PATH"]
    else:
        os.environ["JUPYTER_PATH"] = saved
    assert not wait_until_gone(10, existing_pools), "the kernel's ranks must end with the kernel"


def test_cells_run_on_the_ranks_and_local_cells_here(mpi_kernel):
    _, client = mpi_kernel
    reply, _ = execute(client, "x = rank * 10")
    assert reply["status"] == "ok"
    reply, text = execute(client, "%%local\nimport os, mpinb\nprint(mpinb.current_pool().pull('x'), 'x' in globals())")
    assert reply["status"] == "ok" and "[0, 10, 20] False" in text, text


def test_tab_and_shift_tab_look_into_rank_0(mpi_kernel):
    _, client = mpi_kernel
    execute(client, "only_on_ranks = {'rank': rank}")
    matches = client.complete("only_on", 7, reply=True, timeout=30)["content"]["matches"]
    assert "only_on_ranks" in matches
    found = client.inspect("only_on_ranks", 5, reply=True, timeout=30)["content"]
    assert found["found"] and "dict" in found["data"]["text/plain"]
    local = client.complete("%%local\nimport os\nos.getp", 24, reply=True, timeout=30)["content"]["matches"]
    assert "os.getpid" in local or "getpid" in local


def test_interrupt_ends_a_deadlock_and_the_pool_goes_on(mpi_kernel):
    manager, client = mpi_kernel
    # stop_on_error=False: else ipykernel aborts the requests that reach it just after this one's
    # error (under load, the next cell below could be one of them: its reply says "aborted")
    msg_id = client.execute(
        "big = np.zeros(1_000_000); comm.Send(big, dest=(rank + 1) % size); comm.Recv(big, source=(rank - 1) % size)",
        stop_on_error=False,
    )
    time.sleep(2)
    manager.interrupt_kernel()
    began = time.monotonic()
    reply = client.get_shell_msg(timeout=30)
    while reply["parent_header"]["msg_id"] != msg_id:  # a reply to a request of another test
        reply = client.get_shell_msg(timeout=30)
    assert time.monotonic() - began < 3, "control is back within about 2 seconds"
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "RunInterrupted"
    reply, text = execute(client, "%%local\nimport mpinb\nprint(mpinb.current_pool().run('comm.allreduce(1)').value)")
    assert "{0: 3, 1: 3, 2: 3}" in text, text


def test_the_kernel_starts_its_pool_with_the_kernelspec_size(mpi_kernel):
    _, client = mpi_kernel
    _, text = execute(client, "%%local\nprint('ranks:', mpinb.current_pool().size)")
    assert "ranks: 3" in text


def _dap(client, command: str, **arguments) -> dict:
    """One Debug Adapter Protocol request on the control channel, as JupyterLab sends it."""
    _dap.seq = getattr(_dap, "seq", 0) + 1
    client.control_channel.send(client.session.msg("debug_request", {
        "type": "request", "seq": _dap.seq, "command": command, "arguments": arguments}))
    while True:
        reply = client.control_channel.get_msg(timeout=30)
        if reply["msg_type"] == "debug_reply":
            return reply["content"]


def _debug_events(client, count: int, timeout: float = 60) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(events) < count and time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["msg_type"] == "debug_event":
            events.append(msg["content"])
    return events


def test_jupyterlabs_debugger_protocol_reaches_the_ranks(mpi_kernel):
    """What JupyterLab's debugger panel sends: a gutter breakpoint stops every rank, each rank a
    thread; its frames, variables and expressions are the rank's; continue runs it on."""
    _, client = mpi_kernel
    features = client.kernel_info(reply=True)["content"]["supported_features"]
    assert "debugger" in features
    assert _dap(client, "initialize", clientID="jupyterlab")["success"]
    assert _dap(client, "attach")["success"]
    code = "x = rank * 10\ny = x + 1\nz = y * 2\nz"
    source = _dap(client, "dumpCell", code=code)["body"]["sourcePath"]
    assert _dap(client, "setBreakpoints", source={"path": source}, breakpoints=[{"line": 2}])["body"]["breakpoints"][0][
        "verified"]
    assert _dap(client, "configurationDone")["success"]
    threads = _dap(client, "threads")["body"]["threads"]
    assert [t["name"] for t in threads] == ["rank 0", "rank 1", "rank 2"]
    msg_id = client.execute(code, stop_on_error=False)
    stopped = [e["body"]["threadId"] for e in _debug_events(client, 3) if e["event"] == "stopped"]
    assert sorted(stopped) == [1, 2, 3]
    frames = _dap(client, "stackTrace", threadId=3)["body"]["stackFrames"]
    assert [(f["name"], f["line"], f["source"]["path"]) for f in frames] == [("rank 2: <module>", 2, source)]
    scopes = _dap(client, "scopes", frameId=frames[0]["id"])["body"]["scopes"]
    names = {v["name"]: v["value"] for v in _dap(client, "variables",
                                                    variablesReference=scopes[0]["variablesReference"])["body"]["variables"]}
    assert names["x"] == "20" and names["rank"] == "2" and "y" not in names
    frame = frames[0]["id"]
    assert _dap(client, "evaluate", expression="x + 1", frameId=frame, context="repl")["body"]["result"] == "21"
    assert _dap(client, "next", threadId=3)["success"]
    assert _dap(client, "evaluate", expression="y", frameId=frame, context="repl")["body"]["result"] == "21"
    for _ in range(3):
        assert _dap(client, "continue", threadId=1)["success"]
    reply = client.get_shell_msg(timeout=60)
    while reply["parent_header"]["msg_id"] != msg_id:
        reply = client.get_shell_msg(timeout=60)
    assert reply["content"]["status"] == "ok"
    assert _dap(client, "disconnect")["success"]
    _, text = execute(client, "%%local\nimport mpinb\nprint(mpinb.current_pool().run('comm.allreduce(1)').value)")
    assert "{0: 3, 1: 3, 2: 3}" in text, text
