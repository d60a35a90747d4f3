"""The engine pool: MPI ranks that stay alive between cells, driven through ipyparallel."""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import weakref
from typing import Iterable, Mapping, Sequence

import psutil

from . import _slurm
from . import rank as _rank
from ._deathwatch import ENVIRONMENT as DEATHWATCH_ENVIRONMENT
from ._deathwatch import DeathWatch
from ._ranges import format_ranks, parse_ranks
from ._streams import OutputCallback, StreamTracker
from ._values import unpack
from .errors import DeadlockError, MPIHangError, PoolError, PoolStartError, RankDiedError
from .hang import HangWatch, death_report
from .launch import (
    ALLOCATION_LAUNCHER,
    LaunchSettings,
    allocation_srun,
    find_mpiexec,
    rank_environment,
    slurm_job_files,
)
from .result import RankFailure, RunResult
from .trace import Trace

# How long ranks get to come back after an interrupt before the caller gets control anyway.
INTERRUPT_GRACE = 2.0
# After one rank failed, how long the others get to finish before they are interrupted.
RELEASE_AFTER = 0.3
RESET_TIMEOUT = 10.0
_POLL = 0.01
_HEARTBEAT_MS = 1000  # once the ranks are up; start-up beats faster (see _controller_main.py)
_cell_numbers = itertools.count(1)
_live_pools: "weakref.WeakSet[Pool]" = weakref.WeakSet()


