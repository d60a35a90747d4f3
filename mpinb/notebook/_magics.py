"""``%mpi``, ``%%mpi`` and ``%autompi``: parse the arguments, then call :mod:`mpinb.notebook._session`.

Usage errors raise IPython's ``UsageError`` with the usage text, so a typo never starts anything.
"""

from __future__ import annotations

import argparse
import os
import re

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class

from .._language import language
from ..common._ranges import parse_ranks
from ..errors import PoolStartError
from ..pool import Pool, default_size
from . import _session as session
from ._fonts import use_a_cjk_font
from ._grammar import (
    LINE_USAGE,
    STATEMENT_AFTER_WORD,
    SUBCOMMANDS,
    TARGETS_AT_END,
    cell_parser,
    debug_parser,
    export_parser,
    run_parser,
    split_arguments,
    stacks_parser,
    start_parser,
)


def _verify(args: argparse.Namespace) -> bool | None:
    """``--verify`` (``None`` without it: the pool's setting); a clear error beside ``--no-trace``."""
    if args.verify and not args.trace:
        raise UsageError("--verify checks the MPI calls that tracing records: drop --no-trace, or drop --verify")
    return args.verify


@magics_class
class MPIMagics(Magics):
    """The magics; each one parses and checks its line, then calls a function of
    :mod:`mpinb.notebook._session`. Mistakes in the line raise ``UsageError``; whatever the run
    itself raises (the ranks' errors, a dead rank, a hang) is shown as itself."""

    @line_cell_magic
    def mpi(self, line: str, cell: str | None = None) -> object:
        """Run code on the MPI pool (``%%mpi``) or manage it (``%mpi start|stop|...``)."""
        if cell is None:
            return self._line(line)
        args = cell_parser().parse_args(split_arguments(line))
        _check_targets(args.targets, args.n)
        session.run_cell(cell, n=args.n, targets=args.targets, timeout=args.timeout, output=args.output,
                         first_line=args.first_line, trace=args.trace, view=args.view, debug=args.debug,
                         verify=_verify(args))
        return None

    def _line(self, line: str) -> object:
        word, _, rest = line.strip().partition(" ")
        if not word:
            raise UsageError(LINE_USAGE)
        if word not in SUBCOMMANDS or STATEMENT_AFTER_WORD.match(rest):
            _check_targets(None, None)
            session.run_cell(line)
            return None
        if word == "inspect":  # an expression: not split like arguments (its quotes are Python's)
            return self._inspect(rest)
        return self.HANDLERS[word](self, word, split_arguments(rest))

    def _start(self, word: str, argv: list[str]) -> None:
        extra: list[str] = []
        if "--" in argv:
            cut = argv.index("--")
            argv, extra = argv[:cut], argv[cut + 1:]
        args = start_parser(word).parse_args(argv)
        if word == "start" and session.current_pool() is not None:
            raise UsageError(session.already_running())
        launch = {"mpiexec": args.mpiexec, "hosts": args.hosts, "hostfile": args.hostfile,
                  "partition": args.partition, "time": args.time, "account": args.account}
        # `%mpi restart` alone keeps how the pool was launched; any launch flag replaces it.
        given = args.launcher or extra or args.mpiexec_args or any(launch.values())
        try:
            options = session.launch_options(args.launcher or "mpi", mpiexec_args=args.mpiexec_args + extra,
                                             **launch) if given or word == "start" else {}
        except (ValueError, PoolStartError) as err:
            raise UsageError(str(err)) from None
        if args.start_timeout is not None:
            options["start_timeout"] = args.start_timeout
        if args.encrypt is not None:
            options["encrypt"] = args.encrypt
        if args.verify:
            options["verify"] = True
        if word == "start":
            session.start_pool(args.n, **options)
        else:
            session.restart_pool(args.n, **options)

    def _stop(self, word: str, argv: list[str]) -> None:
        _no_arguments(word, argv)
        if not session.stop_pool():
            print("mpinb: no pool was running")

    def _status(self, word: str, argv: list[str]) -> None:
        _no_arguments(word, argv)
        pool = session.current_pool()
        if pool is None:
            print("mpinb: no pool is running (`%mpi start -n N` or any %%mpi cell starts one)")
        else:
            session.show_status(pool)

    def _run(self, word: str, argv: list[str]) -> None:
        args = run_parser().parse_args(argv)
        script = os.path.abspath(args.script)
        if not os.path.isfile(script):
            what = "a folder, not a script" if os.path.isdir(script) else "no script at that path"
            raise UsageError(f"{script}: {what} (the working directory is {os.getcwd()})")
        _check_targets(args.targets, None)
        stdin = None
        if args.stdin:
            try:
                with open(args.stdin) as handle:
                    stdin = handle.read()
            except OSError as err:
                raise UsageError(f"--stdin {args.stdin}: {err.strerror}") from None
        session.run_script(script, args.args, stdin=stdin, targets=args.targets, timeout=args.timeout,
                           output=args.output, trace=args.trace, view=args.view, debug=args.debug,
                           verify=_verify(args))

    def _trace(self, word: str, argv: list[str]) -> None:
        view = argv[0] if argv else "full"
        if len(argv) > 1 or view not in ("compact", "full"):
            raise UsageError("%mpi trace [compact|full]: the views of the last traced run")
        session.show_trace(view)

    def _compare(self, word: str, argv: list[str]) -> object:
        if len(argv) not in (0, 2):
            raise UsageError("%mpi compare [A B]: the last two traced runs, or the runs (Trace or RunResult) "
                             "in the notebook variables A and B")
        user_ns = _shell(self).user_ns
        missing = [name for name in argv if name not in user_ns]
        if missing:
            raise UsageError(f"%mpi compare: no notebook variable named {', '.join(missing)}")
        runs = [user_ns[name] for name in argv]
        try:
            return session.compare_runs(*runs, labels=tuple(argv) or ("before", "after"))
        except (TypeError, ValueError) as err:
            raise UsageError(f"%mpi compare: {err}") from None

    def _push(self, word: str, argv: list[str]) -> None:
        if not argv:
            raise UsageError("%mpi push NAME [NAME ...]: name the notebook variables to copy")
        user_ns = _shell(self).user_ns
        missing = [name for name in argv if name not in user_ns]
        if missing:
            raise UsageError(f"the notebook has no variable {', '.join(missing)}")
        _require_pool().push({name: user_ns[name] for name in argv})

    def _pull(self, word: str, argv: list[str]) -> list:
        if len(argv) != 1 or not argv[0].isidentifier():
            raise UsageError("%mpi pull NAME: name one variable of the ranks")
        pool = _require_pool()
        try:
            return pool.pull(argv[0])
        except NameError as err:  # some rank lacks the variable (checked on the ranks first)
            raise UsageError(str(err)) from None

    def _stacks(self, word: str, argv: list[str]) -> object:
        args = stacks_parser().parse_args(argv)
        pool = _require_pool()
        _check_targets(args.targets, None)
        return pool.stacks(args.targets, samples=args.samples, interval=args.interval)

    def _debug(self, word: str, argv: list[str]) -> None:
        args = debug_parser().parse_args(argv)
        pool = _require_pool()
        if args.rank is not None and not 0 <= args.rank < pool.size:
            raise UsageError(f"%mpi debug {args.rank}: the pool has ranks 0-{pool.size - 1}")
        try:
            debugger = pool.post_mortem(args.rank)
        except LookupError as err:
            raise UsageError(f"%mpi debug: {err}") from None
        debugger.interact(commands=args.command)

    def _inspect(self, rest: str) -> object:
        targets = None
        found = TARGETS_AT_END.search(rest)
        if found:
            targets, rest = found.group(2), rest[:found.start()]
        elif re.search(r"(^|\s)(--targets|-t)\s*$", rest):
            raise UsageError("%mpi inspect EXPR --targets RANKS: name the ranks")
        expression = rest.strip()
        if not expression:
            raise UsageError("%mpi inspect EXPR [--targets RANKS]: an expression to evaluate on every rank")
        _check_targets(targets, None)
        try:
            return _require_pool().inspect(expression, targets)
        except (NameError, SyntaxError, ValueError) as err:
            raise UsageError(f"%mpi inspect: {err}") from None

    def _export(self, word: str, argv: list[str]) -> None:
        args = export_parser().parse_args(argv)
        if args.output is not None and not args.output.endswith(".py"):
            raise UsageError(f"%mpi export -o {args.output}: name a .py file for the script")
        slurm = ({"ranks": args.ranks, "time": args.time, "partition": args.partition, "account": args.account}
                 if args.slurm else None)
        try:
            print(session.export_open_notebook(args.output, slurm=slurm, force=args.force))
        except (FileExistsError, ValueError) as err:
            raise UsageError(f"%mpi export: {err}") from None

    # What each `%mpi WORD ...` calls (inspect, whose expression is not split, is read apart)
    HANDLERS = {"start": _start, "restart": _start, "stop": _stop, "status": _status, "run": _run,
                "trace": _trace, "compare": _compare, "push": _push, "pull": _pull, "stacks": _stacks,
                "debug": _debug, "export": _export}

    @cell_magic
    def local(self, line: str, cell: str) -> None:
        """``%%local``: run this cell in the notebook's own process, not on the ranks (for the
        MPI kernel and ``%autompi``, where cells run on the ranks by default)."""
        if line.strip():
            raise UsageError("%%local takes no arguments")
        parallel = _autompi_enabled(self.shell)
        set_autompi(self.shell, False)  # the nested run must not send the cell to the ranks
        try:
            _shell(self).run_cell(cell, store_history=False)
        finally:
            set_autompi(self.shell, parallel)

    @line_magic
    def autompi(self, line: str) -> None:
        """``%autompi`` [on|off]: run every following cell on the pool, until ``%autompi off``."""
        arg = line.strip().lower()
        if arg not in ("", "on", "off"):
            raise UsageError("%autompi [on|off]")
        enable = (arg == "on") or (arg == "" and not _autompi_enabled(self.shell))
        set_autompi(self.shell, enable)
        print("mpinb: every cell now runs on the pool (`%autompi off` to stop)" if enable
              else "mpinb: cells run in the notebook again")


