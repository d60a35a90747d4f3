"""Starting the ranks, watching their processes, and stopping them with nothing left behind.

A :class:`Supervisor` is one running MPI job under an ipyparallel controller: it knows which
engine is which rank, where each rank runs, and how to tell why a start-up or a rank failed.
"""

from __future__ import annotations

import collections
import glob
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import psutil
import zmq

from .. import rank as _rank
from ..common._leftover_files import (
    launcher_files,
    launcher_sessions,
    mpi_files,
    mpi_segments,
    remove_files,
    remove_folders,
)
from ..common._protocol import (
    DEATHWATCH_ENVIRONMENT,
    EXPECTED_HOST_ENVIRONMENT,
    STACK_SIGNAL,
    STACKS_ENVIRONMENT,
    Hello,
    relay_keys,
)
from ..common._ranges import format_ranks
from ..common._shared_memory import remove_written_by
from ..errors import PoolStartError
from . import _slurm
from ._deathwatch import DeathWatch
from ._launch import (
    ALLOCATION_LAUNCHER,
    LaunchSettings,
    check_memory,
    controller_location,
    find_mpiexec,
    host_environment_arguments,
    mpi_family_in,
    placement_arguments,
    rank_environment,
    this_host_names,
)
from ._pending import Route
from ._processes import RankProcesses
from ._runfolder import make_run_folder
from ._watchdog import end_processes, freeze_trees, kill, process_trees

_POLL = 0.01
# The controller sends the unregistrations of hearts that stopped in one beat one after another:
# all that come within this long of the first belong to that beat.
_SAME_BEAT_S = 0.3
# Processes seen to end within this long of each other ended together, as far as the notebook can tell.
_TOGETHER_S = 0.1
_HEARTBEAT_MS = 1000  # once the ranks are up; start-up beats faster (see _controller_main.py)
_HERE = os.path.dirname(os.path.abspath(__file__))
# What ipyparallel tells engines through the environment (send_engines_connection_env).
ENGINE_CONNECTION_VARIABLES = ("IPP_CLUSTER_ID", "IPP_PROFILE_DIR", "IPP_CONNECTION_INFO")


# How long the ranks get to subscribe to rank 0's relay of runs once they all answered.
RELAY_JOIN_TIMEOUT = 10.0


@dataclass(frozen=True)
class Unregistration:
    """An engine the controller let go: its heart stopped, or (if not) its process ended."""

    engine: int
    heart_stopped: bool
    seen: float  # time.monotonic() when the notebook heard of it


def _unencrypted_warning(address: str, on_this_host: bool) -> str:
    """What a pool that listens on TCP without encryption (``encrypt=False``) exposes, and to whom."""
    try:
        loopback = address == "localhost" or ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        loopback = False
    who = "any user of this host" if on_this_host and loopback else "anyone on the network who reaches this host"
    return (f"encrypt=False: this pool listens on TCP ({address}) without encryption, so {who} who connects to "
            "its ports reads the cells' code and the ranks' output. Messages stay signed: nobody without the "
            "pool's key can run code in it. Leave encrypt unset (or drop --no-encrypt) to encrypt.")


