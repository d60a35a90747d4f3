"""A real single-node Slurm cluster on localhost for the tests: slurmctld and slurmd from Debian's
slurm-wlm (installed by `make test`), configured in a temporary folder, stopped afterwards."""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import time

import psutil


def open_mpi_without_pmix() -> str | None:
    """Why Slurm pools cannot run on this environment's MPI here, if they cannot: Open MPI starts
    under srun through PMIx, and Debian's slurm-wlm loads the PMIx library only if libpmix-dev is
    installed (its mpi/pmix plugin fails to load otherwise, and the job's output says so)."""
    from mpinb.pool import find_mpiexec
    from mpinb.pool._launch import mpi_family

    if mpi_family(find_mpiexec()) != "Open MPI":
        return None
    if glob.glob("/usr/lib/*/slurm-wlm/mpi_pmix*.so") and glob.glob("/usr/lib/*/libpmix.so"):
        return None
    return ("Open MPI needs Slurm's PMIx plugin and the PMIx library it loads (libpmix.so): "
            "`make system` installs libpmix-dev")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: str) -> str:
    node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    host = node.split()[0].split("=", 1)[1]
    lines = [
        "ClusterName=mpinb-test",
        f"FirstJobId={random.randint(1000, 10**7)}",  # job ids of an earlier test cluster never recur
        f"SlurmctldHost={host}",
        "AuthType=auth/none", "CredType=cred/none",  # no munge needed on one node (slurm-wlm 22.05)
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=pmi2",  # the mpich wheel speaks PMI2: srun's tasks form one MPI world
        "ReturnToService=2", "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        node,
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE",
    ]
    os.makedirs(f"{folder}/state"), os.makedirs(f"{folder}/spool")
    path = os.path.join(folder, "slurm.conf")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def single_node_slurm(folder: str):
    """Yield the environment (``SLURM_CONF``) of a running one-node cluster; stop it afterwards."""
    if not shutil.which("slurmctld"):
        raise RuntimeError("slurm-wlm is not installed: `make test` installs it (make system)")
    conf = _config(folder)
    env = {**os.environ, "SLURM_CONF": conf}
    daemons = [subprocess.Popen([daemon, "-D", *flags, "-f", conf], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
               for daemon, flags in (("slurmctld", ["-i"]), ("slurmd", []))]
    try:
        deadline = time.monotonic() + 30
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip()
            if state == "idle":
                break
            if time.monotonic() > deadline:
                logs = "".join(open(f"{folder}/{name}.log").read()[-2000:] for name in ("slurmctld", "slurmd")
                               if os.path.exists(f"{folder}/{name}.log"))
                raise RuntimeError(f"the Slurm node did not become idle (sinfo: {state!r})\n{logs}")
            time.sleep(0.2)
        yield {"SLURM_CONF": conf}
    finally:
        subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True)
        _wait_for_steps_to_end(env)
        for daemon in daemons:
            daemon.terminate()
        gone, alive = psutil.wait_procs([psutil.Process(d.pid) for d in daemons if d.poll() is None], timeout=5)
        for proc in alive:
            proc.kill()
        for daemon in daemons:
            daemon.wait(timeout=5)


def _wait_for_steps_to_end(env: dict, seconds: float = 15.0) -> None:
    """Cancelled jobs end asynchronously; once slurmd is gone nothing would end their steps."""
    deadline = time.monotonic() + seconds
    while jobs(env) and time.monotonic() < deadline:
        time.sleep(0.2)
    steps = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "slurmstepd"]
    tree = [q for p in steps for q in (p, *_children(p))]
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(tree, timeout=5)


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def jobs(env: dict) -> list[str]:
    """The cluster's jobs still queued or running."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env={**os.environ, **env}, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if line.strip()]
