"""The notebook's pool and the steps behind each magic, as plain functions (no IPython needed)."""

from __future__ import annotations

import html
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from IPython.display import display

from .._colors import ORANGE
from .._language import say
from ..common._ranges import Targets, format_ranks
from ..errors import CellSyntaxError, PoolError, RankError
from ..pool._pool import Pool
from ..pool._result import RunResult
from ..trace import Finding, Trace
from ..widgets import RankOutput, TraceView
from ..widgets.progress import ProgressBars
from ._grammar import OUTPUT_MODES, VIEW_MODES
from ._prestart import Prestart, start_in_background

if TYPE_CHECKING:
    from ._dap import RankDebugAdapter

@dataclass
class Session:
    """What the notebook's magics share, one per kernel: its pool and the one %load_ext started,
    the last two traces, and in the MPI kernel the debugger panel's adapter and the cell it runs."""

    pool: Pool | None = None
    prestarted: Prestart | None = None  # started by %load_ext in the background, until a cell takes it
    last_trace: Trace | None = None
    previous_trace: Trace | None = None  # the one before the last: what `%mpi compare` compares it with
    debug_adapter: RankDebugAdapter | None = None  # JupyterLab's debugger panel on the ranks
    current_cell: str | None = None  # the code of the cell the MPI kernel runs (the panel names cells by it)


SESSION = Session()


def attach_debugger(adapter: RankDebugAdapter) -> None:
    """The MPI kernel's debugger panel: runs name their cells as it does, for its breakpoints."""
    SESSION.debug_adapter = adapter


@contextmanager
def running_cell(code: str) -> Iterator[None]:
    """The MPI kernel runs the cell ``code`` (the debugger panel names a cell by its code)."""
    SESSION.current_cell = code
    try:
        yield
    finally:
        SESSION.current_cell = None


def current_pool() -> Pool | None:
    """The pool the magics use, if one is running."""
    return SESSION.pool if SESSION.pool is not None and SESSION.pool.running else None


def use_pool(pool: Pool | None) -> None:
    """Make the magics run on ``pool`` (a started :class:`Pool`), or on none."""
    discard_prestarted()
    SESSION.pool = pool


def prestart() -> None:
    """Start the notebook's pool in the background (``%load_ext mpinb``; see ``_prestart``)."""
    if current_pool() is None and SESSION.prestarted is None:
        SESSION.prestarted = start_in_background()


def discard_prestarted() -> None:
    """Stop the pool that %load_ext started, if no cell took it."""
    prestarted, SESSION.prestarted = SESSION.prestarted, None
    if prestarted is not None:
        prestarted.discard()


def _take_prestarted(n: int | None, options: dict) -> Pool | None:
    """The background pool, if it is what is asked for (size, default settings) and started;
    otherwise it is stopped, and the caller starts its own (which says what went wrong)."""
    prestarted, SESSION.prestarted = SESSION.prestarted, None
    if prestarted is None:
        return None
    if any(value not in (None, "mpi", [], (), {}) for value in options.values()) or (
            n is not None and n != prestarted.pool.size):
        prestarted.discard()
        return None
    try:
        pool = prestarted.take()
    except Exception:  # noqa: BLE001 - the start in the cell raises it again, where the user sees it
        prestarted.discard()
        return None
    return pool if pool.running else None


def start_pool(n: int | None = None, quiet: bool = False, **options) -> Pool:
    """Start the notebook's pool (``Pool`` options pass through); one line says how it went."""
    if current_pool() is not None:
        raise PoolError(already_running())
    began = time.perf_counter()
    pool = _take_prestarted(n, options)
    if pool is not None:
        SESSION.pool = pool
        if not quiet:
            print(f"mpinb: started {pool.size} MPI ranks in the background at %load_ext (this cell waited "
                  f"{time.perf_counter() - began:.1f} s for them; `%mpi stop` ends them)")
        return pool
    pool = Pool(n, **options)
    pool.start()
    SESSION.pool = pool
    if not quiet:
        print(
            f"mpinb: started {pool.size} MPI ranks in {time.perf_counter() - began:.1f} s "
            "(`%mpi stop` ends them)"
        )
    return pool


