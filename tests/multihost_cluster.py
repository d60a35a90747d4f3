"""A Slurm cluster of several hosts inside this machine: Linux network namespaces as hosts.

Each host is a network namespace (its own address on a bridge that only the test makes) whose
processes also get a host name of their own (a UTS namespace) and a private ``/etc/hosts`` (a mount
namespace), and runs its own ``slurmd``; ``slurmctld`` and the notebook side stay in this
namespace, reaching the hosts through the bridge. The file system is shared, as compute nodes share
a home directory. Everything is removed afterwards, also when the test fails: daemons, every process
left in a namespace, the namespaces, the bridge.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
from slurm_cluster import _free_port, _wait_for_steps_to_end, jobs


@dataclass
class Host:
    name: str  # its host name, and its Slurm node name
    namespace: str
    address: str
    shared: str  # the folder that every host sees (outside /tmp, which each host has its own)


def _ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", "netns", "exec", namespace, "ip", *args] if namespace else ["ip", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done


_CLUSTERS_MADE = itertools.count(1)
KILL_S = 15.0  # how long the processes left in a host may take to die


@contextlib.contextmanager
def namespace_hosts(count: int) -> Iterator[tuple[str, list[Host]]]:
    """``count`` hosts on a private bridge; yields (this side's address on the bridge, hosts)."""
    # A tag of its own per cluster (link names have at most 15 characters): the kernel frees a
    # deleted namespace and its links later, on a work queue, so the next cluster must not need the
    # same names (seen beside a CPU hog: the next module's 'ip link add' failed on the last's names)
    tag = f"mh{os.getpid() % 100000}n{next(_CLUSTERS_MADE)}"
    subnet = f"10.{random.randint(200, 250)}.{random.randint(1, 250)}"
    bridge = f"{tag}br"
    folder = tempfile.mkdtemp(prefix="mpinb-hosts-", dir="/var/tmp")
    hosts = [Host(f"node{i}", f"{tag}-node{i}", f"{subnet}.{10 + i}", folder) for i in range(1, count + 1)]
    here = f"{subnet}.1"
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{here}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, host in enumerate(hosts, 1):
            outside, inside = f"{tag}o{i}", f"{tag}i{i}"
            subprocess.run(["ip", "netns", "add", host.namespace], check=True, timeout=30)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", host.namespace)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", "lo", "up", namespace=host.namespace)
            _ip("addr", "add", f"{host.address}/24", "dev", inside, namespace=host.namespace)
            _ip("link", "set", inside, "up", namespace=host.namespace)
        with open(os.path.join(folder, "hosts"), "w") as handle:
            handle.write(f"127.0.0.1 localhost\n{here} {socket.gethostname()}\n")
            handle.writelines(f"{host.address} {host.name}\n" for host in hosts)
        yield here, hosts
    finally:
        made = {inode for host in hosts if (inode := _namespace_inode(host.namespace)) is not None}
        for host in hosts:
            _kill_namespace(host.namespace)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)
        _ip("link", "del", bridge, check=False)
        shutil.rmtree(folder, ignore_errors=True)
        held = _processes_in(made)
        if held and sys.exc_info()[1] is None:  # (a failure of the test's own says more)
            raise RuntimeError(f"processes outlived their test hosts, holding the namespaces: {held}")


def _namespace_inode(namespace: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{namespace}").st_ino
    except OSError:
        return None


def _processes_in(namespaces: set[int]) -> list[str]:
    """The processes still inside these network namespaces (by inode)."""
    held = []
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino in namespaces:
                held.append(f"{proc.pid} {proc.info['name']}")
    return held


DRAIN_S = 5.0  # how long a stopped capture may go on reading what is queued
SO_RCVBUFFORCE = 33  # Linux's (asm-generic/socket.h); Python's socket module does not name it


@contextlib.contextmanager
def sniffing(hosts: list[Host]) -> Iterator[bytearray]:
    """Every frame that the hosts send or receive while inside, as an eavesdropper on the
    cluster's network sees them (a packet capture on the bridge's ports)."""
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    tags = {host.namespace.split("-")[0] for host in hosts}
    ports = [line.split(":")[1].strip().split("@")[0] for line in listed.splitlines()
             if any(f" {tag}o" in line for tag in tags)]
    assert ports, "the bridge has ports to listen on"
    captures = []
    for port in ports:
        capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))  # every protocol
        # room while the reader waits for a core (FORCE: beyond net.core.rmem_max; the tests run as root)
        capture.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        capture.bind((port, 0))
        captures.append(capture)
    captured = bytearray()
    done = threading.Event()

    def read() -> None:
        # Frames queue in the sockets until read; on a loaded machine the reader may run late, so
        # once told to stop it still reads what is queued (the cell's frames all crossed the
        # bridge before its result came back), for at most DRAIN_S under steady traffic.
        drained_by = None
        while True:
            if drained_by is None and done.is_set():
                drained_by = time.monotonic() + DRAIN_S
            ready = select.select(captures, [], [], 0.05 if drained_by is None else 0)[0]
            for capture in ready:
                captured.extend(capture.recv(1 << 16))
            if drained_by is not None and (not ready or time.monotonic() > drained_by):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield captured
    finally:
        done.set()
        reader.join(DRAIN_S + 10)
        assert not reader.is_alive(), "the capture's reader ended (its sockets close only then)"
        for capture in captures:
            capture.close()


