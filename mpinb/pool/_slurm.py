"""The Slurm jobs of a pool started with ipyparallel's Slurm launcher: whether one failed before
its ranks came up (ipyparallel would wait out its whole timeout), and waiting until cancelled
jobs have left the queue."""

from __future__ import annotations

import os
import re
import subprocess
import time

from .._ranges import parse_ranks
from ._launch import slurm_output

_ANY_SIZE = 1 << 30  # srun's task lists ("0,2-3") are read as targets are, in a world this large


def job_of(launcher) -> str | None:
    """The job id of an engine launcher that submitted a Slurm job, else ``None``."""
    job = getattr(launcher, "job_id", None)
    return str(job) if job and type(launcher).__name__.startswith("Slurm") else None


def jobs(cluster) -> list[str]:
    return [job for job in map(job_of, cluster.engines.values()) if job]


def why_it_failed(launcher) -> str | None:
    """Why the launcher's job cannot bring its ranks up, with the job's output; ``None`` while it
    is queued or starting normally. A job that left the queue has failed; so has one where srun
    reports a failed task while the other tasks wait."""
    job = job_of(launcher)
    if job is None:
        return None
    state = _state(job)
    path, output = _output(launcher, job)
    if state == "":
        text = f"the Slurm job {job} that was to run the ranks ended before they came up."
    elif "srun: error:" in output:
        text = f"a task of the Slurm job {job} failed while the ranks were starting."
    else:
        return None  # pending, running, or squeue could not tell
    return text + (f"\n\nIts output ({path}):\n{output}" if output else " It left no output.")


def job_ended(launcher) -> bool:
    """Whether the launcher's Slurm job has left the queue (``False`` for other launchers)."""
    job = job_of(launcher)
    return job is not None and _state(job) == ""


def failed_tasks(launcher, seconds: float = 5.0) -> tuple[list[int], str, str] | None:
    """``(ranks, host, how)`` of the first task failure srun reported in the job's output
    ("srun: error: node2: tasks 2-3: Killed"): srun reports the first failure first, then the tasks
    it ended because of it. Waits up to ``seconds`` for srun to write it."""
    job = job_of(launcher)
    if job is None:
        return None
    deadline = time.monotonic() + seconds
    while True:
        found = re.search(r"srun: error: (\S+): tasks? ([\d,-]+): (.+)", _output(launcher, job)[1])
        if found:
            return parse_ranks(found.group(2), _ANY_SIZE), found.group(1), found.group(3).strip()
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def wait_until_gone(job_ids: list[str], seconds: float = 15.0, grace: float = 3.0) -> None:
    """scancel returns before the job ends: wait, so that a stopped pool has no job left. A job
    still there after ``grace`` seconds (a step whose srun no longer answers, after a host failed)
    gets SIGKILL on every process of every step, as a user would do by hand."""
    began = time.monotonic()
    killed = False
    for job in job_ids:
        while _state(job) not in ("", None) and time.monotonic() < began + seconds:
            if not killed and time.monotonic() > began + grace:
                subprocess.run(["scancel", "--signal=KILL", "--full", *job_ids], capture_output=True, timeout=30)
                killed = True
            time.sleep(0.1)


def _output(launcher, job: str) -> tuple[str, str]:
    """The last lines of the job's output file: ours, the one its script names, or Slurm's default."""
    ours = slurm_output(os.path.dirname(launcher.batch_file), getattr(launcher, "cluster_id", ""), job)
    named = re.search(r"^#SBATCH\s+(?:--output[= ]|-o\s*)(\S+)", launcher.batch_template or "", re.M)
    candidates = [ours, os.path.join(getattr(launcher, "work_dir", "") or ".", f"slurm-{job}.out")]
    if named:
        candidates.insert(0, named.group(1).replace("%j", job))
    for path in candidates:
        try:
            with open(path, errors="replace") as handle:
                return path, "\n".join(handle.read().strip().splitlines()[-20:])
        except OSError:
            continue
    return "", ""


def _state(job: str) -> str | None:
    """The job's state as squeue shows it, ``""`` once it left the queue, ``None`` if unknown."""
    try:
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if queued.returncode != 0:
        return "" if "Invalid job id" in queued.stderr else None
    return queued.stdout.strip()