def launch_options(launcher: str = "mpi", mpiexec: str | None = None, mpiexec_args: Sequence[str] = (),
                   hosts: str | None = None, hostfile: str | None = None, partition: str | None = None,
                   time: str | None = None, account: str | None = None) -> dict:
    """``Pool`` options from ``%mpi start``'s: hosts in the spelling of the chosen MPI, batch
    settings (partition, time, account) for ipyparallel's batch launchers."""
    from ..pool._launch import LOCAL_LAUNCHERS, batch_options, find_mpiexec, host_arguments

    batch = batch_options(partition, time, account)
    if batch and launcher in (*LOCAL_LAUNCHERS, "srun", "ssh"):
        raise ValueError(f"--partition/--time/--account are for batch launchers (slurm, pbs, ...), "
                         f"not {launcher!r}")
    if (hosts or hostfile) and launcher not in LOCAL_LAUNCHERS:
        raise ValueError("--hosts/--hostfile go to mpiexec: use them with the default launcher (mpi)")
    args = list(mpiexec_args)
    if hosts or hostfile:
        args = host_arguments(find_mpiexec(mpiexec), hosts, hostfile) + args
    return {"launcher": launcher, "mpiexec": mpiexec, "mpiexec_args": args, "launcher_options": batch}


def stop_pool() -> bool:
    """Stop the notebook's pool; ``False`` if there was none."""
    discard_prestarted()
    pool, SESSION.pool = SESSION.pool, None
    if pool is None or not pool.running:
        return False
    pool.stop()
    return True


def restart_pool(n: int | None = None, **changes) -> Pool:
    """Stop the pool and start a new one like it: the same size and every setting (launcher,
    hosts, batch options, timeouts, output caps, trace capacity...), except what is given."""
    previous = SESSION.pool
    options = previous.options() if previous is not None else {}
    options.update(changes)
    if n is None and previous is not None:
        n = previous.size
    stop_pool()
    return start_pool(n, **options)


def pool_for_cell(n: int | None) -> Pool:
    """The running pool, or a new one; a cell asking for another size gets a clear error."""
    pool = current_pool()
    if pool is None:
        return start_pool(n)
    if n is not None and n != pool.size:
        raise PoolError(size_conflict(pool, n))
    return pool


def already_running() -> str:
    size = SESSION.pool.size if SESSION.pool is not None else 0
    return f"a pool of {size} ranks is already running: use `%mpi restart -n N` to change it, or `%mpi stop`"


def size_conflict(pool: Pool, n: int) -> str:
    return (f"the pool has {pool.size} ranks but this cell asks for {n}: run `%mpi restart -n {n}` "
            "first (the ranks' variables are lost), or drop -n to use the running pool")