def _kill_namespace(namespace: str) -> None:
    """Kills every process in ``namespace``, again while any is left (one may have been starting
    a child when the last round listed them), for at most KILL_S."""
    deadline = time.monotonic() + KILL_S
    while time.monotonic() < deadline:
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
        procs = []
        for pid in listed.stdout.split():
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(int(pid)))
        if not procs:
            return
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=max(deadline - time.monotonic(), 0.1))


def on_host(host: Host, command: list[str]) -> list[str]:
    """``command`` as a process of ``host``: its network, its host name, its /etc/hosts, its /tmp
    and /dev/shm (MPI's shared memory between the ranks of one host)."""
    # `ip netns exec` mounts a fresh /sys, without the cgroup file systems that slurmd looks for:
    # an empty tmpfs there lets it mount what it needs (CgroupAutomount), in this mount namespace.
    # A /tmp of its own, as real hosts have (Slurm's PMIx server makes the same folder on each),
    # in which what the hosts share (this checkout and its environments, wherever they are) stays.
    outer = f"{host.shared}/outer-tmp-{host.name}"
    shared_in_tmp = "".join(f" && mkdir -p /tmp/{name} && mount --bind {outer}/{name} /tmp/{name}"
                            for name in _tops_in_tmp())
    script = (f"mount --bind {host.shared}/hosts /etc/hosts && mount -t tmpfs cgroup_root /sys/fs/cgroup && "
              f"mkdir -p {outer} && mount --bind /tmp {outer} && mount -t tmpfs host_tmp /tmp && "
              "mount -t tmpfs host_shm /dev/shm"
              f"{shared_in_tmp} && hostname {host.name} && exec \"$@\"")
    return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "--mount", "--propagation", "private",
            "sh", "-c", script, "sh", *command]


def _tops_in_tmp() -> list[str]:
    """The folders directly in /tmp that hold this checkout, the Python in use, the working
    directory (a CI clone in /tmp/ci) or the IPython folder (the test run's stands for one in the
    home directory: see conftest.py): compute nodes see these as the login node does."""
    tops = set()
    ipython = os.environ.get("IPYTHONDIR", "/")
    for path in (os.path.dirname(os.path.abspath(__file__)), sys.prefix, os.getcwd(), ipython):
        parts = os.path.realpath(path).split(os.sep)
        if len(parts) > 2 and parts[1] == "tmp":
            tops.add(parts[2])
    return sorted(tops)


def launch_agent(hosts: list[Host]) -> str:
    """A stand-in for ``ssh`` that mpiexec uses to start its daemons on the hosts (MPICH:
    ``-launcher ssh -launcher-exec AGENT``; Open MPI: ``--prtemca plm_ssh_agent AGENT``): called as
    ``AGENT [ssh options] HOST COMMAND...``, it runs the command as a process of that host."""
    table = {key: (host.name, host.namespace, host.address, host.shared)
             for host in hosts for key in (host.name, host.address)}
    path = os.path.join(hosts[0].shared, "ssh-agent.py")
    with open(path, "w") as handle:
        handle.write(f"""#!{sys.executable}
import os, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from multihost_cluster import Host, on_host
args = sys.argv[1:]
while args and args[0].startswith("-"):  # ssh's options, such as -x (no X11)
    args = args[1:]
host = Host(*{table!r}[args[0]])
# the IPython folder the hosts share (see _tops_in_tmp), also when a daemon that mpiexec started on
# a host calls this agent without it in its environment
os.environ["IPYTHONDIR"] = {os.environ.get("IPYTHONDIR", "/")!r}
command = on_host(host, ["sh", "-c", " ".join(args[1:])])  # one line, as ssh runs it
# a login's environment, as ssh gives: nothing of mpiexec's
# (and the mark of the test session that made the hosts, as every process it starts carries: see
# tests/_processes.py)
os.execvpe(command[0], command, {{"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/"),
                                  "MPINB_TEST_SESSION": {os.environ.get("MPINB_TEST_SESSION", "")!r}}})
""")
    os.chmod(path, 0o755)
    return path


def agent_arguments(mpiexec: str, agent: str) -> list[str]:
    """mpiexec arguments that make it start its daemons on other hosts through ``agent``."""
    from mpinb.pool._launch import mpi_family

    if mpi_family(mpiexec) == "Open MPI":
        return ["--prtemca", "plm_ssh_agent", agent]
    return ["-launcher", "ssh", "-launcher-exec", agent]