class Pool:
    """A set of MPI ranks (one process each) that keep their state between runs.

    ``Pool(4)`` starts nothing; :meth:`start` returns when every rank is ready. Use it as a
    context manager to be sure the ranks stop::

        with mpinb.Pool(4) as pool:
            pool.run("print(rank, size)")
    """

    def __init__(
        self,
        n: int | None = None,
        *,
        launcher: str = "mpi",
        mpiexec: str | None = None,
        mpiexec_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        yield_when_idle: bool | None = None,
        start_timeout: float = 60.0,
        max_output_lines: int = 10_000,
        max_output_chars: int = 1_000_000,
        trace_capacity: int = 100_000,
        controller_ip: str | None = None,
        launcher_options: Mapping[str, object] | None = None,
    ):
        if n is None:
            n = default_size()
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be a whole number of ranks, not {n!r}")
        if n < 1:
            raise ValueError(f"n must be at least 1 rank, got {n}")
        if isinstance(mpiexec_args, str):
            raise TypeError("mpiexec_args must be a list of arguments, e.g. ['-f', 'hosts.txt']")
        self.settings = LaunchSettings(
            n=n,
            launcher=launcher,
            mpiexec=mpiexec,
            mpiexec_args=list(mpiexec_args),
            env=dict(env or {}),
            yield_when_idle=yield_when_idle,
            launcher_options=dict(launcher_options or {}),
        )
        self.start_timeout = start_timeout
        self.max_output_lines = max_output_lines
        self.max_output_chars = max_output_chars
        self.trace_capacity = trace_capacity
        self.controller_ip = controller_ip
        self.last_result: RunResult | None = None
        self._cluster = None
        self._client = None
        self._engine_of: dict[int, int] = {}
        self._ranks_info: dict[int, dict] = {}
        self._watchdog: subprocess.Popen | None = None
        self._processes: list[psutil.Process] = []
        self._deaths: DeathWatch | None = None

    # -- life cycle ---------------------------------------------------------------------------

    def options(self) -> dict:
        """The keyword arguments that make a pool like this one (``Pool(pool.size, **pool.options())``)."""
        settings = self.settings
        return {
            "launcher": settings.launcher, "mpiexec": settings.mpiexec,
            "mpiexec_args": list(settings.mpiexec_args), "env": dict(settings.env),
            "yield_when_idle": settings.yield_when_idle, "start_timeout": self.start_timeout,
            "max_output_lines": self.max_output_lines, "max_output_chars": self.max_output_chars,
            "trace_capacity": self.trace_capacity, "controller_ip": self.controller_ip,
            "launcher_options": dict(settings.launcher_options),
        }

    @property
    def size(self) -> int:
        return self.settings.n

    @property
    def running(self) -> bool:
        return self._client is not None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<mpinb.Pool {self.size} ranks, {state}>"

    def __enter__(self) -> Pool:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> Pool:
        """Launch the controller and the ranks; return once every rank answers."""
        if self.running:
            return self
        import ipyparallel as ipp

        settings = self.settings
        engine_args = [
            "--IPEngine.startup_command=__import__('mpinb.rank').rank.init()",
            "--IPEngine.enable_nanny=" + ("False" if settings.local else "True"),
            f"--IPEngine.wait_for_url_file={self.start_timeout}",
            "--log-level=WARN",
        ]
        cluster_kw: dict = {}
        if settings.local:
            mpiexec = find_mpiexec(settings.mpiexec)
            launcher_class = "mpi"
        elif settings.launcher == ALLOCATION_LAUNCHER:
            mpiexec = allocation_srun()
            launcher_class = "mpi"
        else:
            mpiexec = None
            launcher_class = settings.launcher
        if not settings.local:
            # Ranks elsewhere must reach the controller: listen on every interface and tell them
            # this host's name; ipyparallel signs every message with the session key.
            engine_args.append("--mpi")  # engine id = MPI rank, as with the local launcher
            cluster_kw["controller_ip"] = "*"
            cluster_kw["controller_location"] = socket.getfqdn()
        if self.controller_ip:
            cluster_kw["controller_ip"] = self.controller_ip
        cluster = ipp.Cluster(
            engines=launcher_class,
            n=settings.n,
            profile="mpinb",
            cluster_id=f"mpinb-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            controller_args=[
                f"--HeartMonitor.period={_HEARTBEAT_MS}",
                "--IPController.broadcast_scheduler_depth=0",  # we use direct views only
                "--log-level=WARN",
            ],
            # Local engines find the connection file themselves, so they can start (and spend
            # their import time) while the controller is still coming up.
            send_engines_connection_env=not settings.local,
            engine_timeout=int(self.start_timeout),
            log_level=40,
            **cluster_kw,
        )
        if mpiexec:
            cluster.config.MPIEngineSetLauncher.mpi_cmd = [mpiexec]
            cluster.config.MPIEngineSetLauncher.mpi_args = list(settings.mpiexec_args)
        # Our controller entry beats fast until every rank has registered (see its docstring).
        controller = cluster.config.LocalControllerLauncher
        controller.controller_cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "_controller_main.py")]
        controller.environment = {"MPINB_EXPECTED_HEARTS": str(settings.n)}
        engine_main = os.path.join(os.path.dirname(__file__), "rank", "_engine_main.py")
        cluster.config[_launcher_config_name(launcher_class)].engine_cmd = [sys.executable, engine_main]
        launcher_config = cluster.config[_launcher_config_name(launcher_class)]
        if launcher_class == "slurm":
            log_dir = os.path.join(cluster.profile_dir, "log")
            for key, value in slurm_job_files(log_dir, cluster.cluster_id, settings.launcher_options).items():
                launcher_config[key] = value
        for key, value in settings.launcher_options.items():
            launcher_config[key] = value
        self._cluster = cluster
        self._start_watchdog()
        environment = rank_environment(settings)
        if settings.local:  # local ranks report for duty to it when they start (see _deathwatch)
            self._deaths = DeathWatch()
            environment[DEATHWATCH_ENVIRONMENT] = self._deaths.address
        try:
            cluster.start_controller_sync()
            self._watch(cluster.controller)
            cluster.start_engines_sync(settings.n, engine_args=engine_args, environment=environment)
            for engine_set in cluster.engines.values():
                self._watch(engine_set)
            self._client = cluster.connect_client_sync()
            self._wait_for_ranks()
        except KeyboardInterrupt:
            self._shutdown()
            raise
        except Exception as err:
            message = self._startup_report(err)
            self._shutdown()
            raise PoolStartError(message) from (None if isinstance(err, PoolStartError) else err)
        _live_pools.add(self)
        return self

    def stop(self) -> None:
        """Stop every rank and the controller; no process is left behind."""
        _live_pools.discard(self)
        self._shutdown()

    def restart(self, n: int | None = None) -> Pool:
        """Stop, then start again (with ``n`` ranks if given). The ranks' variables are lost."""
        self.stop()
        if n is not None:
            if n < 1:
                raise ValueError(f"n must be at least 1 rank, got {n}")
            self.settings.n = n
        return self.start()

    def _wait_for_ranks(self) -> None:
        n = self.settings.n
        deadline = time.monotonic() + self.start_timeout
        next_job_check = time.monotonic() + 1.0  # squeue is a command: once a second is enough
        while len(self._client.ids) < n:
            problem = self._dead_process()
            if not problem and time.monotonic() > next_job_check:
                problem, next_job_check = self._failed_batch_job(), time.monotonic() + 1.0
            if problem:
                raise PoolStartError(problem)
            if time.monotonic() > deadline:
                raise PoolStartError(
                    f"only {len(self._client.ids)} of {n} ranks came up within {self.start_timeout:g} s."
                )
            time.sleep(_POLL)
        hello = self._client[:].apply_async(_rank.hello).get(timeout=self.start_timeout)
        for engine_id, info in zip(self._client.ids, hello):
            if not info["ready"]:
                raise PoolStartError(f"rank {info['rank']} did not initialise: {info['failure'] or 'see its log below.'}")
            if info["size"] != n:
                raise PoolStartError(
                    f"the ranks are not one MPI world: engine {engine_id} has a world of size "
                    f"{info['size']}, expected {n}. The launcher started separate "
                    "processes instead of one MPI job (for Slurm, use srun --mpi=pmi2)."
                )
            self._engine_of[info["rank"]] = engine_id
            self._ranks_info[info["rank"]] = info
        if self._deaths is not None:
            self._deaths.watch_pids({rank: info["pid"] for rank, info in self._ranks_info.items()})

    def _dead_process(self) -> str | None:
        cluster = self._cluster
        if cluster.controller is not None and _has_exited(cluster.controller):
            return "the ipyparallel controller exited during start-up."
        for engine_set in cluster.engines.values():
            if _has_exited(engine_set):
                return "the MPI launcher exited before all ranks came up."
        return None

    def _failed_batch_job(self) -> str | None:
        for engine_set in self._cluster.engines.values():
            failure = _slurm.why_it_failed(engine_set)
            if failure:
                return failure
        return None

    def _startup_report(self, err: BaseException) -> str:
        """Why start-up failed, with the launcher's own output, which usually says it all."""
        text = str(err) if isinstance(err, PoolStartError) else f"{type(err).__name__}: {err}"
        output = ""
        for _ in range(10):  # the launcher's log can lag its exit by a moment
            if self._cluster is not None:
                output = "".join(_launcher_output(es) for es in self._cluster.engines.values()).strip()
            if output:
                break
            time.sleep(0.1)
        if output:
            tail = "\n".join(output.splitlines()[-30:])
            text += f"\n\nOutput of the MPI launcher:\n{tail}"
        if self.settings.local:
            text += (
                f"\n\nCheck that `{find_mpiexec(self.settings.mpiexec)} -n {self.settings.n} "
                f"{sys.executable} -c 'from mpi4py import MPI'` works in a terminal."
            )
        return text

    def _start_watchdog(self) -> None:
        self._watchdog = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "_watchdog.py")],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the kernel's interrupt goes to its process group, not here
        )

    def _watch(self, launcher) -> None:
        """Record a launched process tree, and tell the watchdog to end it if we die."""
        pid = getattr(launcher, "pid", -1)
        if pid is None or pid <= 0:
            return
        try:
            proc = psutil.Process(pid)
        except psutil.Error:
            return
        self._processes.append(proc)
        self._watchdog.stdin.write(f"watch {pid}\n")
        self._watchdog.stdin.flush()

    def _shutdown(self) -> None:
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if self._deaths is not None:
            self._deaths.close()
            self._deaths = None
        self._engine_of.clear()
        self._ranks_info.clear()
        tree = []
        for proc in self._processes:
            try:
                tree += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                pass
        if client is not None:
            client.close()
        if cluster is not None:
            for launcher in [cluster.controller, *cluster.engines.values()]:
                if launcher is not None and getattr(launcher, "stop_seconds_until_kill", None):
                    launcher.stop_seconds_until_kill = 1
            jobs = _slurm.jobs(cluster)
            try:
                cluster.stop_cluster_sync()
            except Exception:  # noqa: BLE001 - the process sweep below still runs
                pass
            _slurm.wait_until_gone(jobs)
            _remove_leftover_files(cluster)
        _, alive = psutil.wait_procs(tree, timeout=1.0)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=1.0)
        self._processes.clear()
        if self._watchdog is not None:
            try:
                self._watchdog.stdin.write("release\n")
                self._watchdog.stdin.close()
            except OSError:
                pass
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
            self._watchdog = None

    # -- running code -------------------------------------------------------------------------

    def ranks(self, targets: object = None) -> list[int]:
        """The ranks a targets spec selects (``None`` = all; ``"0,2-3"``, a list, a range, an int)."""
        return parse_ranks(targets, self.size)

    def run(
        self,
        code: str,
        targets: object = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        check: bool = True,
        trace: bool = True,
    ) -> RunResult:
        """Run ``code`` on the ranks; the value of its last expression comes back per rank.

        With ``trace`` (the default) every MPI call the code makes is recorded into
        ``result.trace``; ``trace=False`` runs the plain mpi4py objects, at no cost.

        Raises ``SyntaxError`` once (not once per rank) for code that does not compile,
        :class:`RankError` when user code raised on any rank (``check=False`` returns the
        result instead), ``TimeoutError`` when ``timeout`` seconds pass (the ranks are
        interrupted first). The pool stays usable after each of them.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a string of Python source, not {type(code).__name__}")
        filename = f"<mpi-cell-{next(_cell_numbers)}>"
        compile(code, filename, "exec")  # one clear SyntaxError here instead of one per rank
        args = (code, filename, self._limits(trace))
        return self._execute(_rank.run_cell, args, targets, timeout, on_output, check)

    def run_file(
        self,
        path: str | os.PathLike,
        args: Iterable[object] = (),
        stdin: str | bytes | None = None,
        targets: object = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        check: bool = True,
        trace: bool = True,
    ) -> RunResult:
        """Run an existing MPI script unchanged, as ``mpiexec -n N python path args`` would.

        ``__name__ == "__main__"``, ``sys.argv``, the working directory and ``stdin`` (given to rank
        0) are what ``mpiexec`` gives; ``sys.exit(0)`` is success.
        """
        path = os.path.abspath(os.fspath(path))
        if not os.path.exists(path):
            raise FileNotFoundError(f"no script at {path}: check the name and the working directory ({os.getcwd()})")
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a folder; give the path of a .py script")
        if isinstance(stdin, bytes):
            stdin = stdin.decode()
        argv = [str(arg) for arg in args] if not isinstance(args, str) else args.split()
        call = (path, argv, stdin, os.getcwd(), self._limits(trace))
        return self._execute(_rank.run_file, call, targets, timeout, on_output, check)

    def _limits(self, trace: bool) -> dict:
        return {"max_lines": self.max_output_lines, "max_chars": self.max_output_chars,
                "trace": bool(trace), "trace_capacity": self.trace_capacity}

    def interrupt(self, targets: object = None) -> None:
        """Send SIGINT to the ranks (a ``KeyboardInterrupt`` in the code they are running)."""
        self._require_running()
        ranks = self.ranks(targets)
        if self.settings.local:
            for rank in ranks:
                try:
                    os.kill(self._ranks_info[rank]["pid"], signal.SIGINT)
                except ProcessLookupError:
                    pass
        else:
            engines = [self._engine_of[r] for r in ranks]
            self._client.send_signal(signal.SIGINT, targets=engines, block=False)

    def _execute(self, func, args, targets, timeout, on_output, check) -> RunResult:
        self._require_running()
        ranks = self.ranks(targets)
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        view = self._client.direct_view([self._engine_of[r] for r in ranks])
        started = time.perf_counter()
        pending = view.apply_async(func, *args)
        tracker = StreamTracker(pending, ranks)
        watch = HangWatch(ranks, idle=[r for r in range(self.size) if r not in ranks])
        stop_reason, released, first_failure, replies_seen, dead = None, [], None, {}, []
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not pending.ready():
                pending.wait(_POLL * 5)
                tracker.poll(on_output)
                if pending.ready():
                    break
                # Any rank's death ends the MPI job, targeted by this run or not.
                dead = self._deaths.first() if self._deaths is not None else []
                if dead:
                    stop_reason = "died"
                    break
                done = _per_message_done(self._client, pending)
                news = watch.update(pending.data, done)
                if news is not None and on_output is not None:
                    on_output(ranks[0], "hang", news.text())
                if first_failure is None and self._any_failed(pending, done, replies_seen):
                    first_failure = time.monotonic()
                elif first_failure and not released and time.monotonic() - first_failure > RELEASE_AFTER:
                    # mpi4py's own runner aborts every rank when one fails; we interrupt the rest
                    # (they are usually waiting for the failed one) and keep the pool.
                    released = [r for r, finished in zip(ranks, done) if not finished]
                    self.interrupt(released)
                if deadline is not None and time.monotonic() > deadline:
                    stop_reason = "timeout"
                    break
        except KeyboardInterrupt:
            stop_reason = "interrupt"
        if stop_reason == "died":
            raise self._after_death(dead)
        if stop_reason:
            self.interrupt(ranks)
            pending.wait(INTERRUPT_GRACE)
        pending.wait_for_output(0.5 if pending.ready() else 0)
        tracker.poll(on_output)
        result = self._collect(pending, ranks, time.perf_counter() - started)
        result.released = released
        self.last_result = result
        if stop_reason or released:
            self._fresh_world()
        if stop_reason:
            raise self._stopped(stop_reason, timeout, pending, ranks, watch.diagnosis)
        if check:
            result.raise_for_errors()
        return result

    def _any_failed(self, pending, done: list[bool], seen: dict) -> bool:
        """Whether a finished rank's reply carries an error (each reply is fetched once)."""
        for msg_id, finished in zip(pending.msg_ids, done):
            if not finished or msg_id in seen:
                continue
            try:
                seen[msg_id] = reply = self._client.get_result(msg_id).get(timeout=1)
            except Exception as err:  # noqa: BLE001 - the request itself failed
                seen[msg_id] = reply = err
            if isinstance(reply, BaseException) or (isinstance(reply, dict) and reply.get("error")):
                return True
        return False

    def _stopped(self, reason: str, timeout, pending, ranks: list[int], diagnosis) -> BaseException:
        what = "was interrupted" if reason == "interrupt" else f"did not finish within {timeout:g} s"
        text = self._stopped_message(what, pending, ranks)
        if diagnosis is not None:
            error = DeadlockError if diagnosis.deadlock else MPIHangError
            hang = error(text, diagnosis)
            if reason == "interrupt":
                return KeyboardInterrupt(str(hang))
            return hang
        return KeyboardInterrupt(text) if reason == "interrupt" else TimeoutError(text)

    def _fresh_world(self) -> None:
        """After an aborted run, every rank moves to a new world so that no message the run left
        in flight can reach a later receive."""
        try:
            self._client[:].apply_async(_rank.reset).get(timeout=RESET_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - say what happened; the pool may need a restart
            raise PoolError(
                "the ranks could not start a fresh MPI world after the aborted run "
                f"({type(err).__name__}: {err}); run `%mpi restart` (Pool.restart())"
            ) from None

    def _after_death(self, dead: list[int]) -> RankDiedError:
        """Name the rank that died and how, then restart the pool (MPI cannot go on without it)."""
        deadline = time.monotonic() + 3  # the launcher reports once it has cleaned up
        while time.monotonic() < deadline and not self._dead_process():
            time.sleep(0.05)
        output = "".join(_launcher_output(es) for es in self._cluster.engines.values())
        by_pid = {info["pid"]: rank for rank, info in self._ranks_info.items()}
        aborted = self._deaths.aborted if self._deaths is not None else {}
        if len(aborted) == 1:
            (rank, code), = aborted.items()
            what = f"rank {rank} called Abort({code}) while running the cell, which ends every rank"
        else:
            what = f"{death_report(output, by_pid, dead)} while running the cell. MPI cannot continue without it"
        size = self.size
        self.restart()
        return RankDiedError(f"{what}, so the pool was restarted with {size} fresh ranks: every rank's "
                             "variables are lost.")

    def _stopped_message(self, what: str, pending, ranks: list[int]) -> str:
        busy = [r for r, done in zip(ranks, _per_message_done(self._client, pending)) if not done]
        text = f"the run {what}; the ranks were sent an interrupt."
        if busy:
            text += (
                f" {format_ranks(busy, word=True)} did not stop within {INTERRUPT_GRACE:g} s "
                "(blocked inside MPI outside mpinb's reach?): the pool stays busy until they return; "
                "`%mpi restart` (Pool.restart()) starts afresh."
            )
        return text

    def _collect(self, pending, ranks: list[int], elapsed: float) -> RunResult:
        result = RunResult(ranks=list(ranks), elapsed=elapsed)
        replies = _replies(self._client, pending)
        recorded = {r: reply["trace"] for r, reply in zip(ranks, replies)
                    if isinstance(reply, dict) and reply.get("trace") is not None}
        if recorded:
            result.trace = Trace(recorded, world_size=self.size)
        for rank, reply, out, err, outputs in zip(
            ranks, replies, pending.stdout, pending.stderr, pending.outputs
        ):
            result.stdout[rank] = out or ""
            result.stderr[rank] = err or ""
            result.outputs[rank] = [
                {"data": b.get("data", {}), "metadata": b.get("metadata", {})} for b in outputs
            ]
            if isinstance(reply, dict):
                if reply["error"]:
                    result.errors[rank] = RankFailure(**reply["error"])
                if reply["has_value"]:
                    result.value[rank] = unpack(reply["value"], reply["repr"], reply["why"])
                    result.value_repr[rank] = reply["repr"]
                else:
                    result.value[rank] = None
                if reply["dropped_lines"]:
                    result.dropped_lines[rank] = reply["dropped_lines"]
            elif isinstance(reply, BaseException):
                result.value[rank] = None
                result.errors[rank] = _failure_from_remote(reply)
            else:  # still running after an interrupt
                result.value[rank] = None
        return result

    def _require_running(self) -> None:
        if not self.running:
            raise PoolError("the pool is not running: call pool.start() (or `%mpi start`) first")

    # -- moving data --------------------------------------------------------------------------

    def push(self, namespace: Mapping[str, object], targets: object = None) -> None:
        """Copy ``{name: value}`` into the namespace of every (targeted) rank."""
        if not isinstance(namespace, Mapping):
            raise TypeError("push takes a dict of {name: value}")
        for name in namespace:
            _check_name(name)
        self._view(targets).push(dict(namespace), block=True)

    def pull(self, name: str, targets: object = None) -> list:
        """The value of ``name`` on each (targeted) rank, in rank order."""
        _check_name(name)
        ranks = self.ranks(targets)
        self._require_defined(name, ranks)
        return list(self._view(ranks).pull(name, block=True))

    def scatter(self, name: str, array, targets: object = None) -> None:
        """Split ``array`` along its first axis into contiguous blocks, one per rank, as ``name``."""
        import numpy as np

        _check_name(name)
        data = np.asarray(array)
        if data.ndim == 0:
            raise ValueError("scatter needs an array with at least one dimension")
        ranks = self.ranks(targets)
        blocks = np.array_split(data, len(ranks))
        for rank, block in zip(ranks, blocks):
            self._client[self._engine_of[rank]].push({name: block}, block=False)
        self._client.wait()

    def gather(self, name: str, targets: object = None):
        """Join ``name`` from each rank along the first axis (the inverse of :meth:`scatter`)."""
        import numpy as np

        parts = self.pull(name, targets)
        return np.concatenate([np.atleast_1d(np.asarray(part)) for part in parts])

    def _view(self, targets: object):
        self._require_running()
        return self._client.direct_view([self._engine_of[r] for r in self.ranks(targets)])

    def _require_defined(self, name: str, ranks: list[int]) -> None:
        missing = self._view(ranks).apply_sync(_is_undefined, name)
        lacking = [rank for rank, absent in zip(ranks, missing) if absent]
        if lacking:
            raise NameError(f"{format_ranks(lacking, word=True)} have no variable {name!r}")

    # -- status -------------------------------------------------------------------------------

    def call(self, function, *args, rank: int = 0, timeout: float = 5.0):
        """``function(*args)`` on one rank, outside any cell (no output capture, no trace).

        For quick questions to an idle rank, such as completions; ``function`` must be importable
        on the ranks. Raises ``TimeoutError`` if the rank does not answer within ``timeout`` s
        (it is busy running a cell).
        """
        self._require_running()
        if rank not in self._engine_of:
            raise ValueError(f"rank {rank} is not in this pool of {self.size} ranks")
        return self._client[self._engine_of[rank]].apply_async(function, *args).get(timeout=timeout)

    def status(self) -> list[dict]:
        """One row per rank: rank, host, pid, state (idle/busy), CPU % and memory (MB) when local."""
        self._require_running()
        queue = self._client.queue_status()
        here = socket.gethostname()
        rows = []
        for rank in range(self.size):
            info = self._ranks_info[rank]
            engine = queue.get(self._engine_of[rank], {})
            row = {
                "rank": rank,
                "host": info["host"],
                "pid": info["pid"],
                "state": "busy" if engine.get("queue", 0) else "idle",
                "cpu_percent": None,
                "memory_mb": None,
            }
            if info["host"] == here:
                try:
                    proc = psutil.Process(info["pid"])
                    row["cpu_percent"] = proc.cpu_percent(interval=None)
                    row["memory_mb"] = proc.memory_info().rss / 2**20
                except psutil.Error:
                    row["state"] = "dead"
            rows.append(row)
        return rows


def _is_undefined(name: str) -> bool:
    from IPython import get_ipython

    return name not in get_ipython().user_ns


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{name!r} is not a valid Python variable name")


def default_size() -> int:
    """``$MPINB_RANKS`` (set by the MPI kernel's spec, or by hand), else the number of cores."""
    value = os.environ.get("MPINB_RANKS", "").strip()
    if not value:
        return os.cpu_count() or 1
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"MPINB_RANKS must be a whole number of ranks (at least 1), not {value!r}")
    return int(value)


