"""The magics' grammar: every argument parser and usage text of ``%mpi`` and ``%%mpi``.

The magics parse with it, and so does the exporter, which reads the same lines in a saved
notebook; neither needs the other (nor the session) for that.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex

from IPython.core.error import UsageError

from ..common._ranges import rank_count_in_text

# What %%mpi --output and --view accept (the session checks the same for calls from Python).
OUTPUT_MODES = ("tabs", "merged", "rank0")
VIEW_MODES = ("compact", "full", "none")
SUBCOMMANDS = ("start", "stop", "restart", "status", "run", "push", "pull", "trace", "compare", "stacks", "debug",
               "inspect", "export")
# `%mpi start = 3` or `%mpi run(x)` are statements that happen to begin with a subcommand's name.
STATEMENT_AFTER_WORD = re.compile(r"^\s*(=|\(|\[|\.|,|:|[-+*/%&|^@<>!=]=)")
TARGETS_AT_END = re.compile(r"(^|\s)(?:--targets|-t)\s+([0-9][0-9,\- ]*)\s*$")


class UsageParser(argparse.ArgumentParser):
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
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds (a finite number), got {text}")
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
    parser.add_argument("--output", "-o", choices=OUTPUT_MODES, default="tabs",
                        help="tabs (default): merged view and a tab per rank; merged; rank0")
    parser.add_argument("--no-trace", dest="trace", action="store_false",
                        help="do not record MPI calls (no overhead, no message views)")
    parser.add_argument("--verify", action="store_true", default=None,
                        help="check MPI correctness in full: reliance on buffering, type mismatches, "
                             "buffers changed while MPI owns them (the cheap checks run in every traced run)")
    parser.add_argument("--view", choices=VIEW_MODES, default="compact",
                        help="message-flow views after the run: compact (default), full, none")
    parser.add_argument("--debug", metavar="COMMANDS", type=_debug_commands,
                        help="debugger commands for ranks that stop at breakpoint(), separated by ;; "
                             "(e.g. \"p x ;; 2: n ;; c\"); then the prompt asks for more")


def _debug_commands(text: str) -> list[str]:
    commands = [part.strip() for part in text.split(";;")]
    if not all(commands):
        raise argparse.ArgumentTypeError(f"{text!r}: an empty command between ;;")
    return commands


def cell_parser() -> UsageParser:
    parser = UsageParser(prog="%%mpi", description="Run the cell on every MPI rank of the pool.")
    _add_size(parser)
    _add_run_options(parser)
    # Line numbers in tracebacks count the `%%mpi` line, as the notebook shows the cell;
    # %autompi adds that line itself and says so with --first-line 1.
    parser.add_argument("--first-line", type=int, default=2, help=argparse.SUPPRESS)
    return parser


def start_parser(name: str) -> UsageParser:
    parser = UsageParser(prog=f"%mpi {name}", description=f"{name.capitalize()} the pool of MPI ranks.")
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
                            help="encrypt every socket of the pool (CurveZMQ; default whenever it listens on TCP)")
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


def run_parser() -> UsageParser:
    parser = UsageParser(prog="%mpi run", description="Run an MPI script on the pool, unchanged.")
    _add_run_options(parser)
    parser.add_argument("--stdin", metavar="FILE", help="file given to rank 0 as standard input")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def stacks_parser() -> UsageParser:
    parser = UsageParser(prog="%mpi stacks", description="Every rank's Python stack, merged into one tree.")
    parser.add_argument("--samples", "-s", type=_samples, default=1, metavar="K",
                        help="take the stacks K times, --interval apart, to tell moving ranks from stuck ones")
    parser.add_argument("--interval", type=_positive_float, default=0.5, metavar="S")
    parser.add_argument("--targets", "-t", metavar="RANKS")
    return parser


def debug_parser() -> UsageParser:
    parser = UsageParser(prog="%mpi debug", description="pdb on one rank: post-mortem of the last run's failure "
                                                         "(the first failing rank by default), or the frames of a "
                                                         "rank that runs. q leaves.")
    parser.add_argument("rank", nargs="?", type=int)
    parser.add_argument("-c", "--command", action="append", default=[], metavar="COMMAND",
                        help="a command to run first (repeatable), as if typed")
    return parser


def export_parser() -> UsageParser:
    parser = UsageParser(prog="%mpi export", description="This notebook's MPI program as one plain mpi4py script "
                                                          "that gives under mpiexec what the cells gave in the pool.")
    parser.add_argument("-o", "--output", metavar="SCRIPT.py")
    parser.add_argument("--slurm", action="store_true", help="also write SCRIPT.sbatch, a Slurm batch job")
    parser.add_argument("--ranks", type=_rank_count, metavar="N")
    parser.add_argument("--time", metavar="T")
    parser.add_argument("--partition", metavar="P")
    parser.add_argument("--account", metavar="A")
    parser.add_argument("--force", action="store_true", help="replace a file that is not an unedited export")
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


def split_arguments(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:
        raise UsageError(f"cannot read the arguments: {err}") from None
