"""A pool across hosts started by mpiexec (`%mpi start --hosts node1,node2`), on either MPI.

The hosts are network namespaces (see multihost_cluster.py); mpiexec reaches them through a
stand-in for ssh, as it would reach a cluster's nodes. Ranks 0 and 2 run on node1, ranks 1 and 3 on
node2 (mpiexec deals them round robin); the controller listens on this side of a bridge that only
the test makes. Nothing outside this machine is contacted, and everything is removed afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import uuid

import psutil
import pytest
from multihost_cluster import (
    agent_arguments,
    check_clocks_across_hosts,
    check_data_across_hosts,
    check_deadlock_across_hosts,
    launch_agent,
    namespace_hosts,
    sniffing,
)

import mpinb
from mpinb.common._ranges import parse_ranks
from mpinb.notebook import _session as session
from mpinb.pool import _launch
from mpinb.pool._launch import find_mpiexec

pytestmark = [pytest.mark.every_mpi, pytest.mark.hosts,
              pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="needs root (network namespaces) and unshare: `make test` runs as root")]

HOSTS = {0: "node1", 1: "node2", 2: "node1", 3: "node2"}


@pytest.fixture(scope="module")
def hosts():
    with namespace_hosts(2) as (_, hosts):
        yield hosts, launch_agent(hosts)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(host.namespace in listed for host in hosts), "the test's namespaces are gone"
    assert not os.path.exists(hosts[0].shared), "and their shared folder"


def _processes_on(host) -> list[str]:
    listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
    names = []
    for pid in listed.split():
        try:
            names.append(" ".join(psutil.Process(int(pid)).cmdline()[:3]))
        except psutil.Error:
            pass
    return names


@pytest.fixture(scope="module")
def pool(hosts):
    """A 4-rank pool started as a notebook user would, through the magic."""
    from IPython.testing.globalipapp import get_ipython

    namespaces, agent = hosts
    shell = get_ipython()
    shell.run_line_magic("load_ext", "mpinb")
    previous = session.current_pool()
    session.use_pool(None)
    through_agent = " ".join(agent_arguments(find_mpiexec(), agent))
    try:
        shell.run_line_magic("mpi", f"start -n 4 --hosts node1,node2 --start-timeout 30 -- {through_agent}")
        yield session.current_pool()
    finally:
        session.stop_pool()
        session.use_pool(previous)
    for host in namespaces:
        assert _processes_on(host) == [], f"stopping the pool leaves nothing on {host.name}"


@pytest.mark.timeout(180)
def test_ranks_on_two_hosts_form_one_world(pool):
    result = pool.run("import socket\n(socket.gethostname(), comm.allreduce(rank + 1))")
    assert result.value == {r: (host, 10) for r, host in HOSTS.items()}
    assert {row["rank"]: row["host"] for row in pool.status()} == HOSTS
    supervisor = pool._supervisor
    assert not supervisor.settings.on_this_host and supervisor.deaths is None
    assert supervisor.cluster.controller_ip == "*", "ranks elsewhere reach the controller"


def _eavesdrop(pool, hosts) -> tuple[bytes, bytearray]:
    """A secret that a cell carries in its code, its output and its value, and what an
    eavesdropper on the hosts' network saw while the cell ran on them."""
    secret = f"secret-{uuid.uuid4().hex}"
    with sniffing(hosts) as captured:
        result = pool.run(f"print({secret!r})\n{secret!r} * rank")
    assert result.stdout == {r: secret + "\n" for r in HOSTS} and result.value[1] == secret
    assert len(captured) > 4000, "the cell's messages crossed the network"
    return secret.encode(), captured


@pytest.mark.timeout(120)
def test_an_eavesdropper_on_the_network_reads_nothing_of_a_pool_across_hosts(pool, hosts):
    """Encrypted by default across hosts: code, output and values cross the network, unreadable."""
    assert pool.settings.encrypted and pool._supervisor.client.session.key, "encrypted, and signed too"
    secret, captured = _eavesdrop(pool, hosts[0])
    assert secret not in captured


@pytest.mark.timeout(180)
def test_the_eavesdropper_reads_a_pool_that_was_told_not_to_encrypt(hosts, existing_pools):
    """The same capture of a pool started with --no-encrypt sees the secret: the check above can fail."""
    from _processes import wait_until_gone

    namespaces, agent = hosts
    mpiexec = find_mpiexec()
    plain = mpinb.Pool(4, mpiexec_args=[*_launch.host_arguments(mpiexec, "node1,node2"),
                                        *agent_arguments(mpiexec, agent)], start_timeout=60, encrypt=False)
    with plain:
        secret, captured = _eavesdrop(plain, namespaces)
    assert secret in captured
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.timeout(120)
def test_no_message_arrives_before_it_was_sent_across_hosts(pool):
    across = check_clocks_across_hosts(pool, HOSTS)
    assert len(across) == 80, "every message of the ring crosses between the hosts"


