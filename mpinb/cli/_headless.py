"""Running a notebook without a browser (``mpinb run``).

It runs ``%%mpi`` notebooks and MPI-kernel notebooks alike, stopping at the first failing cell with
its per-rank error."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, field

from ..common._ranges import rank_count
from . import _kernelspec as kernelspec

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class NotebookRun:
    ok: bool
    cells_run: int
    failed_cell: int | None = None  # index among all cells, counting from 1 as Jupyter shows them
    error: str = ""
    findings: list[tuple[int, str]] = field(default_factory=list)  # (cell, the list shown under it)


def run_notebook(path: str, ranks: int | None = None, output: str | None = None,
                 timeout: float = 600.0, verify: bool = False) -> NotebookRun:
    """Execute ``path`` top to bottom in its own kernel (the MPI kernel if it asks for it);
    with ``output``, write the executed notebook there, failed or not. With ``verify``, every
    run on the pool checks MPI correctness in full (``$MPINB_VERIFY``); the findings shown under
    cells come back either way."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    if not os.path.isfile(path):
        raise FileNotFoundError(f"no notebook at {path!r}")
    nb = nbformat.read(path, as_version=4)
    kernel = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    if ranks is not None:
        ranks = rank_count(ranks, "-n")
    with tempfile.TemporaryDirectory() as scratch, _environment(scratch, kernel, ranks, verify):
        client = NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                                resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
        try:
            client.execute()
            result = NotebookRun(True, sum(c.cell_type == "code" for c in nb.cells))
        except CellExecutionError as err:
            result = _failure(nb, err)
        except DeadKernelError as err:
            result = NotebookRun(False, 0, None, f"the kernel died: {err}")
        finally:
            if output:
                nbformat.write(nb, output)
    result.findings = _findings(nb)
    return result


def _findings(nb) -> list[tuple[int, str]]:
    """The correctness findings shown under the notebook's cells (see ``_session.FindingList``)."""
    found = []
    for number, cell in enumerate(nb.cells, 1):
        for out in cell.get("outputs", ()):
            data = out.get("data", {})
            if 'class="mpinb-findings"' in str(data.get("text/html", "")):
                found.append((number, str(data.get("text/plain", ""))))
    return found


@contextlib.contextmanager
def _environment(scratch: str, kernel: str, ranks: int | None, verify: bool = False):
    """The kernel's environment: the pool size, whether runs verify, and the MPI kernel's spec
    whether or not the user installed it; the caller's environment is restored afterwards."""
    saved = {name: os.environ.get(name) for name in ("MPINB_RANKS", "JUPYTER_PATH", "MPINB_VERIFY")}
    if verify:
        os.environ["MPINB_VERIFY"] = "1"
    if ranks is not None:
        os.environ["MPINB_RANKS"] = str(ranks)
    if kernel == kernelspec.KERNEL_NAME:
        kernelspec.render(os.path.join(scratch, "kernels"), ranks)
        os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [scratch, saved["JUPYTER_PATH"]]))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _failure(nb, err: Exception) -> NotebookRun:
    for index, cell in enumerate(nb.cells, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and "raises-exception" not in cell.metadata.get("tags", []):
                text = _ANSI.sub("", "\n".join(out.get("traceback", [])) or f"{out['ename']}: {out['evalue']}")
                run = sum(1 for c in nb.cells[:index] if c.cell_type == "code")
                return NotebookRun(False, run, index, text.strip())
    # IPython prints a magic's UsageError instead of recording an error: the failing cell is the
    # last that ran, and what it printed says why.
    ran = [index for index, cell in enumerate(nb.cells, start=1)
           if cell.cell_type == "code" and cell.get("execution_count")]
    if not ran:
        return NotebookRun(False, 0, None, _ANSI.sub("", str(err)).strip() or "a cell failed")
    cell = nb.cells[ran[-1] - 1]
    said = "".join(out.get("text", "") for out in cell.get("outputs", []) if out.get("output_type") == "stream")
    why = said.strip() or f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
    return NotebookRun(False, len(ran), ran[-1], _ANSI.sub("", why))
