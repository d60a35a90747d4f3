"""The wait a user feels in a notebook's first MPI cell: ``%load_ext mpinb``, a few seconds of
reading, then the first ``%%mpi`` cell, timed from running the cell to its result.

mpinb with its background start (the saved notebook's first cell asks for 4 ranks), mpinb with
it turned off (``MPINB_PRESTART=0``: the cell starts the pool), and ipyparallel's equivalent (the
first cell starts a cluster of MPI engines and runs the code on them). Each tool's pool runs alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import tempfile
import time
from unittest import mock

import ipyparallel as ipp
import nbformat

from mpinb.notebook import _session as session
from mpinb.pool import find_mpiexec

from .peer import stop_ipyparallel

READING_S = 3.0  # between %load_ext and the first cell: the user reads its text


def _mpinb_first_cell(shell, n: int, prestart: bool) -> float:
    os.environ["MPINB_PRESTART"] = "1" if prestart else "0"
    session.prestart()  # what %load_ext mpinb does
    time.sleep(READING_S)
    began = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_cell_magic("mpi", f"-n {n}", "rank")  # the notebook's first cell, as saved
    waited = time.perf_counter() - began
    assert session.current_pool() is not None and session.current_pool().size == n
    session.stop_pool()
    return waited


def _ipyparallel_first_cell(n: int) -> float:
    time.sleep(READING_S)
    began = time.perf_counter()
    cluster = ipp.Cluster(engines="mpi", n=n, log_level=40)
    cluster.config.MPIEngineSetLauncher.mpi_cmd = [find_mpiexec()]
    client = cluster.start_and_connect_sync()
    try:
        client[:].execute("import os; rank = os.getpid()", block=True)
        return time.perf_counter() - began
    finally:
        stop_ipyparallel(cluster, client)


def first_cell_rows(n: int = 4, repeats: int = 3) -> list[tuple]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mpinb")
    with tempfile.TemporaryDirectory() as folder, mock.patch.dict(os.environ):  # the environment comes back
        notebook = os.path.join(folder, "lesson.ipynb")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%load_ext mpinb"),
                                                       nbformat.v4.new_code_cell(f"%%mpi -n {n}\nrank")]), notebook)
        os.environ["JPY_SESSION_NAME"] = notebook
        ahead = [_mpinb_first_cell(shell, n, True) for _ in range(repeats)]
        in_cell = [_mpinb_first_cell(shell, n, False) for _ in range(repeats)]
    theirs = [_ipyparallel_first_cell(n) for _ in range(repeats)]
    ours, plain, peer = statistics.median(ahead), statistics.median(in_cell), statistics.median(theirs)
    label = f"first MPI cell's wait, {READING_S:g} s after %load_ext, {n} ranks (s)"
    return [(label, ours, "ipyparallel: the cell starts a cluster", peer, peer / ours),
            (label.replace("(s)", "without the background start (s)"), plain, "ipyparallel: the same", peer,
             peer / plain)]
