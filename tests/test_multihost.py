"""A pool across hosts: a Slurm cluster of two hosts made of network namespaces (see
multihost_cluster.py), started from the notebook side with `%mpi start --launcher slurm`.

Ranks 0-1 run on node1 and ranks 2-3 on node2; the controller is on this side of a bridge that only
the test makes. Nothing outside this machine is contacted, and everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
import threading
import time

import psutil
import pytest
from _processes import wait_until_gone
from multihost_cluster import (
    check_clocks_across_hosts,
    check_data_across_hosts,
    check_deadlock_across_hosts,
    multihost_slurm,
)
from slurm_cluster import jobs, open_mpi_without_pmix

import mpinb
from mpinb.notebook import _session as session

pytestmark = [
    pytest.mark.every_mpi, pytest.mark.hosts,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("unshare"),
        reason="needs root (network namespaces), slurm-wlm and unshare: `make test` runs as root and installs it"),
    pytest.mark.skipif(bool(open_mpi_without_pmix()), reason=open_mpi_without_pmix() or ""),
]


@pytest.fixture(scope="module")
def cluster():
    with multihost_slurm(count=2) as (env, here, hosts):
        saved = os.environ.get("SLURM_CONF")
        os.environ.update(env)  # every client of the cluster needs SLURM_CONF
        try:
            yield env, hosts
        finally:
            if saved is None:
                del os.environ["SLURM_CONF"]
            else:
                os.environ["SLURM_CONF"] = saved
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(host.namespace in listed for host in hosts), "the test's namespaces are gone"


@pytest.fixture(scope="module")
def pool(cluster):
    """A 4-rank pool started as a notebook user would, through the magic."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()  # the test session's one shell (made here if no other test made it)
    shell.run_line_magic("load_ext", "mpinb")
    previous = session.current_pool()
    session.use_pool(None)
    try:
        shell.run_line_magic("mpi", "start -n 4 --launcher slurm --time 0:10:00")
        yield session.current_pool()
    finally:
        session.stop_pool()
        session.use_pool(previous)
    env, hosts = cluster
    assert jobs(env) == [], "stopping the pool ends its job"
    for host in hosts:
        listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
        names = sorted(psutil.Process(int(pid)).name() for pid in listed.split() if psutil.pid_exists(int(pid)))
        assert names == ["slurmd"], f"only the host's slurmd is left on {host.name}: {names}"


HOSTS = {0: "node1", 1: "node1", 2: "node2", 3: "node2"}


@pytest.mark.timeout(480)
def test_an_exported_notebook_runs_as_a_batch_job_across_the_hosts(cluster, existing_pools):
    """`mpinb export --slurm` of a notebook whose pool was a Slurm job across both hosts, then
    `mpinb submit`: the job's srun runs the program on both hosts, and it writes what the notebook
    wrote. (Before the module's pool takes the nodes.)"""
    from test_export import run_as_a_batch_job

    env, hosts = cluster
    folder = pathlib.Path(tempfile.mkdtemp(dir=hosts[0].shared))  # the hosts' /tmp are their own
    try:
        run_as_a_batch_job(folder, env, "%mpi start -n 4 --launcher slurm --time 0:10:00", ranks=4,
                           expected_hosts={"node1", "node2"})
    finally:
        shutil.rmtree(folder)
    assert not wait_until_gone(15, existing_pools)


@pytest.mark.timeout(240)
def test_ranks_on_two_hosts_form_one_world(pool):
    result = pool.run("import socket\n(socket.gethostname(), comm.allreduce(rank + 1))")
    assert result.value == {r: (host, 10) for r, host in HOSTS.items()}
    assert {row["rank"]: row["host"] for row in pool.status()} == HOSTS
    security = os.path.join(pool._supervisor.cluster.profile_dir, "security")
    assert stat.S_IMODE(os.stat(security).st_mode) == 0o700, "only the user may enter the key folder"
    keys = [name for name in os.listdir(security)
            if name.startswith(f"ipcontroller-{pool._supervisor.cluster.cluster_id}")]
    assert keys
    for name in keys:
        assert stat.S_IMODE(os.stat(os.path.join(security, name)).st_mode) & 0o077 == 0
        with open(os.path.join(security, name)) as handle:
            connection = json.load(handle)
        assert connection["key"] and connection["signature_scheme"].startswith("hmac-"), "messages are signed"


@pytest.mark.timeout(120)
def test_no_message_arrives_before_it_was_sent_across_hosts(pool):
    across = check_clocks_across_hosts(pool, HOSTS)
    assert len(across) == 40, "half the ring crosses between the hosts"


@pytest.mark.timeout(120)
def test_a_deadlock_across_hosts_is_diagnosed_and_the_pool_goes_on(pool):
    check_deadlock_across_hosts(pool)


@pytest.mark.timeout(240)
def test_a_host_failing_mid_cell_is_named_and_the_pool_restarts(pool, cluster):
    _, hosts = cluster
    pool.run("before_failure = 1")

    def fail_node2() -> None:
        time.sleep(2)
        listed = subprocess.run(["ip", "netns", "pids", hosts[1].namespace], capture_output=True, text=True)
        for pid in listed.stdout.split():
            try:
                proc = psutil.Process(int(pid))
                if any("_engine_main.py" in part for part in proc.cmdline()):
                    proc.kill()
            except psutil.Error:
                pass

    killer = threading.Thread(target=fail_node2)
    killer.start()
    began = time.monotonic()
    with pytest.raises(mpinb.RankDiedError, match=r"ranks 2-3 on node2 died \(Killed\) while running the cell") as info:
        pool.run("import time\nfor _ in range(60):\n    time.sleep(0.5)\ncomm.allreduce(1)", timeout=90)
    killer.join()
    assert "the pool was restarted with 4 fresh ranks" in str(info.value)
    assert time.monotonic() - began < 90
    result = pool.run("import socket\n(socket.gethostname(), comm.allreduce(1), 'before_failure' in globals())")
    assert result.value == {r: (host, 4, False) for r, host in HOSTS.items()}


@pytest.mark.timeout(120)
def test_large_data_crosses_to_rank_0_once_and_spreads_through_mpi(pool):
    check_data_across_hosts(pool)
