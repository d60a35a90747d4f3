"""An exported notebook on disk: the script and its data.

They are signed so that re-exporting replaces only an export nobody edited. With ``--slurm`` the
export has its batch job too (see ``pool/_slurm.py``). Also here: what ``mpinb export`` and
``%mpi export`` say about it."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from ..pool._slurm import batch_script
from ._export import Exported, ExportError

_SIGNATURE = "# written by mpinb export; sha256 of the lines above: "


def _signed(text: str) -> str:
    return f"{text}{_SIGNATURE}{hashlib.sha256(text.encode()).hexdigest()}\n"


def _ours_unchanged(path: str) -> bool:
    """Whether the file at ``path`` is an export that nobody edited since (re-exporting replaces
    it); anything else there is somebody's work, which an export never overwrites unasked."""
    try:
        with open(path) as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return False
    body, found, digest = text.rpartition(_SIGNATURE)
    return bool(found) and digest.strip() == hashlib.sha256(body.encode()).hexdigest()


def job_script(exported: Exported, script: str, ranks: int | None = None, time: str | None = None,
               partition: str | None = None, account: str | None = None) -> str:
    """The Slurm batch script of ``exported``, written at ``script`` (an absolute path): as many
    tasks as the notebook's pool had, unless ``ranks`` says."""
    n = ranks or exported.ranks
    if n is None:
        raise ExportError("the notebook never says how many ranks it ran on (no %%mpi -n N, no %mpi start -n N): "
                          "give them, as in --ranks 4")
    return batch_script(script, n, exported.name, exported.launch, time=time, partition=partition, account=account)


def write(exported: Exported, path: str, slurm: dict[str, Any] | None = None, force: bool = False) -> list[str]:
    """Write the script (and its data files, and with ``slurm`` its batch script) at ``path``;
    the files written. A file there that is not an unedited export is kept (``FileExistsError``)
    unless ``force``."""
    import numpy as np

    path = os.path.abspath(path)
    job = os.path.splitext(path)[0] + ".sbatch"
    for target in [path, *([job] if slurm is not None else [])]:
        if os.path.exists(target) and not force and not _ours_unchanged(target):
            raise FileExistsError(f"{target} exists and is not an export nobody edited since: it is kept. "
                                  "Name another file (-o), or replace it (--force)")
    written = [path]
    with open(path, "w") as handle:
        handle.write(_signed(exported.script))
    for name, value in exported.data.items():
        target = os.path.join(os.path.dirname(path), name)
        np.save(target, value, allow_pickle=False)
        written.append(target)
    if slurm is not None:
        with open(job, "w") as handle:
            handle.write(_signed(job_script(exported, path, **slurm)))
        written.append(job)
    return written


def report(exported: Exported, written: list[str]) -> str:
    """What ``mpinb export`` (and ``%mpi export``) say: the files, what was left out, how to run."""
    script = written[0]
    lines = [f"mpinb export: {exported.name} -> {', '.join(written)}"]
    if exported.left_out:
        lines.append(f"left out, as comments where they were ({len(exported.left_out)}):")
        lines += [f"  {item}" for item in exported.left_out]
    ranks = exported.ranks or "N"
    lines.append(f"run it: mpiexec -n {ranks} {sys.executable} {script}")
    if any(path.endswith(".sbatch") for path in written):
        lines.append(f"or as a Slurm job: mpinb submit {os.path.splitext(script)[0]}.sbatch")
    return "\n".join(lines)