def to_python(cell: str) -> str:
    """IPython syntax (``%magic``, ``!cmd``) as plain Python, as the ranks will run it."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(cell)


def run_cell(
    code: str,
    n: int | None = None,
    targets: Targets = None,
    timeout: float | None = None,
    output: str = "tabs",
    first_line: int = 1,
    trace: bool = True,
    view: str = "compact",
    debug: list[str] | None = None,
    verify: bool | None = None,
) -> RunResult:
    """Run a cell on the pool with a live per-rank view; raise what ``Pool.run`` raises.

    ``first_line`` is the line number the cell's code starts at, as the notebook shows it;
    ``view`` (compact, full, none) is how the message-flow views of a traced cell are shown.
    """
    code = "\n" * max(first_line - 1, 0) + to_python(code)
    try:
        compile(code, "<mpi cell>", "exec")
    except SyntaxError as err:
        raise CellSyntaxError(err) from None
    pool = pool_for_cell(n)
    adapter = SESSION.debug_adapter if SESSION.debug_adapter is not None and SESSION.debug_adapter.started else None
    cell = SESSION.current_cell
    named = adapter.cell(cell) if adapter is not None and cell is not None and first_line == 1 else None
    filename, lines = named or (None, [])
    try:
        return _shown(pool, targets, output, view, verify is True,
                      lambda show: pool.run(code, targets, timeout, show, trace=trace,
                                            debug=adapter.on_stop if adapter is not None else debug,
                                            breakpoints=lines, filename=filename, verify=verify))
    finally:
        if adapter is not None:
            adapter.run_ended()


def run_script(
    path: str,
    args: list[str],
    stdin: str | None = None,
    targets: Targets = None,
    timeout: float | None = None,
    output: str = "tabs",
    trace: bool = True,
    view: str = "compact",
    debug: list[str] | None = None,
    verify: bool | None = None,
) -> RunResult:
    """``%mpi run``: an existing script on the pool, shown like a cell."""
    pool = pool_for_cell(None)
    return _shown(pool, targets, output, view, verify is True,
                  lambda show: pool.run_file(path, args, stdin, targets, timeout, show, trace=trace, debug=debug,
                                             verify=verify))


def _shown(pool: Pool, targets: Targets, output: str, view: str, asked_to_verify: bool, call) -> RunResult:
    """Run ``call(on_output)`` with a live view that keeps whatever happened, errors included,
    then the message-flow views of its trace and its correctness findings (a cell that asked for
    ``--verify`` hears that nothing was found; a pool that verifies every run says only findings)."""
    if output not in OUTPUT_MODES:
        raise ValueError(f"output must be one of {', '.join(OUTPUT_MODES)}, not {output!r}")
    if view not in VIEW_MODES:
        raise ValueError(f"view must be one of {', '.join(VIEW_MODES)}, not {view!r}")
    live = RankOutput(pool.ranks(targets), mode=output)
    handle = display(live, display_id=True)
    bars = ProgressBars(pool.ranks(targets))

    def on_output(rank: int, kind: str, data: object) -> None:
        if kind == "progress":
            bars.update(data)  # type: ignore[arg-type]
        else:
            live.append(rank, kind, data)

    result, how = None, ""
    try:
        result = call(on_output)
        return result
    except RankError as err:
        result = err.result
        raise
    except (KeyboardInterrupt, TimeoutError) as err:
        result, how = pool.last_result, "interrupted" if isinstance(err, KeyboardInterrupt) else "timed out"
        if getattr(err, "diagnosis", None) is not None:
            live.notice = ""  # the error below shows the diagnosis; once is enough
        raise
    finally:
        bars.finish()
        live.finish(result, how)
        handle.update(live)
        if result is not None and result.trace is not None and len(result.trace):
            SESSION.previous_trace, SESSION.last_trace = SESSION.last_trace, result.trace
            if view != "none":
                display(TraceView(result.trace, expanded=view == "full"))
            findings = result.trace.findings()
            if findings or (asked_to_verify and result.trace.verified):
                display(FindingList(findings, checked=len(result.trace)))


class FindingList:
    """What a run did that works only by accident, under its cell: one line per finding, as
    HTML (a warning's colour) and as text (saved notebooks, the terminal). A verified run
    (``checked``: its number of calls) with no finding says so in one line."""

    def __init__(self, findings: Sequence[Finding], checked: int | None = None):
        self.findings = list(findings)
        self.checked = checked

    def _heading(self) -> str:
        if not self.findings:
            return say("MPI correctness (--verify): nothing found in {calls} MPI calls.", calls=self.checked)
        return say("MPI correctness: this run works only by accident ({count}):", count=len(self.findings))

    def __repr__(self) -> str:
        return "\n".join([self._heading(), *(f"  - {finding}" for finding in self.findings)])

    def _repr_html_(self) -> str:
        if not self.findings:
            return f'<div class="mpinb-verified" style="color: #666">{html.escape(self._heading())}</div>'
        items = "".join(f"<li>{html.escape(str(finding))}</li>" for finding in self.findings)
        return (f'<div class="mpinb-findings" style="border-left: 3px solid {ORANGE}; padding-left: 8px">'
                f"<b>{html.escape(self._heading())}</b><ul>{items}</ul></div>")


def last_trace() -> Trace | None:
    """The trace of the last cell that made MPI calls while traced (``None`` if none did)."""
    return SESSION.last_trace


def compare_runs(*runs: object, labels: tuple[str, ...] = ("before", "after")) -> object:
    """``%mpi compare``: two runs side by side, by default the last two traced ones."""
    from ..widgets.compare import compare

    if not runs:
        if SESSION.previous_trace is None or SESSION.last_trace is None:
            raise ValueError("there are not two traced runs yet: run two %%mpi cells (traced, the default) "
                             "first, or name the two runs to compare")
        runs = (SESSION.previous_trace, SESSION.last_trace)
    return compare(runs[0], runs[1], labels=(labels[0], labels[1]))


def show_trace(view: str = "full") -> None:
    """``%mpi trace``: the message-flow views of the last traced run."""
    trace = last_trace()
    if trace is None:
        print("mpinb: no traced run yet (run a %%mpi cell without --no-trace first)")
        return
    display(TraceView(trace, expanded=view != "compact"))


# More ranks than this: %mpi status shows a summary, with the table folded away (HTML) or left
# out (plain text, which cannot fold).
STATUS_TABLE_UP_TO = 16


def show_status(pool: Pool) -> None:
    """``%mpi status``: one summary line (hosts, states, CPU, memory), then a table of the ranks."""
    rows = pool.status()
    header = ["rank", "host", "pid", "state", "CPU %", "memory MB"]
    cells = [
        [r["rank"], r["host"], r["pid"], r["state"],
         "" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}",
         "" if r["memory_mb"] is None else f"{r['memory_mb']:.0f}"]
        for r in rows
    ]
    summary = status_summary(pool, rows)
    table = "\n".join("  ".join(str(c).ljust(10) for c in row) for row in [header, *cells])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in cells)
    head = "".join(f"<th>{h}</th>" for h in header)
    page = f"<table><tr>{head}</tr>{body}</table>"
    if len(rows) > STATUS_TABLE_UP_TO:
        page = f"<details><summary>each of the {len(rows)} ranks</summary>{page}</details>"
        table = ""
    display({"text/plain": "\n".join(filter(None, [summary, table])),
             "text/html": f"<p>{html.escape(summary).replace(chr(10), '<br>')}</p>{page}"}, raw=True)


def status_summary(pool: Pool, rows: list[dict]) -> str:
    """``64 ranks on 2 hosts (a: ranks 0-31, b: ranks 32-63), mpi launcher`` and a line of states,
    CPU and memory: what a pool of many ranks needs at a glance."""
    hosts: dict[str, list[int]] = {}
    states: dict[str, list[int]] = {}
    for row in rows:
        hosts.setdefault(row["host"], []).append(row["rank"])
        states.setdefault(row["state"], []).append(row["rank"])
    where = ", ".join(f"{host}: {format_ranks(ranks, word=True)}" for host, ranks in hosts.items())
    plural = "host" if len(hosts) == 1 else "hosts"
    first = f"{pool.size} ranks on {len(hosts)} {plural} ({where}), {pool.settings.launcher} launcher"
    parts = [f"{len(ranks)} {state}" + (f" ({format_ranks(ranks, word=True)})" if state != "idle" else "")
             for state, ranks in sorted(states.items(), key=lambda item: item[0] != "idle")]
    memory = [row["memory_mb"] for row in rows if row["memory_mb"] is not None]
    cpu = [row["cpu_percent"] for row in rows if row["cpu_percent"] is not None]
    if cpu:
        parts.append(f"CPU {sum(cpu):.0f} % in all")
    if memory:
        parts.append(f"memory {sum(memory) / 1024:.1f} GB ({sum(memory) / len(memory):.0f} MB per rank)")
    return first + "\n" + " · ".join(parts)


def export_open_notebook(output: str | None = None, slurm: dict | None = None, force: bool = False) -> str:
    """``%mpi export``: this notebook's program as a script (see :mod:`._export`), and what the
    export says. The notebook is the saved file Jupyter runs this kernel for (``$JPY_SESSION_NAME``);
    without one (a console, an old Jupyter), the cells this kernel ran, in the order it ran them.
    Arrays the notebook pushed are saved beside the script with their current values."""
    from IPython import get_ipython

    from ._export import export_cells, export_notebook
    from ._export_files import report, write

    shell = get_ipython()
    values = dict(shell.user_ns) if shell is not None else {}
    path = os.environ.get("JPY_SESSION_NAME", "")  # (Jupyter Server's path of it, or its URL path)
    if path.endswith(".ipynb") and not os.path.isfile(path):
        path = os.path.basename(path)  # the kernel runs in the notebook's folder
    if path.endswith(".ipynb") and os.path.isfile(path):
        target = output or os.path.splitext(os.path.basename(path))[0] + ".py"
        stem = os.path.splitext(os.path.basename(target))[0]
        exported = export_notebook(path, values=values, data_prefix=f"{stem}.", script=os.path.basename(target))
    else:
        history = list(shell.history_manager.input_hist_raw[1:-1]) if shell is not None else []  # (not this cell)
        target = output or "notebook.py"
        stem = os.path.splitext(os.path.basename(target))[0]
        exported = export_cells([(cell, []) for cell in history], name="the cells this kernel ran", values=values,
                                data_prefix=f"{stem}.", script=os.path.basename(target))
    return report(exported, write(exported, target, slurm=slurm, force=force))
