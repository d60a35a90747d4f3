"""The notebook's pool, started in the background when ``%load_ext mpinb`` runs.

Starting a pool is bounded by starting Python processes that import ipyparallel, mpi4py and
numpy: one to a few seconds that the user would otherwise wait for in the first ``%%mpi`` cell.
``%load_ext`` starts it in a thread instead, when it can tell the size the notebook will ask for:
the ``-n`` of the saved notebook's first ``%%mpi`` (or ``%mpi start``) cell, or the default size
when that cell names none (Jupyter names the notebook in ``$JPY_SESSION_NAME``); without a
notebook to read, only a default size that was set on purpose (``$MPINB_RANKS``, as the MPI
kernel's spec sets it). A pool of a size nobody asks for would cost a start and a stop. The first
cell that needs a pool takes it when it fits, waiting for the rest of its start; one that asks
for another size, or other settings, stops it and starts its own. ``MPINB_PRESTART=0`` turns
this off.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

from ..pool._pool import Pool, default_size

_SIZE = re.compile(r"^%%?mpi\b(?:\s+(?:start|restart))?.*?(?:-n|--n)[ =]?(\d+)")


def enabled() -> bool:
    return os.environ.get("MPINB_PRESTART", "1").strip().lower() not in ("0", "no", "false", "off")


def planned_size(notebook: str | None = None) -> int | None:
    """The size the notebook's first pool will have, if that can be told before it runs (see
    the module's docstring); ``None`` when it cannot."""
    found, n = _first_pool_cell(notebook or os.environ.get("JPY_SESSION_NAME", ""))
    if found:
        return n or default_size()
    return default_size() if os.environ.get("MPINB_RANKS", "").strip() else None


def _first_pool_cell(path: str) -> tuple[bool, int | None]:
    """Whether the saved notebook at ``path`` has a cell that starts a pool or runs on one, and
    the ``-n`` of the first such cell, if it names one."""
    if not path.endswith(".ipynb"):
        return False, None
    try:
        with open(path, encoding="utf-8") as handle:
            cells = json.load(handle).get("cells", [])
    except (OSError, ValueError, AttributeError):
        return False, None
    for cell in cells:
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        text = "".join(source) if isinstance(source, list) else str(source)
        for line in text.splitlines():
            line = line.strip()
            if line.startswith(("%%mpi", "%mpi start", "%mpi restart")):
                found = _SIZE.match(line)
                return True, int(found.group(1)) if found and int(found.group(1)) > 0 else None
    return False, None


class Prestart:
    """A default pool starting in a background thread (its errors wait for the first use)."""

    def __init__(self, n: int):
        self.pool = Pool(n)  # built here: a bad $MPINB_RANKS fails at %load_ext, where it was set
        self.error: BaseException | None = None
        self.began = time.perf_counter()
        self.ready_after: float | None = None
        self._thread = threading.Thread(target=self._start, name="mpinb-prestart", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.pool.start()
        except BaseException as err:  # noqa: BLE001 - given to the first cell that needs the pool
            self.error = err
        self.ready_after = time.perf_counter() - self.began

    def take(self) -> Pool:
        """The started pool, once its start is over; raises what the start raised."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.pool

    def discard(self) -> None:
        """Stop it (after its start is over: a start cannot be cut halfway)."""
        self._thread.join()
        if self.pool.running:
            self.pool.stop()


def start_in_background() -> Prestart | None:
    """The background start that ``%load_ext mpinb`` makes, or ``None`` (turned off, or no size
    can be told)."""
    n = planned_size() if enabled() else None
    return Prestart(n) if n is not None else None