def _config(folder: str, here: str, hosts: list[Host]) -> str:
    probe = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    hardware = " ".join(field for field in probe.split() if not field.startswith(("NodeName=", "UpTime=")))
    lines = [
        "ClusterName=mpinb-multihost",
        f"FirstJobId={random.randint(1000, 10**7)}",
        f"SlurmctldHost={socket.gethostname()}({here})",
        "AuthType=auth/none", "CredType=cred/none",
        "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool-%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "MpiDefault=pmi2", "ReturnToService=2", "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        *(f"NodeName={host.name} NodeAddr={host.address} NodeHostname={host.name} {hardware}" for host in hosts),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE",
    ]
    os.makedirs(f"{folder}/state")
    for host in hosts:
        os.makedirs(f"{folder}/spool-{host.name}")
    path = os.path.join(folder, "slurm.conf")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "cgroup.conf"), "w") as handle:
        handle.write("CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\n")
    return path


@contextlib.contextmanager
def multihost_slurm(count: int = 2) -> Iterator[tuple[dict[str, str], str, list[Host]]]:
    """Yield (``SLURM_CONF`` environment, this side's address, hosts) of a running cluster."""
    with namespace_hosts(count) as (here, hosts):
        folder = hosts[0].shared
        conf = _config(folder, here, hosts)
        env = {**os.environ, "SLURM_CONF": conf}
        daemons = [subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)]
        daemons += [subprocess.Popen(on_host(host, ["slurmd", "-D", "-N", host.name, "-f", conf]), env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT) for host in hosts]
        try:
            deadline = time.monotonic() + 45
            while True:
                states = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True,
                                        text=True).stdout.split("\n")
                if all(line.split()[1:] == ["idle"] for line in states if line.strip()) and len(
                        [line for line in states if line.strip()]) == count:
                    break
                if time.monotonic() > deadline:
                    logs = "".join(open(os.path.join(folder, name)).read()[-1500:] for name in os.listdir(folder)
                                   if name.endswith(".log"))
                    raise RuntimeError(f"the hosts did not become idle (sinfo: {states!r})\n{logs}")
                time.sleep(0.3)
            yield {"SLURM_CONF": conf}, here, hosts
        finally:
            subprocess.run(["scancel", "--full", "--user", "root"], env=env, capture_output=True, timeout=30)
            deadline = time.monotonic() + 15
            while jobs({"SLURM_CONF": conf}) and time.monotonic() < deadline:
                time.sleep(0.2)
            for daemon in daemons:
                daemon.terminate()
            for daemon in daemons:
                try:
                    daemon.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(timeout=5)
            _wait_for_steps_to_end({"SLURM_CONF": conf}, seconds=0)


# -- what every pool across hosts must do, however it was started ----------------------------------

RING = ("import numpy as np\nfor _ in range(20):\n"
        "    comm.Sendrecv(np.zeros(1000), dest=(rank + 1) % size, recvbuf=np.zeros(1000),\n"
        "                  source=(rank - 1) % size)\n")


def check_clocks_across_hosts(pool, host_of: dict[int, str]) -> list[dict]:
    """A traced ring across the hosts: no message arrives before it was sent. Returns the
    messages that crossed between hosts."""
    messages = pool.run(RING).trace.messages()
    assert len(messages) == 20 * pool.size
    assert all(m["recv_end"] >= m["send_start"] for m in messages), "the ranks' clocks are aligned"
    return [m for m in messages if host_of[m["source"]] != host_of[m["dest"]]]


def check_deadlock_across_hosts(pool) -> None:
    """A ring of sends too large to buffer: diagnosed as a cycle, interrupted, and the pool goes on."""
    import mpinb

    try:
        pool.run("comm.send([rank] * 500_000, dest=(rank + 1) % size)\ncomm.recv(source=(rank - 1) % size)",
                 timeout=4)
    except mpinb.DeadlockError as err:
        assert err.diagnosis.cycle == list(range(pool.size))
        assert "rank 1: send to rank 2" in str(err)
    else:
        raise AssertionError("the ring of large sends did not hang")
    assert pool.run("comm.allreduce(1)").value == dict.fromkeys(range(pool.size), pool.size)


def check_data_across_hosts(pool) -> None:
    """A large array pushed to every rank crosses to rank 0 once and reaches the rest through MPI;
    scatter, gather and pull work across the hosts too."""
    import numpy as np

    big = np.arange(300_000, dtype=np.float64).reshape(-1, 3)  # 2.4 MB: a large array
    pool.push({"big": big, "small": {"a": 1}})
    seen = pool.run("(big.shape, float(big.sum()), big.flags.writeable, small['a'], "
                    "any(n.startswith('_mpinb_staged') for n in globals()))").value
    assert set(seen.values()) == {(big.shape, float(big.sum()), True, 1, False)}
    pool.push({"part": big[:1000]}, targets=[1, 2])  # some ranks only: the usual way
    assert pool.run("float(part.sum())", targets=[1, 2]).value == {1: float(big[:1000].sum()),
                                                                  2: float(big[:1000].sum())}
    pool.scatter("rows", big)
    np.testing.assert_array_equal(pool.gather("rows"), big)
    assert [float(p.sum()) for p in pool.pull("big")] == [float(big.sum())] * pool.size