@pytest.mark.timeout(120)
def test_a_deadlock_across_hosts_is_diagnosed_interrupted_and_the_pool_goes_on(pool):
    check_deadlock_across_hosts(pool)


@pytest.mark.timeout(120)
def test_large_data_crosses_to_rank_0_once_and_spreads_through_mpi(pool):
    check_data_across_hosts(pool)


@pytest.mark.timeout(120)
def test_a_long_cell_on_other_hosts_is_interrupted_through_their_nannies(pool):
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within 2 s"):
        pool.run("import time\nstarted = True\nfor _ in range(600):\n    time.sleep(0.1)", timeout=2)
    assert time.monotonic() - began < 10
    assert all(f.type == "KeyboardInterrupt" for f in pool.last_result.errors.values())
    assert pool.pull("started") == [True] * 4, "the ranks keep what they did before the interrupt"
    assert pool.run("comm.allreduce(1)").value == {r: 4 for r in HOSTS}


@pytest.mark.timeout(180)
def test_the_debugger_reaches_ranks_on_other_hosts(pool):
    """Stacks, a breakpoint on a rank of node2 that the others wait for, and inspect, across hosts."""
    pool.run("import numpy as np\nv = np.full(10, float(rank % 2))")
    seen = pool.inspect("v")
    assert [ranks for ranks, _ in seen.groups()] == [[0, 2], [1, 3]]
    said: list[str] = []

    def at_stop(breakpoints) -> None:
        said.append(repr(breakpoints.view()))
        said.append(breakpoints.command("p socket.gethostname(), rank"))
        said.append(repr(pool.stacks()))
        breakpoints.command("c")

    code = ("import socket\nif rank == 1:\n    breakpoint()\n    comm.send(rank, dest=0)\n"
            "elif rank == 0:\n    comm.recv(source=1)\n")
    pool.run(code, debug=at_stop, timeout=60)
    assert "rank 1 stopped at line 4: comm.send(rank, dest=0)" in said[0], said
    assert said[1] == "('node2', 1)"
    assert "rank 1: cell line 4: comm.send(rank, dest=0) → stopped at a breakpoint" in said[2], said


@pytest.mark.timeout(180)
def test_ranks_stuck_on_other_hosts_are_named_from_their_stacks_and_the_pool_restarts(pool):
    """Their stacks come through the hosts' shared profile folder, asked for through the nannies."""
    pool.stop_timeout = 2
    try:
        with pytest.raises(TimeoutError) as info:
            pool.run("if rank != 0:\n    comm.Barrier()\n", timeout=1, trace=False)
    finally:
        pool.stop_timeout = None
    message = str(info.value)
    assert "ranks 1-3 (in `comm.Barrier()`, line 2) did not stop within 2 s" in message, message
    assert "the pool was restarted with 4 fresh ranks" in message
    result = pool.run("import socket\n(socket.gethostname(), comm.allreduce(1))")
    assert result.value == {r: (host, 4) for r, host in HOSTS.items()}


@pytest.mark.timeout(180)
def test_a_rank_killed_on_another_host_is_named_with_its_host_and_the_pool_restarts(pool):
    pool.run("before_failure = 1")
    rank1 = psutil.Process(pool.status()[1]["pid"])  # hosts here share this machine's process ids
    killer = threading.Timer(2, rank1.kill)
    killer.start()
    # MPICH's mpiexec reports a rank killed on another host as "EXIT CODE: 9", and only sometimes
    # adds "EXIT STRING: Killed (signal 9)": the error says what MPI said. When MPI ended other
    # ranks within moments of it, the notebook cannot tell which went first: it names them all.
    died = (r"rank 1 on node2 died: (killed by signal 9|its process exited with code 9)"
            r"|one of ranks (?P<ranks>[\d, -]+) on [\w, ]*node2[\w, ]* died")
    with pytest.raises(mpinb.RankDiedError, match=died) as info:
        pool.run("import time\nfor _ in range(60):\n    time.sleep(0.5)\ncomm.allreduce(1)", timeout=90)
    killer.join()
    named = re.search(died, str(info.value))
    assert named and (not named["ranks"] or 1 in parse_ranks(named["ranks"].replace(" ", ""), 4)), str(info.value)
    assert "the pool was restarted with 4 fresh ranks" in str(info.value)
    result = pool.run("import socket\n(socket.gethostname(), comm.allreduce(1), 'before_failure' in globals())")
    assert result.value == {r: (host, 4, False) for r, host in HOSTS.items()}


