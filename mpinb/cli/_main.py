"""The ``mpinb`` command and its subcommands.

The subcommands are ``lab``, ``tutorials``, ``run``, ``export``, ``submit``, ``doctor``, ``bench``
and ``kernel install``.

Exit codes: 0 success; 1 the work failed (a notebook cell, a doctor check, the benchmarks);
2 bad arguments or input (argparse's own convention).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys

from .. import __version__
from ..common._ranges import rank_count_in_text
from ._tutorials import DEFAULT_FOLDER, checkout_notebooks, copy_tutorials

_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "command", None) == "bench":
        args.bench_args = extra  # everything else is python -m bench's (e.g. --json F, -n N)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (FileNotFoundError, FileExistsError, PermissionError, ValueError) as err:
        print(f"mpinb {args.command}: {err}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mpinb", description="A Jupyter environment for MPI.")
    parser.add_argument("--version", action="version", version=f"mpinb {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    lab = commands.add_parser("lab", help="open JupyterLab on the tutorials",
                              description="Opens JupyterLab on DIR; without DIR, on the tutorials: the "
                                          "checkout's own, or (installed mpinb) a copy in ./mpinb-tutorials "
                                          "made or brought up to date as `mpinb tutorials` does.")
    lab.add_argument("directory", nargs="?", help="folder to open (default: the tutorials)")
    lab.set_defaults(handler=_lab)

    tutorials = commands.add_parser("tutorials", help="copy the tutorials into a folder of yours",
                                    description="Copies the tutorials (English and Chinese, with the "
                                                "exercises' solutions and the glossary) into DIR, never over "
                                                "a file you changed; run again after upgrading mpinb to bring "
                                                "the files you did not change up to date.")
    tutorials.add_argument("directory", nargs="?", help=f"where (default: ./{DEFAULT_FOLDER})")
    tutorials.set_defaults(handler=_copy_tutorials)

    run = commands.add_parser("run", help="execute a notebook headless; exit 1 at the first failing cell")
    run.add_argument("notebook", help="the .ipynb to execute")
    run.add_argument("-n", type=_positive, metavar="N", help="ranks for the pool (default: $MPINB_RANKS or cores)")
    run.add_argument("-o", "--output", metavar="OUT.ipynb", help="write the executed notebook here")
    run.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per cell (default 600)")
    run.add_argument("--verify", action="store_true",
                     help="check MPI correctness in full in every run on the pool (as %%%%mpi --verify)")
    run.set_defaults(handler=_run)

    export = commands.add_parser("export", help="write a notebook's MPI program as one plain mpi4py script",
                                 description="Writes the notebook's %%mpi cells (and %mpi lines, the MPI kernel's "
                                             "cells) as one program that gives under `mpiexec -n N` what they gave "
                                             "in the pool; the notebook's own cells run on rank 0. What has no "
                                             "meaning outside a notebook is left out, and said.")
    export.add_argument("notebook", help="the .ipynb to export")
    export.add_argument("-o", "--output", metavar="SCRIPT.py", help="where (default: beside the notebook, .py)")
    export.add_argument("--slurm", action="store_true", help="also write SCRIPT.sbatch, a Slurm batch job for it")
    export.add_argument("--ranks", type=_positive, metavar="N", help="ranks for the job (default: the notebook's)")
    export.add_argument("--time", metavar="T", help="the job's time limit (default: the notebook's, else 0:30:00)")
    export.add_argument("--partition", metavar="P", help="the job's partition")
    export.add_argument("--account", metavar="A", help="the account to charge")
    export.add_argument("--force", action="store_true", help="replace a file that is not an unedited export")
    export.set_defaults(handler=_export)

    submit = commands.add_parser("submit", help="submit an exported batch job to Slurm and say how to follow it")
    submit.add_argument("job", metavar="SCRIPT.sbatch", help="the batch script `mpinb export --slurm` wrote")
    submit.set_defaults(handler=_submit)

    doctor = commands.add_parser("doctor", help="check the MPI installation end to end")
    doctor.add_argument("-n", type=_positive, default=4, metavar="N", help="ranks for the tests (default 4)")
    doctor.set_defaults(handler=_doctor)

    bench = commands.add_parser("bench", help="the benchmark table (python -m bench), from a source checkout",
                                description="Runs python -m bench; other arguments (--json F, -n N, "
                                            "--repeats R) are passed to it.")
    bench.set_defaults(handler=_bench)

    kernel = commands.add_parser("kernel", help="the MPI kernel")
    actions = kernel.add_subparsers(dest="action", metavar="ACTION", required=True)
    install = actions.add_parser("install", help="install the 'Python (MPI, mpinb)' kernel")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user only (~/.local/share/jupyter)")
    where.add_argument("--sys-prefix", action="store_true", help="in this Python environment")
    where.add_argument("--prefix", metavar="DIR", help="under DIR/share/jupyter")
    install.add_argument("-n", type=_positive, metavar="N", help="ranks of the kernel's pool (default 4)")
    install.set_defaults(handler=_kernel_install)
    return parser


def _positive(text: str) -> int:
    try:
        return rank_count_in_text(text, "the number of ranks")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _lab(args) -> int:
    directory = args.directory or _tutorials()
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no folder {directory!r}")
    if importlib.util.find_spec("jupyterlab") is None:
        raise FileNotFoundError("JupyterLab is not installed in this environment: pip install 'mpinb[tutorials]'")
    command = [sys.executable, "-m", "jupyter", "lab"]
    first = os.path.join(directory, "00-getting-started.ipynb")
    if os.path.isfile(first):
        command.append("00-getting-started.ipynb")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    return subprocess.call(command, cwd=directory)


def _tutorials() -> str:
    """The checkout's tutorials, opened in place; else a copy of the packaged ones, made or brought
    up to date in ./mpinb-tutorials."""
    checkout = checkout_notebooks()
    if checkout is not None:
        return str(checkout)
    copied = copy_tutorials()
    print(copied.text())
    return str(copied.folder)


def _copy_tutorials(args) -> int:
    copied = copy_tutorials(args.directory)
    print(copied.text())
    print(f"open them with: mpinb lab {copied.folder}")
    return 1 if copied.links else 0


def _run(args) -> int:
    from ._headless import run_notebook

    result = run_notebook(args.notebook, ranks=args.n, output=args.output, timeout=args.timeout,
                          verify=args.verify)
    for cell, text in result.findings:
        print(f"mpinb run: {args.notebook}: cell {cell}: {text}")
    if result.ok:
        print(f"mpinb run: {args.notebook}: all {result.cells_run} code cells ran without error")
        return 0
    print(f"mpinb run: {args.notebook}: cell {result.failed_cell} failed\n\n{result.error}", file=sys.stderr)
    return 1


def _export(args) -> int:
    from ..notebook._export import export_notebook
    from ..notebook._export_files import report, write

    output = args.output or os.path.splitext(args.notebook)[0] + ".py"
    if not output.endswith(".py"):
        raise ValueError(f"-o {output}: name a .py file for the script")
    stem = os.path.splitext(os.path.basename(output))[0]
    exported = export_notebook(args.notebook, script=os.path.basename(output), data_prefix=f"{stem}.")
    slurm = ({"ranks": args.ranks, "time": args.time, "partition": args.partition, "account": args.account}
             if args.slurm else None)
    written = write(exported, output, slurm=slurm, force=args.force)
    print(report(exported, written))
    return 0


def _submit(args) -> int:
    from ..pool._slurm import submit

    try:
        job_id, output = submit(args.job)
    except RuntimeError as err:
        print(f"mpinb submit: {err}", file=sys.stderr)
        return 1
    print(f"mpinb submit: job {job_id} submitted; its output goes to {output}\n"
          f"follow it: squeue -j {job_id}    (and: tail -f {shlex.quote(output)})")
    return 0


def _doctor(args) -> int:
    from ._doctor import diagnose

    return 1 if diagnose(args.n).problems else 0


def _bench(args) -> int:
    if not os.path.isfile(os.path.join(_SOURCE_ROOT, "bench", "__main__.py")):
        raise FileNotFoundError("the benchmarks (bench/) come with the source checkout, not the installed package")
    return subprocess.call([sys.executable, "-m", "bench", *args.bench_args], cwd=_SOURCE_ROOT)


def _kernel_install(args) -> int:
    from ._kernelspec import install

    prefix = sys.prefix if args.sys_prefix else args.prefix
    path = install(user=args.user, prefix=prefix, ranks=args.n)
    print(f"mpinb kernel install: 'Python (MPI, mpinb)' installed in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