def _shell(magics: Magics) -> InteractiveShell:
    if magics.shell is None:  # only a Magics made outside IPython has none
        raise RuntimeError("mpinb's magics need IPython: load them with %load_ext mpinb")
    return magics.shell


def _no_arguments(word: str, argv: list[str]) -> None:
    if argv:
        raise UsageError(f"%mpi {word} takes no arguments, got {' '.join(argv)!r}")


def _check_targets(targets: str | None, n: int | None) -> None:
    """The pool a cell will run on has the size it asks for, and ``--targets`` names its ranks."""
    pool = session.current_pool()
    if pool is not None and n is not None and n != pool.size:
        raise UsageError(session.size_conflict(pool, n))
    if targets is None:
        return
    try:
        size = n or (pool.size if pool is not None else default_size())
        parse_ranks(targets, size)
    except (ValueError, TypeError) as err:
        raise UsageError(f"--targets {targets}: {err}") from None


def _require_pool() -> Pool:
    pool = session.current_pool()
    if pool is None:
        raise UsageError("no pool is running: `%mpi start -n N` (or any %%mpi cell) starts one")
    return pool


def _autompi_transformer(lines: list[str]) -> list[str]:
    """Prefix ``%%mpi`` to a cell unless it starts with a magic (so ``%autompi off`` still works).

    A ``%%local`` cell loses that line and runs here as an ordinary cell: its errors fail the
    cell and its last value is shown, as in any cell (a nested run would swallow both).
    """
    index = next((i for i, line in enumerate(lines) if line.strip()), None)
    if index is not None and lines[index].strip() == "%%local":
        return ["\n"] * index + ["\n"] + lines[index + 1:]  # blank lines keep line numbers right
    if not runs_on_ranks("".join(lines)):
        return lines
    return ["%%mpi --first-line 1\n", *lines]


