"""``%mpi``, ``%%mpi`` and ``%autompi``: parse the arguments, then call :mod:`mpinb.notebook._session`.

Usage errors raise IPython's ``UsageError`` with the usage text, so a typo never starts anything.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class

from .._language import language
from .._ranges import parse_ranks, rank_count_in_text
from ..errors import PoolStartError
from ..pool import Pool, default_size
from . import _session as session
from ._fonts import use_a_cjk_font

SUBCOMMANDS = ("start", "stop", "restart", "status", "run", "push", "pull", "trace", "compare", "stacks", "debug",
               "inspect", "export")
# `%mpi start = 3` or `%mpi run(x)` are statements that happen to begin with a subcommand's name.
STATEMENT_AFTER_WORD = re.compile(r"^\s*(=|\(|\[|\.|,|:|[-+*/%&|^@<>!=]=)")
_TARGETS_AT_END = re.compile(r"(^|\s)(?:--targets|-t)\s+([0-9][0-9,\- ]*)\s*$")


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` (with the usage) instead of exiting the kernel."""

    def error(self, message: str):
        raise UsageError(f"{message}\n{self.format_usage().strip()}")

    def exit(self, status: int = 0, message: str | None = None):
        raise UsageError(message or self.format_help())


def _rank_count(text: str) -> int:
    try:
        return rank_count_in_text(text, "the number of ranks")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def _samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"take the stacks at least 1 time, not {value}")
    return value


def _add_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=_rank_count, metavar="N", help="number of MPI ranks")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--targets", "-t", metavar="RANKS", help="ranks to run on, e.g. 0,2-3")
    parser.add_argument("--timeout", type=_positive_float, metavar="S", help="interrupt after S seconds")
    parser.add_argument("--output", "-o", choices=session.OUTPUT_MODES, default="tabs",
                        help="tabs (default): merged view and a tab per rank; merged; rank0")
    parser.add_argument("--no-trace", dest="trace", action="store_false",
                        help="do not record MPI calls (no overhead, no message views)")
    parser.add_argument("--verify", action="store_true", default=None,
                        help="check MPI correctness in full: reliance on buffering, type mismatches, "
                             "buffers changed while MPI owns them (the cheap checks run in every traced run)")
    parser.add_argument("--view", choices=session.VIEW_MODES, default="compact",
                        help="message-flow views after the run: compact (default), full, none")
    parser.add_argument("--debug", metavar="COMMANDS", type=_debug_commands,
                        help="debugger commands for ranks that stop at breakpoint(), separated by ;; "
                             "(e.g. \"p x ;; 2: n ;; c\"); then the prompt asks for more")


def _verify(args: argparse.Namespace) -> bool | None:
    """``--verify`` (``None`` without it: the pool's setting); a clear error beside ``--no-trace``."""
    if args.verify and not args.trace:
        raise UsageError("--verify checks the MPI calls that tracing records: drop --no-trace, or drop --verify")
    return args.verify


def _debug_commands(text: str) -> list[str]:
    commands = [part.strip() for part in text.split(";;")]
    if not all(commands):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty command between ;;")
    return commands


def cell_parser() -> _Parser:
    parser = _Parser(prog="%%mpi", description="Run the cell on every MPI rank of the pool.")
    _add_size(parser)
    _add_run_options(parser)
    # Line numbers in tracebacks count the `%%mpi` line, as the notebook shows the cell;
    # %autompi adds that line itself and says so with --first-line 1.
    parser.add_argument("--first-line", type=int, default=2, help=argparse.SUPPRESS)
    return parser


def start_parser(name: str) -> _Parser:
    parser = _Parser(prog=f"%mpi {name}", description=f"{name.capitalize()} the pool of MPI ranks.")
    _add_size(parser)
    parser.add_argument("--launcher",
                        help="mpi (default: mpiexec here), srun (inside a Slurm allocation), slurm, pbs, ssh, ...")
    parser.add_argument("--mpiexec", help="path of the mpiexec to use")
    parser.add_argument("--hosts", metavar="H1,H2", help="hosts for mpiexec (MPICH -hosts, Open MPI --host)")
    parser.add_argument("--hostfile", metavar="FILE", help="hostfile for mpiexec (MPICH -f, Open MPI --hostfile)")
    parser.add_argument("--start-timeout", type=_positive_float, metavar="S",
                        help="give up if the ranks are not all up after S seconds "
                             "(default: 60, plus 1 per rank beyond one per core)")
    encryption = parser.add_mutually_exclusive_group()
    encryption.add_argument("--encrypt", dest="encrypt", action="store_const", const=True,
                            help="encrypt every socket of the pool (CurveZMQ; default when ranks run on other hosts)")
    encryption.add_argument("--no-encrypt", dest="encrypt", action="store_const", const=False,
                            help="sign messages only, do not encrypt them")
    parser.add_argument("--verify", action="store_true",
                        help="every run checks MPI correctness in full, as %%%%mpi --verify")
    batch = parser.add_argument_group("batch systems (--launcher slurm, pbs, ...)")
    batch.add_argument("--partition", help="partition (queue) to submit to")
    batch.add_argument("--time", help="time limit, e.g. 1:00:00")
    batch.add_argument("--account", help="account to charge")
    parser.add_argument("mpiexec_args", nargs="*", help="after --: extra arguments for mpiexec")
    return parser


