"""Pools beyond one machine, on a real single-node Slurm cluster (slurmctld + slurmd on
localhost, started here): a job runs the ranks as one MPI world, and stopping leaves no job."""

from __future__ import annotations

import glob
import json
import os
import stat
import time

import pytest
from _processes import wait_until_gone
from slurm_cluster import jobs, open_mpi_without_pmix, single_node_slurm

import mpinb

pytestmark = [pytest.mark.every_mpi, pytest.mark.hosts,
              pytest.mark.skipif(bool(open_mpi_without_pmix()), reason=open_mpi_without_pmix() or "")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with single_node_slurm(str(tmp_path_factory.mktemp("slurm"))) as env:
        saved = os.environ.get("SLURM_CONF")
        os.environ.update(env)  # every client of the cluster needs SLURM_CONF
        yield env
        if saved is None:
            del os.environ["SLURM_CONF"]
        else:
            os.environ["SLURM_CONF"] = saved


@pytest.mark.timeout(180)
def test_a_pool_through_the_slurm_launcher_allreduces_and_leaves_no_job(slurm, existing_pools):
    pool = mpinb.Pool(2, launcher="slurm", launcher_options={"timelimit": "0:10:00"}, start_timeout=90)
    pool.start()
    clusters = [pool._supervisor.cluster]
    try:
        assert [line.split()[1] for line in jobs(slurm)] == ["RUNNING"]
        assert pool.run("comm.allreduce(rank + 1)").value == {0: 3, 1: 3}
        assert pool.run("size").value == {0: 2, 1: 2}
        # a rank stuck in an untraced call is named from its stack; the pool is a new job
        pool.stop_timeout = 2
        with pytest.raises(TimeoutError, match=r"rank 1 \(in `comm.Barrier\(\)`, line 2\) did not stop"):
            pool.run("if rank == 1:\n    comm.Barrier()\n", timeout=1, trace=False)
        assert pool.run("comm.allreduce(rank + 1)").value == {0: 3, 1: 3}
        clusters.append(pool._supervisor.cluster)
        assert [line.split()[1] for line in jobs(slurm)] == ["RUNNING"], "one job: the old one ended"
        security = os.path.join(pool._supervisor.cluster.profile_dir, "security")
        assert stat.S_IMODE(os.stat(security).st_mode) == 0o700, "only the user may enter the key folder"
        cluster_id = pool._supervisor.cluster.cluster_id
        keys = [name for name in os.listdir(security) if name.startswith(f"ipcontroller-{cluster_id}")]
        assert keys, "the connection files are where ipyparallel keeps them"
        for name in keys:
            mode = stat.S_IMODE(os.stat(os.path.join(security, name)).st_mode)
            assert mode & 0o077 == 0, f"{name} is readable by others: {oct(mode)}"
            with open(os.path.join(security, name)) as handle:
                connection = json.load(handle)
            assert connection["key"] and connection["signature_scheme"].startswith("hmac-"), "messages are signed"
            assert connection["interface"] != "tcp://127.0.0.1", "remote ranks can reach the controller"
    finally:
        pool.stop()
    assert jobs(slurm) == [], "stopping the pool cancels its job"
    for cluster in clusters:  # each job's script and output, in the profile's log folder
        written = glob.glob(os.path.join(cluster.profile_dir, "log", f"slurm-{cluster.cluster_id}*"))
        assert not written, "the job's script and output are cleaned up"
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.timeout(180)
def test_magics_start_a_slurm_pool_with_batch_options(slurm, ip, existing_pools):
    from mpinb.notebook import _session as session

    previous = session.current_pool()
    session.use_pool(None)
    try:
        ip.run_line_magic("mpi", "start -n 2 --launcher slurm --partition debug --time 0:05:00")
        pool = session.current_pool()
        assert pool.settings.launcher_options == {"queue": "debug", "timelimit": "0:05:00"}
        assert pool.run("comm.allreduce(1)").value == {0: 2, 1: 2}
        ip.run_line_magic("mpi", "stop")
        assert jobs(slurm) == []
    finally:
        session.stop_pool()
        session.use_pool(previous)


@pytest.mark.timeout(180)
def test_a_job_that_fails_at_once_is_reported_with_its_output(slurm, existing_pools, tmp_path):
    failing = (f"#!/bin/sh\n#SBATCH --export=ALL\n#SBATCH --output={tmp_path}/job-%j.out\n"
               "echo 'cannot find python on this node' >&2\nexit 7\n")
    options = {"batch_template": failing, "batch_file_name": str(tmp_path / "job.sbatch")}  # a user's own script
    pool = mpinb.Pool(2, launcher="slurm", launcher_options=options, start_timeout=90)
    with pytest.raises(mpinb.PoolStartError, match="(?s)Slurm job .* ended before they came up.*cannot find python"):
        pool.start()
    assert jobs(slurm) == []
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.timeout(180)
def test_a_rank_that_dies_while_the_others_wait_is_reported_at_once(slurm, existing_pools, tmp_path):
    """srun keeps the job running while the other tasks wait (here: sleep), so the job never
    leaves the queue; srun's own error line in the output tells."""
    script = (f"#!/bin/sh\n#SBATCH --export=ALL\n#SBATCH --ntasks=2\n#SBATCH --output={tmp_path}/job-%j.out\n"
              "srun sh -c 'if [ $SLURM_PROCID = 0 ]; then echo rank 0 cannot start >&2; exit 3; fi; sleep 120'\n")
    options = {"batch_template": script, "batch_file_name": str(tmp_path / "job.sbatch")}
    pool = mpinb.Pool(2, launcher="slurm", launcher_options=options, start_timeout=90)
    began = time.monotonic()
    with pytest.raises(mpinb.PoolStartError, match="(?s)a task of the Slurm job .* failed.*rank 0 cannot start"):
        pool.start()
    assert time.monotonic() - began < 30, "reported long before the start timeout"
    assert jobs(slurm) == []
    assert not wait_until_gone(10, existing_pools)


@pytest.mark.timeout(400)
def test_an_exported_notebook_runs_as_a_batch_job_with_the_notebooks_result(slurm, tmp_path, existing_pools):
    """`mpinb export --slurm`, then `mpinb submit`: the job (this environment's mpiexec, inside the
    allocation) writes what the notebook wrote, in a folder whose name sbatch's directive parser
    would cut short unquoted (a space, a quote and a #)."""
    from test_export import run_as_a_batch_job

    folder = tmp_path / "it's #1 notebooks"
    folder.mkdir()
    run_as_a_batch_job(folder, slurm, "%mpi start -n 2")
    assert not wait_until_gone(10, existing_pools)


def test_srun_outside_an_allocation_says_what_to_do(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(mpinb.PoolStartError, match="not in one \\(no \\$SLURM_JOB_ID\\)"):
        mpinb.Pool(2, launcher="srun").start()