def runs_on_ranks(cell: str) -> bool:
    """Whether ``%autompi`` (and the MPI kernel) send this cell to the ranks: every cell with code
    that does not begin with a magic (``%%local``, ``%mpi ...``)."""
    first = next((line for line in cell.splitlines() if line.strip()), "")
    return bool(first) and not first.lstrip().startswith("%")


def _autompi_enabled(shell) -> bool:
    return _autompi_transformer in shell.input_transformers_cleanup


def set_autompi(shell, enable: bool) -> None:
    if enable and not _autompi_enabled(shell):
        shell.input_transformers_cleanup.append(_autompi_transformer)
    elif not enable and _autompi_enabled(shell):
        shell.input_transformers_cleanup.remove(_autompi_transformer)


def load_ipython_extension(ipython) -> None:
    """``%load_ext mpinb``: the magics, and the notebook's pool starting in the background.

    ``MPINB_PRESTART=0`` turns the early start off (see ``_prestart``); in a Chinese notebook a
    font that draws Chinese in plots comes too.

    :param ipython: the shell IPython hands its extensions.
    """
    ipython.register_magics(MPIMagics)
    session.prestart()
    if language() == "zh":
        use_a_cjk_font()


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext mpinb``: ``%autompi`` off, and the notebook's pool stopped.

    :param ipython: the shell IPython hands its extensions.
    """
    set_autompi(ipython, False)
    session.stop_pool()