class Supervisor:
    """The controller, the ranks' processes, the watchdog and the death watch of one pool."""

    def __init__(self, settings: LaunchSettings, start_timeout: float):
        self.settings = settings
        self.start_timeout = start_timeout
        self.controller_ip = settings.controller_ip
        self.cluster: Any = None  # ipyparallel.Cluster
        self.client: Any = None  # ipyparallel.Client
        self.engine_of: dict[int, int] = {}
        self.ranks_info: dict[int, Hello] = {}
        self.deaths: DeathWatch | None = None
        self._watchdog: subprocess.Popen | None = None
        self._processes: list[psutil.Process] = []
        self._next_remote_check = 0.0
        self._gone_first: list[int] = []  # ranks elsewhere whose engines were seen unregistered first
        self._unregistrations: list[Unregistration] = []  # in the order the controller sent them
        self._mpi_files: set[tuple[str, int]] = set()  # local ranks' MPI segments, launcher files
        self._launcher_sessions: set[tuple[str, int]] = set()  # of a start broken off (see below)
        self.route = Route()
        self.stacks_folder: str | None = None  # where each rank writes its stack when asked (see _stacks)
        self.run_folder: str | None = None  # this pool's sockets, for this user only (see _runfolder)
        self._local = RankProcesses({})  # the ranks' processes, when on this host

    # -- start-up -----------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the controller and the ranks; return once every rank answers."""
        check_memory(self.settings)
        environment = rank_environment(self.settings)
        if self.settings.on_this_host:  # a rank elsewhere says so at once (see rank/_engine_main.py)
            environment[EXPECTED_HOST_ENVIRONMENT] = socket.gethostname()
        self.run_folder = make_run_folder()
        self._start_watchdog()
        try:
            self.cluster = self._configured_cluster(environment)
        except BaseException:
            self.shutdown()
            raise
        self._sweep_if_we_die(self.cluster)
        try:
            if self.settings.on_this_host:  # these ranks report for duty to it when they start (see _deathwatch)
                self.deaths = DeathWatch(self.run_folder)
                environment[DEATHWATCH_ENVIRONMENT] = self.deaths.address
            self.cluster.start_controller_sync()
            self._watch(self.cluster.controller)
            self.cluster.start_engines_sync(self.settings.n, engine_args=self._engine_args(),
                                            environment=environment)
            for engine_set in self.cluster.engines.values():
                self._watch(engine_set)
            self.client = self.cluster.connect_client_sync()
            self._note_unregistrations_in_order()
            self._wait_for_ranks()
        except KeyboardInterrupt:
            self.shutdown()
            raise
        except Exception as err:  # noqa: BLE001 - any failure to start becomes one PoolStartError
            message = self._startup_report(err)
            self.shutdown()
            raise PoolStartError(message) from (None if isinstance(err, PoolStartError) else err)

    def _engine_args(self) -> list[str]:
        args = [
            "--IPEngine.startup_command=__import__('mpinb.rank').rank.init()",
            "--IPEngine.enable_nanny=" + ("False" if self.settings.on_this_host else "True"),
            f"--IPEngine.wait_for_url_file={self.start_timeout}",
            # ipyparallel gives a rank 5 s to register; with many ranks per core the controller
            # answers later than that, and the rank gives up ("Registration timed out")
            f"--IPEngine.timeout={self.start_timeout}",
            "--log-level=WARN",
        ]
        if not self.settings.on_this_host:
            args.append("--mpi")  # engine id = MPI rank, as with the local launcher
        if self.private_sockets:
            # ipyparallel's engine otherwise listens on loopback TCP to watch the controller's
            # heartbeat; the watchdog and the shutdown end local ranks whose controller is gone.
            args.append("--IPEngine.max_heartbeat_misses=0")
        return args

    def _configured_cluster(self, environment: dict[str, str]) -> Any:
        import ipyparallel as ipp

        settings = self.settings
        cluster_kw: dict[str, Any] = {}
        if not settings.on_this_host:
            # Ranks elsewhere must reach the controller: listen on every interface and tell them
            # this host's name; ipyparallel signs every message with the session key.
            cluster_kw["controller_ip"] = "*"
            cluster_kw["controller_location"] = controller_location()
        if self.controller_ip:
            cluster_kw["controller_ip"] = self.controller_ip
        assert self.run_folder is not None
        listen = self._private_sockets_arguments(self.run_folder) if self.private_sockets else []
        if settings.encrypted:
            if not zmq.has("curve"):
                raise PoolStartError("this pool is to be encrypted (asked, or on TCP, where mpinb encrypts by default) "
                                     "but this pyzmq lacks CurveZMQ (zmq.has('curve') is False): install pyzmq's wheel "
                                     "from PyPI, or pass encrypt=False and read its warning first.")
            listen.append("--IPController.enable_curve=True")
        elif not self.private_sockets:
            warnings.warn(_unencrypted_warning(cluster_kw["controller_ip"], settings.on_this_host), stacklevel=4)
        launcher_class = "mpi" if settings.local or settings.launcher == ALLOCATION_LAUNCHER else settings.launcher
        cluster = ipp.Cluster(
            engines=launcher_class,
            n=settings.n,
            profile="mpinb",
            cluster_id=f"mpinb-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            controller_args=[
                f"--HeartMonitor.period={_HEARTBEAT_MS}",
                "--IPController.broadcast_scheduler_depth=0",  # we use direct views only
                "--log-level=WARN",
                *listen,
            ],
            # Local engines find the connection file themselves, so they can start (and spend
            # their import time) while the controller is still coming up.
            send_engines_connection_env=not settings.on_this_host,
            engine_timeout=int(self.start_timeout),
            log_level=40,
            **cluster_kw,
        )
        # The logs hold every rank's output: readable by this user only, as the profile's files.
        _private_folder(cluster.profile_dir)
        _private_folder(os.path.join(cluster.profile_dir, "log"))
        # In the profile (under $HOME, which a cluster's nodes share), readable by this user only.
        self.stacks_folder = _private_folder(os.path.join(cluster.profile_dir, "stacks", cluster.cluster_id))
        environment[STACKS_ENVIRONMENT] = self.stacks_folder
        mpiexec = (find_mpiexec(settings.mpiexec) if settings.local
                   else _slurm.allocation_srun() if settings.launcher == ALLOCATION_LAUNCHER else None)
        if mpiexec:
            reaper = [sys.executable, "-I", "-S", os.path.join(_HERE, "_reaper.py")] if sys.platform == "linux" else []
            cluster.config.MPIEngineSetLauncher.mpi_cmd = [*reaper, mpiexec]
            srun = _slurm.srun_arguments() if settings.launcher == ALLOCATION_LAUNCHER else []
            # Ranks on other hosts get the controller's address and our settings through the
            # environment, which Open MPI's mpiexec passes there only when told.
            # (and a rank of a pool taken for local must learn where it should be, even elsewhere)
            passed = (host_environment_arguments(mpiexec, [*environment, *ENGINE_CONNECTION_VARIABLES])
                      if settings.local and not settings.on_this_host
                      else host_environment_arguments(mpiexec, [EXPECTED_HOST_ENVIRONMENT]) if settings.local else [])
            placement = (placement_arguments(mpiexec, settings.n, settings.mpiexec_args, settings.env)
                         if settings.on_this_host else [])
            cluster.config.MPIEngineSetLauncher.mpi_args = [*srun, *passed, *placement, *settings.mpiexec_args]
        # Our controller entry beats fast until every rank has registered (see its docstring).
        controller = cluster.config.LocalControllerLauncher
        controller.controller_cmd = [sys.executable, os.path.join(_HERE, "_controller_main.py")]
        controller.environment = {"MPINB_EXPECTED_HEARTS": str(settings.n)}
        launcher_config = cluster.config[_launcher_config_name(launcher_class)]
        launcher_config.engine_cmd = [sys.executable, os.path.join(os.path.dirname(_HERE), "rank", "_engine_main.py")]
        if launcher_class == "slurm":
            log_dir = os.path.join(cluster.profile_dir, "log")
            for key, value in _slurm.slurm_job_files(log_dir, cluster.cluster_id, settings.launcher_options).items():
                launcher_config[key] = value
        for key, value in settings.launcher_options.items():
            launcher_config[key] = value
        return cluster

    @property
    def private_sockets(self) -> bool:
        """Whether the pool listens on Unix sockets in its private folder only (see
        :attr:`LaunchSettings.private_sockets`)."""
        return self.settings.private_sockets

    @staticmethod
    def _private_sockets_arguments(folder: str) -> list[str]:
        prefix = os.path.join(folder, "c")  # ipyparallel names each socket <prefix>-<number>
        return ["--IPController.transport=ipc", f"--IPController.engine_ip={prefix}",
                f"--IPController.client_ip={prefix}", f"--IPController.monitor_ip={prefix}"]

    def _sweep_if_we_die(self, cluster: Any) -> None:
        """Tell the watchdog what this pool leaves on disk if the notebook dies without stopping
        it: its folders, ipyparallel's connection and log files, and the shared-memory files of
        data moves (see mpinb.common._shared_memory)."""
        from ..common._shared_memory import SHARED_MEMORY

        security = os.path.join(cluster.profile_dir, "security")
        self._tell_watchdog("sweep", self.run_folder or "", self.stacks_folder or "",
                            os.path.join(security, f"*{cluster.cluster_id}*"),
                            os.path.join(cluster.profile_dir, "log", f"*{cluster.cluster_id}*"),
                            os.path.join(SHARED_MEMORY, f"mpinb-{os.getpid()}-*"))

    def _tell_watchdog(self, command: str, *args: str) -> None:
        assert self._watchdog is not None and self._watchdog.stdin is not None
        self._watchdog.stdin.write("".join(f"{command} {arg}\n" for arg in args if arg))
        self._watchdog.stdin.flush()

    def _wait_for_ranks(self) -> None:
        n = self.settings.n
        deadline = time.monotonic() + self.start_timeout
        next_job_check = time.monotonic() + 1.0  # squeue is a command: once a second is enough
        while len(self.client.ids) < n:
            problem = self.dead_process()
            if not problem and time.monotonic() > next_job_check:
                problem, next_job_check = self._failed_batch_job(), time.monotonic() + 1.0
            if problem:
                raise PoolStartError(problem)
            if time.monotonic() > deadline:
                raise PoolStartError(
                    f"only {len(self.client.ids)} of {n} ranks came up within {self.start_timeout:g} s."
                )
            time.sleep(_POLL)
        hello: list[Hello] = self.client[:].apply_async(_rank.hello).get(timeout=self.start_timeout)
        for engine_id, info in zip(self.client.ids, hello):
            if not info["ready"]:
                why = info["failure"] or "see its log below."
                raise PoolStartError(f"rank {info['rank']} did not initialise: {why}")
            if info["size"] != n:
                interface = _slurm.SLURM_MPI_TYPES.get(mpi_family_in(info["mpi"]) or "", "pmi2")
                raise PoolStartError(
                    f"the ranks are not one MPI world: engine {engine_id} has a world of size "
                    f"{info['size']}, expected {n}. The launcher started separate processes instead of "
                    f"one MPI job: under Slurm, {info['mpi'].split(',')[0]} needs srun --mpi={interface} "
                    f"(SLURM_MPI_TYPE={interface}), which this Slurm must support (srun --mpi=list)."
                )
            self.engine_of[info["rank"]] = engine_id
            self.ranks_info[info["rank"]] = info
        if self.settings.on_this_host:
            self._check_hosts()
            self._local = RankProcesses({rank: info["pid"] for rank, info in self.ranks_info.items()})
        if self.deaths is not None:
            self.deaths.watch_pids({rank: info["pid"] for rank, info in self.ranks_info.items()})
        if self.settings.on_this_host:
            ranks = [info["pid"] for info in self.ranks_info.values()]
            # segments in the ranks' maps; the launcher's files open in their parents (hydra_pmi_proxy)
            self._mpi_files |= mpi_segments(ranks) | launcher_files({_parent(pid) for pid in ranks})
            # also when the ranks and their launcher are gone before the notebook dies
            self._tell_watchdog("sweep", *sorted(path for path, _ in self._mpi_files))
        self._open_relay()

    def _check_hosts(self) -> None:
        """Ranks taken to run here must: their processes are signalled, watched and swept here."""
        here = this_host_names()
        away = {rank: info["host"] for rank, info in self.ranks_info.items() if info["host"] not in here}
        if away:
            places = ", ".join(f"{format_ranks([rank], word=True)} on {host}" for rank, host in sorted(away.items()))
            raise PoolStartError(
                f"{places}, not on this host ({socket.gethostname()}), though nothing told mpinb that mpiexec "
                "would start ranks elsewhere (its arguments name no host, nor do $HYDRA_HOST_FILE, Open MPI's "
                "default hostfile or a batch allocation). Name the hosts (--hosts a,b or --hostfile FILE; "
                "Pool(mpiexec_args=[...])) so that the pool runs as one across hosts."
            )

    def _open_relay(self) -> None:
        """Rank 0 opens the relay of runs and every other rank follows it (see mpinb.rank._relay)."""
        n = self.settings.n
        if n == 1:
            return
        if self.private_sockets:
            assert self.run_folder is not None
            where = "ipc://" + os.path.join(self.run_folder, "relay")
        elif self.settings.on_this_host:
            where = "127.0.0.1"
        else:
            where = self.controller_ip if self.controller_ip not in (None, "*") else controller_location()
        # Without ipyparallel's session key (CurveZMQ encrypts its channel instead), the relay's
        # key travels through that encrypted channel; otherwise the ranks derive theirs from it.
        key = None if self.client.session.key else secrets.token_bytes(32)
        hub_keys, member_keys = relay_keys() if self.settings.encrypted else (None, None)
        leader = self.client[self.engine_of[0]]
        addresses = leader.apply_async(_rank.open_hub, where, key, hub_keys).get(timeout=self.start_timeout)
        others = list(range(1, n))
        self.view(others).apply_async(_rank.join, addresses, key, member_keys).get(timeout=self.start_timeout)
        joined = leader.apply_async(_rank.hub_ready, others, RELAY_JOIN_TIMEOUT).get(
            timeout=RELAY_JOIN_TIMEOUT + self.start_timeout)
        if len(joined) < n - 1:
            missing = format_ranks(sorted(set(others) - set(joined)), word=True)
            raise PoolStartError(
                f"{missing} could not reach rank 0 at {addresses[0]} within {RELAY_JOIN_TIMEOUT:g} s "
                "(rank 0 relays each run to the others): a firewall between the hosts, or a name that "
                "resolves differently on them? Pool(controller_ip=...) sets the address to use."
            )
        self.route.relaying = True

    def dead_process(self) -> str | None:
        """Why the controller or the MPI job is gone, if one of them is."""
        cluster = self.cluster
        if cluster.controller is not None and _has_exited(cluster.controller):
            return "the ipyparallel controller exited during start-up."
        for engine_set in cluster.engines.values():
            if _has_exited(engine_set):
                return "the MPI launcher exited before all ranks came up."
        return None

    def _failed_batch_job(self) -> str | None:
        for engine_set in self.cluster.engines.values():
            failure = _slurm.why_it_failed(engine_set)
            if failure:
                return failure
        return None

    def _startup_report(self, err: BaseException) -> str:
        """Why start-up failed, with the launcher's own output, which usually says it all."""
        text = str(err) if isinstance(err, PoolStartError) else f"{type(err).__name__}: {err}"
        output = ""
        for _ in range(10):  # the launcher's log can lag its exit by a moment
            if self.cluster is not None:
                output = self.launcher_output().strip()
            if output:
                break
            time.sleep(0.1)
        if output:
            tail = "\n".join(output.splitlines()[-30:])
            text += f"\n\nOutput of the MPI launcher:\n{tail}"
        if self.settings.on_this_host:
            text += (
                f"\n\nCheck that `{find_mpiexec(self.settings.mpiexec)} -n {self.settings.n} "
                f"{sys.executable} -c 'from mpi4py import MPI'` works in a terminal."
            )
        return text

    # -- supervision --------------------------------------------------------------------------

    def _start_watchdog(self) -> None:
        self._watchdog = subprocess.Popen(
            [sys.executable, os.path.join(_HERE, "_watchdog.py")],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the kernel's interrupt goes to its process group, not here
        )

    def _watch(self, launcher: Any) -> None:
        """Record a launched process tree, and tell the watchdog to end it if we die."""
        pid = getattr(launcher, "pid", -1)
        if pid is None or pid <= 0:
            return
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            return
        self._processes.append(proc)
        self._tell_watchdog("watch", str(pid))

    def launcher_output(self) -> str:
        return "".join(_launcher_output(es) for es in self.cluster.engines.values())

    def first_dead(self) -> list[int]:
        """The rank seen gone first, or the ranks whose heart stopped answering (a process
        stopped by a signal, say)."""
        if self.deaths is not None:
            return self.deaths.first() or self.unregistered(sorted(self.engine_of))
        return self._remote_dead()

    def answer_within(self, alone: float = 1.0) -> float:
        """How long to wait for a rank's answer on the control channel: ``alone`` seconds, and
        longer where ranks crowd the cores (64 ranks spinning in MPI on 2 cores answered within
        0.8 s when nothing else ran; a rank that holds Python's lock never answers)."""
        per_host = collections.Counter(info["host"] for info in self.ranks_info.values())
        crowding = max(per_host.values(), default=0) / (os.cpu_count() or 1)
        return alone * max(1.0, 1.0 + 0.1 * crowding)

    def gone(self) -> list[int]:
        """The ranks seen gone first (as ``first_dead``), waiting out the moment that may name
        more, or every rank the controller let go; none if no rank is gone."""
        if not self.first_dead() and not self.unregistered(sorted(self.engine_of)):
            return []
        deadline = time.monotonic() + _SAME_BEAT_S + 0.1
        while not (dead := self.first_dead()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return dead or self.unregistered(sorted(self.engine_of))

    def _note_unregistrations_in_order(self) -> None:
        handlers = self.client._notification_handlers
        unregister = handlers["unregistration_notification"]

        def noted(msg: dict) -> None:
            content = msg["content"]
            self._unregistrations.append(Unregistration(int(content["id"]), bool(content.get("heart_stopped")),
                                                        time.monotonic()))
            unregister(msg)

        handlers["unregistration_notification"] = noted

    def _remote_dead(self) -> list[int]:
        """Ranks on other hosts have no death watch: a rank whose heart stopped (the controller
        unregistered it), or a batch job that ended (srun ends the job's step when a task dies).
        Asked once a second: the job's state is a command."""
        if not self._gone_first:
            self._gone_first = self._first_gone()
        if self._gone_first:
            return self._gone_first
        now = time.monotonic()
        if now < self._next_remote_check:
            return []
        self._next_remote_check = now + 1.0
        if any(_has_exited(es) or _slurm.job_ended(es) for es in self.cluster.engines.values()):
            return sorted(self.engine_of)
        return []

    def _first_gone(self) -> list[int]:
        """The ranks whose processes were seen to end first (one, unless others ended within
        ``_TOGETHER_S``: the launcher ends the rest a moment later, and MPI may end a peer of the
        lost rank first, so which of them went first cannot be told from here), or every rank
        whose heart stopped in the same beat (a host cut off, or stopped)."""
        self.client.ids  # noqa: B018 - reading the ids takes in the controller's notifications
        if not self._unregistrations:  # the common case, asked at every poll of a run
            return []
        rank_of = {engine: rank for rank, engine in self.engine_of.items()}
        gone = [seen for seen in self._unregistrations if seen.engine in rank_of]
        if not gone:
            return []
        first = gone[0]
        window = _SAME_BEAT_S if first.heart_stopped else _TOGETHER_S
        if time.monotonic() < first.seen + window:
            return []
        return sorted({rank_of[seen.engine] for seen in gone
                       if seen.heart_stopped == first.heart_stopped and seen.seen <= first.seen + window})

    def unregistered(self, ranks: list[int]) -> list[int]:
        """Those of ``ranks`` whose engine the controller no longer knows (its heart stopped, or
        its nanny saw it die)."""
        registered = set(self.client.ids)
        return [rank for rank in ranks if self.engine_of[rank] not in registered]

    def interrupt(self, ranks: list[int]) -> None:
        """SIGINT to the ranks (a KeyboardInterrupt in the user code they run)."""
        self.signal(ranks, signal.SIGINT)

    def ask_for_stacks(self, ranks: list[int]) -> None:
        """Make the ranks write their stacks (see mpinb.rank._after_abort.write_stack_on_request)."""
        self.signal(ranks, getattr(signal, STACK_SIGNAL))

    def signal(self, ranks: list[int], signum: int) -> None:
        """A signal to the ranks: directly when on this host, through the engines' nannies elsewhere."""
        if self.settings.on_this_host:
            self._local.signal(ranks, signum)
        else:
            self.client.send_signal(int(signum), targets=self.engines(ranks), block=False)

    def engines(self, ranks: list[int]) -> list[int]:
        return [self.engine_of[r] for r in ranks]

    def view(self, ranks: list[int]) -> Any:
        """An ipyparallel direct view on these ranks."""
        return self.client.direct_view(self.engines(ranks))

    # -- shutdown -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the ranks and the controller; sweep any process that outlived them."""
        client, cluster = self.client, self.cluster
        self.client = self.cluster = None
        if self.deaths is not None:
            self.deaths.close()
            self.deaths = None
        if self.settings.on_this_host and cluster is not None and len(self.ranks_info) < self.settings.n:
            self._end_a_start_broken_off(cluster)
        if self.settings.on_this_host:
            # the ranks' segments, and those of processes they spawned (MPI.COMM_SELF.Spawn), read
            # before any of them is told to end (the launcher then ends the spawned ones itself)
            self._mpi_files |= mpi_segments({*(info["pid"] for info in self.ranks_info.values()),
                                             *(proc.pid for proc in process_trees(self._processes))})
            # a pull broken off by an interrupt may have left a rank's file behind
            remove_written_by([info["pid"] for info in self.ranks_info.values()])
            # Each rank exits at SIGTERM (see rank/_engine_main.py). mpiexec would pass it on, or
            # not: Open MPI's forwards the launcher's SIGINT and leaves the ranks to their fate.
            self._local.signal(list(self.ranks_info), signal.SIGTERM)
        self._local.close()
        self.engine_of.clear()
        self.ranks_info.clear()
        tree = process_trees(self._processes)
        sessions = launcher_sessions(proc.pid for proc in tree) | self._launcher_sessions
        self._launcher_sessions = set()
        if client is not None:
            client.close()
        if cluster is not None:
            _stop_cluster(cluster)
        known = {proc.pid for proc in tree}
        tree += [proc for proc in process_trees(self._processes) if proc.pid not in known]
        end_processes(tree, grace=1.0, ask_first=False)  # stopping the cluster asked them
        self._processes.clear()
        remove_files(self._mpi_files)
        remove_folders(sessions)  # (an mpiexec that ended in order removed its own)
        self._mpi_files = set()
        for folder in (self.stacks_folder, self.run_folder):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self.stacks_folder = self.run_folder = None
        self._release_watchdog()

    def _end_a_start_broken_off(self, cluster: Any) -> None:
        """Kill the ranks of a start broken off (a timeout, a rank that died), frozen first.

        Ranks still in MPI_Init make MPI's files: Intel MPI's segment is unlinked once every rank
        has mapped it, so a maker ended first leaves it, and a read of its maps may come just
        before it makes it (beside a busy process, 2 starts in 6 broken off at once left one).
        Frozen, the processes make nothing more while their maps and open files are read."""
        controller = getattr(cluster.controller, "pid", None)
        frozen: list[psutil.Process] = []
        try:
            frozen = freeze_trees([proc for proc in self._processes if proc.pid != controller])
            pids = [proc.pid for proc in frozen]
            self._mpi_files |= mpi_files(pids)
            # (Open MPI's launcher's session folder is named after its pid, which shutdown no longer sees)
            self._launcher_sessions |= launcher_sessions(pids)
        finally:  # (none stays frozen, whatever interrupts the reading)
            kill(frozen)

    def _release_watchdog(self) -> None:
        if self._watchdog is None:
            return
        try:
            assert self._watchdog.stdin is not None
            self._watchdog.stdin.write("release\n")
            self._watchdog.stdin.close()
        except OSError:
            pass
        try:
            self._watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._watchdog.kill()
        self._watchdog = None


def _stop_cluster(cluster: Any) -> None:
    for launcher in [cluster.controller, *cluster.engines.values()]:
        if launcher is not None and getattr(launcher, "stop_seconds_until_kill", None):
            launcher.stop_seconds_until_kill = 1
    jobs = _slurm.jobs(cluster)
    try:
        cluster.stop_cluster_sync()
    except Exception:  # noqa: BLE001 - the process sweep still runs
        pass
    _slurm.wait_until_gone(jobs)
    _remove_leftover_files(cluster)


def _private_folder(path: str) -> str:
    """``path``, made with its parents, readable by this user only (0700)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _launcher_config_name(launcher: str) -> str:
    from ipyparallel.cluster.launcher import find_launcher_class

    return find_launcher_class(launcher, "engine").__name__


def _parent(pid: int) -> int:
    """The parent's pid (0 if the process is gone)."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return 0


def _has_exited(launcher: Any) -> bool:
    """Whether a launched process is gone (ipyparallel only learns it while its loop runs)."""
    proc = getattr(launcher, "process", None)
    if isinstance(proc, psutil.Process):
        try:
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    return launcher.state == "after"


def _remove_leftover_files(cluster: Any) -> None:
    """The controller's engine-state file and the launchers' logs: ipyparallel leaves them in
    the profile's log folder after every cluster (hundreds after a day of restarts)."""
    pattern = os.path.join(cluster.profile_dir, "log", f"*{cluster.cluster_id}*")
    for path in glob.glob(pattern):
        try:
            os.remove(path)
        except OSError:
            pass


def _launcher_output(launcher: Any) -> str:
    """What the launcher printed: its log file, or ipyparallel's copy once it noticed the exit."""
    try:
        with open(getattr(launcher, "output_file", ""), errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    if not text and launcher.state == "after":
        text = launcher.get_output(remove=False) or ""
    return text
