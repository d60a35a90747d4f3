"""The engine pool: MPI ranks that stay alive between cells, driven through ipyparallel.

``Pool`` is the facade: :class:`~._supervisor.Supervisor` starts, watches and stops the
processes, :mod:`._run` follows one run and collects its result, :mod:`._data` moves variables.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import os
import socket
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from inspect import Parameter, signature
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import psutil

from .. import rank as _rank
from .._language import say
from ..common._protocol import Hello, Limits
from ..common._ranges import Targets, format_ranks, parse_ranks, rank_count, rank_count_in_text
from ..errors import PoolError, PoolStartError, RankDiedError
from . import _data
from ._channel import ask
from ._checks import Checked, flag, optional_seconds, positive, seconds
from ._deaths import why_dead
from ._debug import Driver, OnStop, RankSession, first_failing_rank
from ._inspect import Inspection, inspect
from ._launch import LaunchSettings, check_launcher
from ._pending import Direct, Relayed
from ._recover import explain, held_note, recover
from ._result import RunResult
from ._run import Debugging, Outcome, collect, follow, stopped_error
from ._stacks import Stacks, sample
from ._streams import OutputCallback
from ._supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

MIN_TRACE_SHARE = 1_000  # calls per rank that a run may record, however many ranks it has
KEPT_SOURCES = 50  # cells whose code the pool keeps, to show lines of stacks read from outside
Debug = Sequence[str] | OnStop | None
_cell_numbers = itertools.count(1)
_live_pools: weakref.WeakSet[Pool] = weakref.WeakSet()
T = TypeVar("T")


def slow_tracer_note(ranks: dict[int, Hello]) -> str | None:
    """The warning for ranks whose traced calls run in Python although C was asked for."""
    slow = {rank: info["tracer"] for rank, info in ranks.items() if info["tracer"] != "C"
            and "MPINB_TRACER=python" not in info["tracer"]}
    if not slow:
        return None
    why = slow[min(slow)].removeprefix("python: ")
    return say("mpinb: traced MPI calls run in Python on {ranks}, since the C tracer could not be built or "
               "loaded ({why}). Results are the same; each traced call costs a few microseconds more. "
               "`mpinb doctor` checks the build; MPINB_TRACER=python silences this.",
               ranks=format_ranks(sorted(slow), word=True), why=why)


def verify_default() -> bool:
    """``$MPINB_VERIFY`` as a pool's default ``verify`` (``mpinb run --verify`` sets it for the
    notebook's kernel); unset, empty or ``0``: off."""
    value = os.environ.get("MPINB_VERIFY", "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return False
    if value in ("1", "yes", "true", "on"):
        return True
    raise ValueError(f"MPINB_VERIFY={value!r}: set it to 1 (verify every run) or 0")


class Pool:
    """A set of MPI ranks (one process each) that keep their state between runs.

    ``Pool(4)`` starts nothing; :meth:`start` returns when every rank is ready. Use it as a
    context manager to be sure the ranks stop::

        with mpinb.Pool(4) as pool:
            pool.run("print(rank, size)")

    Each option is checked when it is set, at construction and after, and a wrong one is named.

    :param n: how many ranks; default ``$MPINB_RANKS`` (the MPI kernel's spec sets it), else
        the number of cores here.
    :param launcher: how the ranks start: ``"mpi"`` (mpiexec here or, with host arguments, on
        other hosts), ``"srun"`` (inside a Slurm allocation), ``"slurm"`` (a batch job), or another
        of ipyparallel's engine launchers.
    :param launcher_options: that launcher's settings (a batch job's partition, time, account).
    :param mpiexec: which launcher program; default: ``$MPINB_MPIEXEC``, else the one beside this
        Python, else the PATH's.
    :param mpiexec_args: its arguments (hosts, binding), as a list.
    :param env: environment variables for every rank.
    :param yield_when_idle: whether ranks waiting in MPI yield their core; default: when ranks
        outnumber cores twice.
    :param start_timeout: seconds to start; default: by ranks per core.
    :param stop_timeout: seconds an interrupted run has to stop before its ranks count as stuck;
        default: by ranks per core.
    :param max_output_lines: lines one rank may print in one run; the rest is cut and counted.
    :param max_output_chars: characters one rank may print in one run.
    :param trace_capacity: MPI calls one rank records in one run.
    :param trace_budget: MPI calls a run's ranks record together (each gets its share).
    :param controller_ip: the address the controller listens on; default: a private folder of
        Unix sockets when every rank runs here, this host's name otherwise.
    :param encrypt: CurveZMQ on every socket of the pool, the relay of runs included; default:
        whenever the pool listens on TCP (ranks on other hosts, or a ``controller_ip``). A pool
        whose ranks all run here listens on Unix sockets in a folder only you can open, and is
        not encrypted unless asked. ``False`` on TCP warns: anyone who can reach the ports reads
        the cells and their output. Every message is signed (HMAC) either way, so no one without
        the key can run code in the pool.
    :param verify: whether every run checks MPI correctness beyond the cheap checks of each
        traced run (see :meth:`run`); default: ``$MPINB_VERIFY`` (``1``: on), else off.
    :raises ValueError: an option out of range (a rank count of 0, a negative timeout).
    :raises TypeError: an option of the wrong type (``mpiexec_args`` given as one string).
    """

    start_timeout = Checked(optional_seconds)
    stop_timeout = Checked(optional_seconds)
    max_output_lines = Checked(positive)
    max_output_chars = Checked(positive)
    trace_capacity = Checked(positive)
    trace_budget = Checked(positive)
    verify = Checked(flag)

    def __init__(
        self,
        n: int | None = None,
        *,
        launcher: str = "mpi",
        mpiexec: str | None = None,
        mpiexec_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        yield_when_idle: bool | None = None,
        start_timeout: float | None = None,
        max_output_lines: int = 10_000,
        max_output_chars: int = 1_000_000,
        trace_capacity: int = 100_000,
        trace_budget: int = 1_000_000,
        controller_ip: str | None = None,
        launcher_options: Mapping[str, object] | None = None,
        stop_timeout: float | None = None,
        encrypt: bool | None = None,
        verify: bool | None = None,
    ):
        n = default_size() if n is None else rank_count(n)
        if isinstance(mpiexec_args, str) or not all(isinstance(arg, str) for arg in mpiexec_args):
            raise TypeError(f"mpiexec_args must be a list of arguments (text), e.g. ['-f', 'hosts.txt'], "
                            f"not {mpiexec_args!r}")
        for name, value in (("mpiexec", mpiexec), ("controller_ip", controller_ip)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be text, not {value!r}")
        if yield_when_idle not in (None, True, False):
            raise TypeError(f"yield_when_idle must be True, False or None (decide by ranks per core), "
                            f"not {yield_when_idle!r}")
        if encrypt not in (None, True, False):
            raise TypeError(f"encrypt must be True, False or None (encrypt whenever the pool listens on TCP), "
                            f"not {encrypt!r}")
        if env is not None and (not isinstance(env, Mapping)
                                or not all(isinstance(key, str) and key for key in env)):
            raise TypeError(f"env must map variable names to values, e.g. {{'OMP_NUM_THREADS': '2'}}, not {env!r}")
        self.settings = LaunchSettings(
            n=n,
            launcher=check_launcher(launcher),
            mpiexec=mpiexec,
            mpiexec_args=list(mpiexec_args),
            env={key: str(value) for key, value in (env or {}).items()},
            yield_when_idle=yield_when_idle,
            launcher_options=dict(launcher_options or {}),
            encrypt=encrypt,
            controller_ip=controller_ip,
        )
        self.start_timeout = start_timeout  # None: what the ranks per core need (see LaunchSettings)
        self.max_output_lines = max_output_lines
        self.max_output_chars = max_output_chars
        self.trace_capacity = trace_capacity  # MPI calls one rank records in one run, at most
        self.trace_budget = trace_budget  # and all ranks of a run together (see _limits)
        self.verify = verify_default() if verify is None else verify
        # After an interrupt or a timeout, how long ranks get to stop before the pool takes them
        # as stuck (inside a call that ignores interrupts) and starts fresh processes.
        self.stop_timeout = stop_timeout
        self.last_result: RunResult | None = None
        self._supervisor: Supervisor | None = None
        self._starting: threading.Thread | None = None  # a restart in the background (see _restart_because)
        self._start_failure: BaseException | None = None
        self._generation = 0  # the fresh worlds the ranks have moved to since they started
        self._settled = True  # every rank idle in the same world; False while a run is out
        self._busy: frozenset[int] = frozenset()  # the ranks of the run in flight (see status)
        self._sources: dict[str, str] = {}  # recent cells' code, by the name the ranks run it under
        self._places: dict = {}  # where each rank was at the last stacks taken (see _stacks.sample)

    # -- life cycle ---------------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        """The keyword arguments that make a pool like this one (``Pool(pool.size, **pool.options())``)."""
        def value(name: str) -> Any:
            kept = getattr(self.settings, name) if hasattr(self.settings, name) else getattr(self, name)
            return copy.copy(kept)  # (lists and dicts: the caller's to change)

        return {name: value(name) for name in OPTIONS}

    @property
    def size(self) -> int:
        return self.settings.n

    @property
    def running(self) -> bool:
        """Whether the pool is up, or starting again in the background after a failure."""
        return self._supervisor is not None or self._starting is not None

    @property
    def busy(self) -> frozenset[int]:
        """The ranks of the run in flight; empty between runs."""
        return self._busy

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
        self._wait_for_start()
        if self._supervisor is not None:
            return self
        return self._launch()

    def _launch(self) -> Pool:
        start_timeout = self.start_timeout or self.settings.default_start_timeout
        supervisor = Supervisor(self.settings, start_timeout)
        supervisor.start()
        self._supervisor = supervisor
        self._generation, self._settled = 0, True
        self._places = {}
        _live_pools.add(self)
        note = slow_tracer_note(supervisor.ranks_info)
        if note:
            warnings.warn(note, RuntimeWarning, stacklevel=2)
        return self

    @property
    def tracer(self) -> str:
        """``"C"`` when the ranks trace MPI calls in C (mpinb/rank/mpi/_tracer.c), else why not."""
        tracers = {info["tracer"] for info in self._running().ranks_info.values()}
        return tracers.pop() if len(tracers) == 1 else "; ".join(sorted(tracers))

    def stop(self) -> None:
        """Stop every rank and the controller; no process is left behind."""
        try:
            self._wait_for_start()
        except PoolStartError:
            pass  # nothing started that needs stopping
        _live_pools.discard(self)
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.shutdown()

    def restart(self, n: int | None = None) -> Pool:
        """Stop, then start again. The ranks' variables are lost.

        :param n: how many ranks from now on; default: as many as before.
        """
        if n is not None:
            n = rank_count(n)
        self.stop()
        if n is not None:
            self.settings.n = n
        return self.start()

    # -- running code -------------------------------------------------------------------------

    def ranks(self, targets: Targets = None) -> list[int]:
        """The ranks a targets spec selects, in order.

        :param targets: the ranks: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        :raises ValueError: a rank the pool does not have, or a spec that does not parse.
        """
        return parse_ranks(targets, self.size)

    def run(
        self,
        code: str,
        targets: Targets = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        check: bool = True,
        trace: bool = True,
        debug: Debug = None,
        breakpoints: Iterable[int] = (),
        filename: str | None = None,
        verify: bool | None = None,
    ) -> RunResult:
        """Run ``code`` on the ranks; the value of its last expression comes back per rank.

        Each traced run checks what is cheap to check of MPI correctness (requests never
        completed, messages no receive took, communicators dropped without ``Free``); what the
        checks find is ``result.findings``, and nothing they do changes what the code computes.
        The pool stays usable after every error below.

        :param code: Python source, run on each rank as a cell is.
        :param targets: the ranks that run it: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        :param timeout: seconds before the ranks are interrupted and ``TimeoutError`` raised;
            ``None`` waits as long as the run takes.
        :param on_output: called with the output as it streams in, rank by rank.
        :param check: raise :class:`RankError` when user code raised on any rank; ``False``
            returns the result, failures included.
        :param trace: record every MPI call the code makes into ``result.trace``; ``False`` runs
            the plain mpi4py objects, at no cost.
        :param debug: what happens when ranks stop at ``breakpoint()`` or at ``breakpoints``:
            ``None`` asks for debugger commands with ``input()`` (continuing where nobody can
            type), a list of command lines is used first, a callable gets the
            :class:`Breakpoints` each time.
        :param breakpoints: line numbers of ``code`` where every rank stops.
        :param filename: the name the ranks run the code under (tracebacks, stacks); default
            ``<mpi-cell-N>``.
        :param verify: check more, at some cost (default: the pool's ``verify``): exchanges that
            finish only because MPI buffered a message, messages received into a buffer of another
            type, buffers of nonblocking sends changed before the send completed, receives from
            ``ANY_SOURCE`` whose match depends on timing. Needs ``trace``.
        :returns: each rank's value, output, failure and the run's trace.
        :raises SyntaxError: once (not once per rank) for code that does not compile.
        :raises RankError: user code raised on any rank (with ``check``).
        :raises TimeoutError: ``timeout`` seconds passed; the ranks were interrupted first. When
            ranks were blocked in MPI it is an :class:`MPIHangError` that says where each waited,
            a :class:`DeadlockError` when they waited for each other in a cycle.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a string of Python source, not {type(code).__name__}")
        filename = filename or f"<mpi-cell-{next(_cell_numbers)}>"
        compile(code, filename, "exec")  # one clear SyntaxError here instead of one per rank
        self._sources[filename] = code
        while len(self._sources) > KEPT_SOURCES:
            del self._sources[next(iter(self._sources))]
        limits = self._limits(trace, targets, verify)
        lines = sorted(set(breakpoints))
        if lines:
            count = code.count("\n") + 1
            outside = [line for line in lines if not 1 <= line <= count]
            if outside:
                raise ValueError(f"breakpoints at lines {outside}: the code has lines 1-{count}")
            limits["breakpoints"] = {filename: lines}
        args = (code, filename, limits)
        return self._execute(_rank.run_cell, args, targets, timeout, on_output, check, debug)

    def run_file(
        self,
        path: str | os.PathLike,
        args: Iterable[object] = (),
        stdin: str | bytes | None = None,
        targets: Targets = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        check: bool = True,
        trace: bool = True,
        debug: Debug = None,
        verify: bool | None = None,
    ) -> RunResult:
        """Run an existing MPI script unchanged, as ``mpiexec -n N python path args`` would.

        ``__name__ == "__main__"``, ``sys.argv``, the working directory and ``stdin`` are what
        ``mpiexec`` gives; ``sys.exit(0)`` is success.

        :param path: the script.
        :param args: its command-line arguments (``sys.argv[1:]``), as a list or one string.
        :param stdin: what rank 0 reads from standard input; the other ranks read nothing.
        :param targets: as :meth:`run`'s, and so are ``timeout``, ``on_output``, ``check``,
            ``trace``, ``debug`` and ``verify``.
        :raises FileNotFoundError: no script at ``path``.
        """
        path = os.path.abspath(os.fspath(path))
        if not os.path.exists(path):
            raise FileNotFoundError(f"no script at {path}: check the name and the working directory ({os.getcwd()})")
        if os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a folder; give the path of a .py script")
        if isinstance(stdin, bytes):
            stdin = stdin.decode()
        argv = [str(arg) for arg in args] if not isinstance(args, str) else args.split()
        call = (path, argv, stdin, os.getcwd(), self._limits(trace, targets, verify))
        return self._execute(_rank.run_file, call, targets, timeout, on_output, check, debug)

    def _limits(self, trace: bool, targets: Targets, verify: bool | None) -> Limits:
        """Each rank records at most ``trace_capacity`` calls, and the run's ranks together about
        ``trace_budget``: at 64 ranks, 100,000 calls each would send the notebook 700 MB per cell
        (a call is about 110 bytes). The trace says how many calls each rank dropped."""
        if verify is None:  # the pool's setting: a run it asks untraced is not verified
            verify = self.verify and bool(trace)
        elif flag(verify, "verify") and not trace:
            raise ValueError("verify=True checks the MPI calls that tracing records: it needs trace=True "
                             "(drop --no-trace, or drop --verify)")
        share = max(self.trace_budget // len(self.ranks(targets)), MIN_TRACE_SHARE)
        return {"max_lines": self.max_output_lines, "max_chars": self.max_output_chars,
                "trace": bool(trace), "trace_capacity": min(self.trace_capacity, share),
                "verify": bool(verify and trace)}

    def interrupt(self, targets: Targets = None) -> None:
        """Send SIGINT to the ranks: a ``KeyboardInterrupt`` in the code they are running.

        :param targets: the ranks: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        """
        if self._supervisor is not None:  # (ranks still starting run nothing to interrupt)
            self._supervisor.interrupt(self.ranks(targets))

    def _execute(self, call: Callable, args: tuple, targets: Targets, timeout: float | None,
                 on_output: OutputCallback | None, check: bool, debug: Debug = None) -> RunResult:
        supervisor = self._ready()
        ranks = self.ranks(targets)
        optional_seconds(timeout, "timeout")
        self._settled = False  # until the run is over and, if it was aborted, the ranks recovered
        self._busy = frozenset(ranks)
        try:
            debugging = Debugging(Driver(debug), self._sources, self._places)
            try:
                outcome = follow(supervisor, call, args, ranks, self.size, timeout, on_output, debugging)
            except Exception as err:
                # such as the controller letting a rank's engine go (its MPI job ended) since
                # _ready looked, before the death was seen: ipyparallel refuses to send to it
                self._raise_naming_a_death(supervisor, err, "running the cell")
                raise  # (not reached)
            if outcome.stopped == "died":
                outcome.pending.forget()
                raise self._after_death(supervisor, outcome.dead)
            result = self.last_result = collect(outcome, self.size)
            outcome.pending.forget()
            if outcome.aborted:
                self._busy = frozenset(range(self.size))
                sources = {args[1]: args[0]} if call is _rank.run_cell else {}
                result.restarted = self._recover_from_abort(supervisor, outcome, sources)
        finally:
            self._busy = frozenset()
        self._settled = True
        if outcome.raised is not None:
            raise outcome.raised
        if outcome.stopped:
            raise stopped_error(outcome, timeout, result.restarted or held_note(result.held))
        if check:
            result.raise_for_errors()
        return result

    def _ready(self) -> Supervisor:
        """The running supervisor, with every rank idle in the same world. A run whose end the
        notebook did not see (interrupted while it cleaned up) is recovered from first; a rank
        that died since the last run is named, and the pool restarted, before anything is sent."""
        supervisor = self._running()
        dead = supervisor.first_dead()
        if dead:
            raise self._after_death(supervisor, dead, during="the pool waited for the next run")
        if not self._settled:
            supervisor.interrupt(list(range(self.size)))  # ranks that are idle only count it
            self._busy = frozenset(range(self.size))
            try:
                note = self._recover_from_abort(supervisor, None, {})
            finally:
                self._busy = frozenset()
            self._settled = True
            if note:
                warnings.warn(note, RuntimeWarning, stacklevel=3)
        return self._running()

    def _recover_from_abort(self, supervisor: Supervisor, outcome: Outcome | None,
                            sources: dict[str, str]) -> str | None:
        """Bring every rank to a fresh world after an aborted run (see :mod:`._recover`); if they
        cannot get there, start fresh processes. ``None``, or the sentence that says the pool was
        restarted, why, and what was lost."""
        if outcome is None:  # not known: every rank may still be busy
            waiting, unstarted, interrupted_at = list(range(self.size)), {}, time.monotonic()
        else:
            waiting = outcome.unanswered()
            unstarted = _requests_of(outcome, waiting)
            interrupted_at = outcome.interrupted_at or time.monotonic()
        stop_timeout = self.stop_timeout or self.settings.default_stop_timeout
        recovery = recover(supervisor, self._generation, waiting, unstarted, supervisor.route.last_relayed,
                           interrupted_at, stop_timeout)
        if recovery.generation is not None:
            self._generation = recovery.generation
            return held_note(recovery.held)
        return self._restart_because(explain(supervisor, recovery, sources, stop_timeout))

    def _restart_because(self, why: str) -> str:
        """Start fresh processes; the sentence that says so (why, what was lost, what was kept).

        A pool on this host starts again in the background: the error is in the notebook at once,
        and the next run waits for what is left of the start, usually nothing by the time the
        user has read it. Across hosts or under a batch system the start may fail (a host still
        down, a job waiting for nodes), which the error must say: the start is waited for.
        """
        if self.settings.on_this_host:
            self.stop()  # at once: the dead pool's processes and files are gone when the error shows
            _live_pools.add(self)  # at exit, stopped once its start is over
            self._starting = threading.Thread(target=self._start_in_background, name="mpinb-restart", daemon=True)
            self._starting.start()
            return say("{why}, so the pool was restarted: {n} fresh ranks are starting in the background, and the "
                       "next run waits for them; every rank's variables are lost; the pool's settings are kept.",
                       why=why, n=self.size)
        try:
            self.restart()
        except PoolStartError as err:  # a batch job may wait for nodes, a host may still be down
            return say("{why}. The pool could not start again ({error}); `%mpi restart` (Pool.restart()) "
                       "tries again.", why=why, error=err)
        return say("{why}, so the pool was restarted with {n} fresh ranks: every rank's variables are lost; "
                   "the pool's settings are kept.", why=why, n=self.size)

    def _start_in_background(self) -> None:
        try:
            self._launch()
        except BaseException as err:  # noqa: BLE001 - raised by the next use (see _wait_for_start)
            self._start_failure = err

    def _wait_for_start(self) -> None:
        """Wait for a restart in the background (interruptible); raise why it failed, if it did."""
        starting = self._starting
        if starting is None:
            return
        while starting.is_alive():
            starting.join(0.05)
        self._starting = None
        failure, self._start_failure = self._start_failure, None
        if failure is not None:
            raise PoolStartError(say("the pool could not start again after the last failure ({error}); "
                                     "`%mpi restart` (Pool.restart()) tries again.", error=failure)) from failure

    def _after_death(self, supervisor: Supervisor, dead: list[int], during: str = "running the cell") -> RankDiedError:
        """Name the rank that died and how, then restart the pool (MPI cannot go on without it)."""
        return RankDiedError(self._restart_because(why_dead(supervisor, dead, during)))

    def _running(self) -> Supervisor:
        self._wait_for_start()
        if self._supervisor is None:
            raise PoolError("the pool is not running: call pool.start() (or `%mpi start`) first")
        return self._supervisor

    # -- debugging ----------------------------------------------------------------------------

    def stacks(self, targets: Targets = None, samples: int = 1, interval: float = 0.5) -> Stacks:
        """Every rank's Python stack now, merged into one tree.

        Shared frames show once, each branch with its ranks. It works while the ranks are idle,
        run, wait in MPI, or are stopped.

        :param targets: the ranks: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        :param samples: how many times to take the stacks: more than one tells ranks that move
            from ranks that are stuck.
        :param interval: seconds between two samples.
        """
        if not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be a whole number of at least 1, got {samples!r}")
        return sample(self._running(), self.ranks(targets), self._sources, samples, interval, self._places)

    def inspect(self, expression: str, targets: Targets = None) -> Inspection:
        """An expression evaluated on every rank and compared, side by side.

        Ranks with equal values are grouped, those that differ marked, and for arrays, which
        elements differ. Values do not travel whole (a summary and digests do).

        :param expression: Python, evaluated on each rank that is idle or stopped at a breakpoint.
        :param targets: the ranks: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        """
        return inspect(self._running(), self.ranks(targets), expression)

    def ask_debuggers(self, ranks: list[int], op: str, args: Mapping[str, object] | None = None) -> dict[int, dict]:
        """Each rank's debugger's answer to one request: the route of the MPI kernel's debugger.

        The request goes on ipyparallel's control channel, which a rank reads while it runs a cell,
        waits in MPI or is stopped.

        :param ranks: the ranks to ask.
        :param op: the request (``"frames"``, ``"variables"``, ``"detach"``...).
        :param args: its arguments (``{"level": 0}``).
        :returns: each rank's answer; a rank that did not answer within 3 s gets
            ``{"status": "timeout"}``.
        """
        return ask(self._running(), ranks, op, args)

    def post_mortem(self, rank: int | None = None) -> RankSession:
        """A debugger on one rank, at the frame that raised.

        For a rank still running, it is at the frame the rank runs in (read only).
        ``session.command("p x")`` returns what pdb printed; ``session.interact()`` prompts.

        :param rank: the rank; default: the first whose code failed in the last run.
        """
        if rank is None:
            rank = first_failing_rank(self.last_result)
        (rank,) = self.ranks([rank])
        return RankSession(self._running(), rank)

    # -- moving data --------------------------------------------------------------------------

    def push(self, namespace: Mapping[str, object], targets: Targets = None, timeout: float | None = None) -> None:
        """Copy ``{name: value}`` into the namespace of every (targeted) rank.

        The stop button raises ``KeyboardInterrupt``, which says the same as a ``TransferError``.

        :param namespace: the names and their values (large arrays go through shared memory here,
            or by MPI's broadcast across hosts).
        :param targets: the ranks: ``None`` (all), ``"0,2-3"``, a list, a range, a rank.
        :param timeout: seconds before the move gives up; ``None`` waits as long as it takes.
        :raises TransferError: the move failed on some ranks; ``done``, ``failed`` and
            ``missing`` say where each rank stands.
        :raises TransferTimeoutError: ``timeout`` passed; the same account (a ``TimeoutError``).
        :raises RankDiedError: a rank died meanwhile; the pool restarted without its variables."""
        ranks, seconds = self.ranks(targets), optional_seconds(timeout, "timeout")
        self._moving("the push", lambda supervisor: _data.push(supervisor, namespace, ranks, seconds))

    def pull(self, name: str, targets: Targets = None, timeout: float | None = None) -> list[Any]:
        """The value of ``name`` on each (targeted) rank, in rank order.

        :param name: a variable in the ranks' namespace.
        :param targets: as :meth:`push`'s, and so are ``timeout`` and the errors raised."""
        ranks, seconds = self.ranks(targets), optional_seconds(timeout, "timeout")
        return self._moving("the pull", lambda supervisor: _data.pull(supervisor, name, ranks, seconds))

    def scatter(self, name: str, array: ArrayLike, targets: Targets = None, timeout: float | None = None) -> None:
        """Split ``array`` along its first axis into contiguous blocks, one per rank, as ``name``.

        The blocks are ``numpy.array_split``'s: with fewer rows than ranks, the last ranks get none.

        :param name: the variable each rank gets its block as.
        :param array: anything ``numpy.asarray`` takes.
        :param targets: as :meth:`push`'s, and so are ``timeout`` and the errors raised."""
        ranks, seconds = self.ranks(targets), optional_seconds(timeout, "timeout")
        self._moving("the scatter", lambda supervisor: _data.scatter(supervisor, name, array, ranks, seconds))

    def gather(self, name: str, targets: Targets = None, timeout: float | None = None) -> np.ndarray:
        """Join ``name`` from each rank along the first axis (the inverse of :meth:`scatter`).

        :param name: an array on each rank; the shapes agree but for the first axis.
        :param targets: as :meth:`push`'s, and so are ``timeout`` and the errors raised."""
        ranks, seconds = self.ranks(targets), optional_seconds(timeout, "timeout")
        return self._moving("the gather", lambda supervisor: _data.gather(supervisor, name, ranks, seconds))

    def _moving(self, move: str, transfer: Callable[[Supervisor], T]) -> T:
        """``transfer(supervisor)``; a rank that dies or stops answering meanwhile is named and the
        pool restarted (a ``RankDiedError``: MPI cannot go on without it, and every rank's
        variables are lost then, whatever the move had brought)."""
        supervisor = self._ready()
        try:
            return transfer(supervisor)
        except BaseException as err:
            self._raise_naming_a_death(supervisor, err, f"{move} ran")
            raise  # (not reached)

    def _raise_naming_a_death(self, supervisor: Supervisor, err: BaseException, during: str) -> NoReturn:
        """Raise ``err``, or, if a rank of this pool is gone meanwhile, the error that names the
        death (and restart the pool): what broke the call was the death."""
        dead = supervisor.gone()
        if not dead or self._supervisor is not supervisor:
            raise err
        raise self._after_death(supervisor, dead, during=during) from err

    # -- status -------------------------------------------------------------------------------

    def call(self, function: Callable[..., T], *args: object, rank: int = 0, timeout: float = 5.0) -> T:
        """``function(*args)`` on one rank, outside any cell (no output capture, no trace).

        It is for quick questions to an idle rank, such as completions.

        :param function: importable on the ranks (ipyparallel sends it by reference).
        :param rank: the rank that calls it.
        :param timeout: seconds to wait for the answer.
        :raises TimeoutError: the rank did not answer in time (it is busy running a cell).
        """
        supervisor = self._ready()
        (rank,) = self.ranks([rank])
        seconds(timeout, "timeout")
        return supervisor.client[supervisor.engine_of[rank]].apply_async(function, *args).get(timeout=timeout)

    def status(self) -> list[dict[str, Any]]:
        """One row per rank: rank, host, pid, state (idle/busy), CPU % and memory (MB) when local."""
        supervisor = self._running()
        here = socket.gethostname()
        rows = []
        for rank in range(self.size):
            info = supervisor.ranks_info[rank]
            row: dict[str, Any] = {
                "rank": rank,
                "host": info["host"],
                "pid": info["pid"],
                # the pool's own account: the controller's queue lags the replies, and it does not
                # see the runs that rank 0 relays to the others
                "state": "busy" if rank in self._busy else "idle",
                "tracer": info["tracer"],
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


# Pool's options, as its signature names them (after the size): options() reads them back, the
# class docstring describes each (tests/units/test_pool_side.py checks both).
OPTIONS = tuple(name for name, parameter in signature(Pool.__init__).parameters.items()
                if parameter.kind is Parameter.KEYWORD_ONLY)


def _requests_of(outcome: Outcome, ranks: list[int]) -> dict[int, str]:
    """The aborted run's requests to ``ranks`` that a rank may not have started yet (ipyparallel
    can still withdraw those): one per rank when sent directly; rank 0's when relayed."""
    pending = outcome.pending
    if isinstance(pending, Direct):
        return {rank: msg_id for rank, msg_id in zip(outcome.ranks, pending.msg_ids) if rank in ranks}
    if isinstance(pending, Relayed) and not pending.ready():
        return {0: pending.request.msg_ids[0]}
    return {}


def default_size() -> int:
    """``$MPINB_RANKS`` (set by the MPI kernel's spec, or by hand), else the number of cores."""
    value = os.environ.get("MPINB_RANKS", "").strip()
    return rank_count_in_text(value, "MPINB_RANKS") if value else os.cpu_count() or 1


@atexit.register
def _stop_live_pools() -> None:
    for pool in list(_live_pools):
        pool.stop()