def run_parser() -> _Parser:
    parser = _Parser(prog="%mpi run", description="Run an MPI script on the pool, unchanged.")
    _add_run_options(parser)
    parser.add_argument("--stdin", metavar="FILE", help="file given to rank 0 as standard input")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser


LINE_USAGE = """\
%mpi start [-n N] [--launcher NAME] [--hosts H | --hostfile F] [--start-timeout S] [--verify]
           [--encrypt | --no-encrypt] [--partition P --time T --account A] [-- mpiexec args]
                                                        start the pool
%mpi stop | restart [-n N] | status                     manage it
%mpi run [--targets T] [--timeout S] [--verify] script.py [args]
                                                        run a script as mpiexec would
%mpi push NAME [NAME ...]                               copy notebook variables to every rank
%mpi pull NAME                                          the per-rank list of a rank variable
%mpi trace [compact|full]                               message-flow views of the last traced run
%mpi compare [A B]                                      the last two traced runs (or variables A, B
                                                        holding traces or results) side by side
%mpi stacks [--samples K] [--targets T]                 every rank's Python stack, merged into one tree
%mpi debug [RANK] [-c COMMAND ...]                      pdb on a rank: where the last run failed (the
                                                        first failing rank by default), or where it runs
%mpi inspect EXPR [--targets T]                         EXPR on every rank, side by side
%mpi export [-o SCRIPT.py] [--slurm [--time T ...]]     this notebook as one plain mpi4py script (and a
                                                        Slurm batch job): mpiexec -n N python SCRIPT.py
%mpi STATEMENT                                          run one line on every rank
%%mpi [-n N] [--targets T] [--timeout S] [--output tabs|merged|rank0]
      [--no-trace | --verify] [--view compact|full|none] [--debug "CMD ;; CMD"]"""


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:
        raise UsageError(f"cannot read the arguments: {err}") from None


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
        args = cell_parser().parse_args(_split(line))
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
        return getattr(self, f"_{word}")(word, _split(rest))

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

    _restart = _start

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
        parser = _Parser(prog="%mpi stacks", description="Every rank's Python stack, merged into one tree.")
        parser.add_argument("--samples", "-s", type=_samples, default=1, metavar="K",
                            help="take the stacks K times, --interval apart, to tell moving ranks from stuck ones")
        parser.add_argument("--interval", type=_positive_float, default=0.5, metavar="S")
        parser.add_argument("--targets", "-t", metavar="RANKS")
        args = parser.parse_args(argv)
        pool = _require_pool()
        _check_targets(args.targets, None)
        return pool.stacks(args.targets, samples=args.samples, interval=args.interval)

    def _debug(self, word: str, argv: list[str]) -> None:
        parser = _Parser(prog="%mpi debug", description="pdb on one rank: post-mortem of the last run's failure "
                                                         "(the first failing rank by default), or the frames of a "
                                                         "rank that runs. q leaves.")
        parser.add_argument("rank", nargs="?", type=int)
        parser.add_argument("-c", "--command", action="append", default=[], metavar="COMMAND",
                            help="a command to run first (repeatable), as if typed")
        args = parser.parse_args(argv)
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
        found = _TARGETS_AT_END.search(rest)
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
        parser = _Parser(prog="%mpi export", description="This notebook's MPI program as one plain mpi4py script "
                                                          "that gives under mpiexec what the cells gave in the pool.")
        parser.add_argument("-o", "--output", metavar="SCRIPT.py")
        parser.add_argument("--slurm", action="store_true", help="also write SCRIPT.sbatch, a Slurm batch job")
        parser.add_argument("--ranks", type=_rank_count, metavar="N")
        parser.add_argument("--time", metavar="T")
        parser.add_argument("--partition", metavar="P")
        parser.add_argument("--account", metavar="A")
        parser.add_argument("--force", action="store_true", help="replace a file that is not an unedited export")
        args = parser.parse_args(argv)
        if args.output is not None and not args.output.endswith(".py"):
            raise UsageError(f"%mpi export -o {args.output}: name a .py file for the script")
        slurm = ({"ranks": args.ranks, "time": args.time, "partition": args.partition, "account": args.account}
                 if args.slurm else None)
        try:
            print(session.export_open_notebook(args.output, slurm=slurm, force=args.force))
        except (FileExistsError, ValueError) as err:
            raise UsageError(f"%mpi export: {err}") from None

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
    """``%load_ext mpinb``: the magics, the notebook's pool starting in the background
    (``MPINB_PRESTART=0`` turns that off; see ``_prestart``), and in a Chinese notebook a font
    that draws Chinese in plots."""
    ipython.register_magics(MPIMagics)
    session.prestart()
    if language() == "zh":
        use_a_cjk_font()


def unload_ipython_extension(ipython) -> None:
    set_autompi(ipython, False)
    session.stop_pool()