@pytest.mark.timeout(120)
def test_a_run_sent_just_after_the_ranks_ended_names_the_death(pool):
    """The controller lets the ended ranks' engines go a moment before the notebook has waited out
    which of them went first: a run sent then must name the death, not fail to send."""
    supervisor = pool._supervisor
    rank0_engine = supervisor.engine_of[0]
    psutil.Process(pool.status()[2]["pid"]).kill()  # on node1, as rank 0 is
    deadline = time.monotonic() + 30
    while rank0_engine in supervisor.client.ids and time.monotonic() < deadline:
        time.sleep(0.001)
    assert rank0_engine not in supervisor.client.ids, "mpiexec ended the other ranks after rank 2"
    # (ranks gone within moments of each other are named together, as in the test above)
    with pytest.raises(mpinb.RankDiedError, match=r"(rank 2 on node1|one of ranks [\d, -]+ on [\w, ]+) died"):
        pool.run("comm.allreduce(1)", timeout=60)
    assert pool.run("comm.allreduce(1)").value == dict.fromkeys(range(4), 4)


@pytest.mark.timeout(240)
def test_a_host_whose_link_goes_down_mid_cell_is_named(pool, hosts):
    """node2's cable is pulled: its ranks stop answering, which is said within seconds; the pool
    cannot start again while node2 is unreachable, which is said too; once the link is back,
    `%mpi restart` brings the pool back."""
    from IPython.testing.globalipapp import get_ipython

    node2 = hosts[0][1]

    def pull_the_cable() -> None:
        time.sleep(2)
        subprocess.run(["ip", "netns", "exec", node2.namespace, "ip", "link", "set", "dev",
                        _link_of(node2), "down"], check=True, timeout=30)

    puller = threading.Thread(target=pull_the_cable)
    puller.start()
    began = time.monotonic()
    try:
        with pytest.raises(mpinb.RankDiedError) as info:
            pool.run("import time\nfor _ in range(60):\n    time.sleep(0.5)\ncomm.allreduce(1)", timeout=120)
        puller.join()
        message = str(info.value)
        assert "ranks 1, 3 on node2 stopped answering" in message, message
        assert "host or its network failed" in message
        assert "could not start again" in message and "node2" in message.split("could not start again")[1], message
        assert time.monotonic() - began < 2 + 20 + 30 + 15, "noticed within the heartbeat's 10 s, then one start"
    finally:
        puller.join()
        subprocess.run(["ip", "netns", "exec", node2.namespace, "ip", "link", "set", "dev", _link_of(node2), "up"],
                       check=True, timeout=30)
    get_ipython().run_line_magic("mpi", "restart")
    assert session.current_pool().run("comm.allreduce(1)").value == {r: 4 for r in HOSTS}


def _link_of(host) -> str:
    """The host's end of its cable to the bridge."""
    links = subprocess.run(["ip", "netns", "exec", host.namespace, "ip", "-o", "link", "show"],
                           capture_output=True, text=True, check=True).stdout
    return next(line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if "lo:" not in line)


@pytest.mark.timeout(120)
def test_ranks_started_elsewhere_than_the_pool_expects_say_so_at_once(hosts, monkeypatch, existing_pools):
    """A source of hosts that mpinb does not know (stood in for by hiding the hosts it does know):
    the ranks find themselves on node1 and node2, not here, and end the start at once saying so,
    instead of waiting in vain for a controller that listens on this host only."""
    from _processes import wait_until_gone

    namespaces, agent = hosts
    there = {host.name: sorted(_processes_on(host)) for host in namespaces}  # the module's own pool, if up
    monkeypatch.setattr(_launch, "other_hosts", lambda args: [])
    mpiexec = find_mpiexec()
    pool = mpinb.Pool(4, mpiexec_args=[*_launch.host_arguments(mpiexec, "node1,node2"),
                                       *agent_arguments(mpiexec, agent)], start_timeout=60)
    assert pool.settings.on_this_host
    began = time.monotonic()
    with pytest.raises(mpinb.PoolStartError, match=r"this rank runs on node[12], not on .*name the hosts"):
        pool.start()
    assert time.monotonic() - began < 20, "refused at once, not after the start timeout"
    assert not pool.running and not wait_until_gone(10, existing_pools)
    deadline = time.monotonic() + 15  # the hosts' daemons end once mpiexec's connection closes
    while any(sorted(_processes_on(host)) != there[host.name] for host in namespaces) and time.monotonic() < deadline:
        time.sleep(0.2)
    for host in namespaces:
        assert sorted(_processes_on(host)) == there[host.name], f"nothing new is left on {host.name}"
