"""An exported notebook on disk: the script and its data.

They are signed so that re-exporting replaces only an export nobody edited. With ``--slurm`` the
export has its batch job too (see ``pool/_slurm.py``). Also here: what ``mpinb export`` and
``%mpi export`` say about it."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from .._confined import Confined
from ..pool._slurm import batch_script
from ._export import Exported, ExportError

_SIGNATURE = "# written by mpinb export; sha256 of the lines above: "


def _signed(text: str) -> str:
    return f"{text}{_SIGNATURE}{hashlib.sha256(text.encode()).hexdigest()}\n"


def _ours_unchanged(content: bytes) -> bool:
    """Whether ``content`` is an export that nobody edited since (re-exporting replaces it);
    anything else is somebody's work, which an export never overwrites unasked."""
    try:
        text = content.decode()
    except UnicodeDecodeError:
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
    unless ``force``; a link there is never written through (``LinkRefused``), whatever ``force``."""
    import io

    import numpy as np

    path = os.path.abspath(path)
    folder = Confined(os.path.dirname(path))
    script = os.path.basename(path)
    job = os.path.splitext(script)[0] + ".sbatch"
    files = {script: _signed(exported.script).encode()}
    for name, value in exported.data.items():
        array = io.BytesIO()
        np.lib.format.write_array(array, np.asanyarray(value), allow_pickle=False)
        files[name] = array.getvalue()  # (named NAME.npy by the export)
    if slurm is not None:
        files[job] = _signed(job_script(exported, path, **slurm)).encode()
    with folder:
        for name in files:  # every file checked before any is written
            folder.refuse_links(name)
            present = folder.read(name) if name in (script, job) else None
            if present is not None and not force and not _ours_unchanged(present):
                raise FileExistsError(f"{folder.folder / name} exists and is not an export nobody edited since: it "
                                      "is kept. Name another file (-o), or replace it (--force)")
        return [str(folder.write(name, content)) for name, content in files.items()]


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