def _launcher_config_name(launcher: str) -> str:
    from ipyparallel.cluster.launcher import find_launcher_class

    return find_launcher_class(launcher, "engine").__name__


def _has_exited(launcher) -> bool:
    """Whether a launched process is gone (ipyparallel only learns it while its loop runs)."""
    proc = getattr(launcher, "process", None)
    if isinstance(proc, psutil.Process):
        try:
            return proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    return launcher.state == "after"


def _remove_leftover_files(cluster) -> None:
    """The controller's engine-state file and the launchers' logs: ipyparallel leaves them in
    the profile's log folder after every cluster (hundreds after a day of restarts)."""
    pattern = os.path.join(cluster.profile_dir, "log", f"*{cluster.cluster_id}*")
    for path in glob.glob(pattern):
        try:
            os.remove(path)
        except OSError:
            pass


def _launcher_output(launcher) -> str:
    """What the launcher printed: its log file, or ipyparallel's copy once it noticed the exit."""
    try:
        with open(getattr(launcher, "output_file", ""), errors="replace") as handle:
            text = handle.read()
    except OSError:
        text = ""
    if not text and launcher.state == "after":
        text = launcher.get_output(remove=False) or ""
    return text


def _per_message_done(client, pending) -> list[bool]:
    return [msg_id not in client.outstanding for msg_id in pending.msg_ids]


def _replies(client, pending) -> list[object]:
    """Each rank's reply: our record dict, an exception for a failed request, None if still running.

    Our rank functions catch every error of user code, so the slow path (asking per message)
    only runs when a request itself failed (a rank died) or ranks are still busy.
    """
    if pending.ready():
        try:
            return list(pending.get())
        except Exception:  # noqa: BLE001 - fall through to one message at a time
            pass
    replies = []
    for msg_id, finished in zip(pending.msg_ids, _per_message_done(client, pending)):
        if not finished:
            replies.append(None)
            continue
        try:
            replies.append(client.get_result(msg_id).get(timeout=5))
        except Exception as err:  # noqa: BLE001 - a rank's failure is data here
            replies.append(err)
    return replies


def _failure_from_remote(err: BaseException) -> RankFailure:
    """A failure that happened outside user code (engine died, value not serialisable...)."""
    name = getattr(err, "ename", type(err).__name__)
    message = getattr(err, "evalue", str(err))
    trace = getattr(err, "traceback", "") or f"{name}: {message}"
    return RankFailure(type=name, message=message, traceback=trace)


@atexit.register
def _stop_live_pools() -> None:
    for pool in list(_live_pools):
        pool.stop()
