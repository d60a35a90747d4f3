"""Everything mpinb knows of Slurm.

It covers how ranks start in an allocation (srun's arguments) or as a job (the batch script
ipyparallel's launcher submits), whether such a job failed before its ranks came up (ipyparallel
would wait out its whole timeout), waiting until cancelled jobs have left the queue, and the batch
job of an exported notebook with its submission."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping

from ..common._ranges import parse_ranks
from ..errors import PoolStartError
from ._launch import find_mpiexec, launch_environment, mpi_family

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


# -- starting ranks under Slurm -------------------------------------------------------------------

def allocation_srun() -> str:
    """srun, for ranks started inside the current Slurm allocation."""
    if "SLURM_JOB_ID" not in os.environ:
        raise PoolStartError(
            "launcher 'srun' starts the ranks inside the current Slurm allocation, but this process "
            "is not in one (no $SLURM_JOB_ID). Run the notebook inside salloc or sbatch, or use "
            "launcher 'slurm' to submit a job for the ranks."
        )
    found = shutil.which("srun")
    if not found:
        raise PoolStartError("launcher 'srun': srun is not on PATH inside this allocation")
    return found


def _directives(**options: str | None) -> list[str]:
    """``#SBATCH --name="value"`` for each option that has a value, in the order given
    (``job_name`` is ``--job-name``). sbatch reads a directive's argument as a shell would, but
    not quite: white space ends it, ``#`` starts a comment, both kinds of quote quote, and a
    backslash escapes the next character, inside quotes too. So every value is double-quoted with
    its backslashes and double quotes escaped; one with a control character (a line break would
    start a line of its own) is refused."""
    lines = []
    for name, value in options.items():
        if not value:
            continue
        option = f"--{name.replace('_', '-')}"
        if _unprintable(value):
            raise ValueError(f"{option} {value!r}: a batch script's #SBATCH line cannot carry a control character "
                             "(a line break would start a line of its own); rename it")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'#SBATCH {option}="{escaped}"')
    return lines


def read_directives(script: str) -> dict[str, str]:
    """The options a batch script's ``#SBATCH`` lines give (``--output`` -> its value), read as
    sbatch reads them (see :func:`_directives`), up to the first line of commands."""
    options: dict[str, str] = {}
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        if line.startswith("#SBATCH "):
            option, _, value = line.removeprefix("#SBATCH ").strip().partition("=")
            options[option] = _sbatch_argument(value)
    return options


def _sbatch_argument(text: str) -> str:
    """One argument of a directive, as sbatch's parser takes it: quotes and escapes removed, up to
    unquoted white space or ``#``."""
    argument, quote, escaped = [], "", False
    for character in text:
        if escaped:
            argument.append(character)
            escaped = False
        elif character == "\\":
            escaped = True
        elif quote:
            if character == quote:
                quote = ""
            else:
                argument.append(character)
        elif character in "\"'":
            quote = character
        elif character.isspace() or character == "#":
            break
        else:
            argument.append(character)
    return "".join(argument)


def _unprintable(text: str) -> bool:
    return any(not character.isprintable() for character in text)


def slurm_job_files(log_dir: str, cluster_id: str, options: dict) -> dict[str, str]:
    """Our Slurm batch script (unless the user gave one): it keeps its script and output in the
    profile's log folder, not the notebook's, and carries the batch options itself (ipyparallel
    adds them only to its own template)."""
    if "batch_template" in options or "batch_template_file" in options:
        return {}
    lines = ["#!/bin/sh", *_directives(export="ALL", job_name="mpinb-{cluster_id}", ntasks="{n}",
                                       output=slurm_output(log_dir, cluster_id, "%j"), partition=options.get("queue"),
                                       time=options.get("timelimit"), account=options.get("account"))]
    # As mpiexec does, end the whole step when one task fails (srun would let the others run on).
    lines.append(" ".join(["srun", *srun_arguments(), "{program_and_args}"]))
    return {"batch_template": "\n".join(lines) + "\n",
            "batch_file_name": os.path.join(log_dir, f"slurm-{cluster_id}.sbatch")}


def srun_arguments() -> list[str]:
    """srun's arguments for the ranks: end every task when one fails, as mpiexec does (srun's
    default lets the others run on), and offer the process-management interface that this
    environment's MPI speaks (Open MPI: PMIx; MPICH: PMI-2) unless ``$SLURM_MPI_TYPE`` says."""
    args = ["--kill-on-bad-exit=1"]
    if not os.environ.get("SLURM_MPI_TYPE"):
        try:
            interface = SLURM_MPI_TYPES.get(mpi_family(find_mpiexec()) or "")
        except PoolStartError:  # no mpiexec here: the cluster's default interface it is
            interface = None
        if interface:
            args.append(f"--mpi={interface}")
    return args


SLURM_MPI_TYPES = {"Open MPI": "pmix", "MPICH": "pmi2"}


def slurm_output(log_dir: str, cluster_id: str, job: str) -> str:
    return os.path.join(log_dir, f"slurm-{cluster_id}-{job}.out")


# -- an exported notebook's batch job -------------------------------------------------------------

def batch_script(script: str, ranks: int, origin: str, launch: Mapping[str, str | None], time: str | None = None,
                 partition: str | None = None, account: str | None = None) -> str:
    """A Slurm batch script that runs ``script`` (an exported program, an absolute path, exported
    from ``origin``) on ``ranks`` tasks as the notebook's pool ran it (``launch``: how the pool
    was started): in the Python environment the notebook ran in, started by ``srun`` when the pool
    was a Slurm job (or inside one), else by this environment's ``mpiexec``, which takes the job's
    nodes from Slurm. Its output goes beside the script."""
    folder, name = os.path.split(script)
    stem = os.path.splitext(name)[0]
    for what, text in (("the script's path", script), ("the notebook's name", origin)):
        if _unprintable(text):
            raise ValueError(f"{what} {text!r} holds a control character (a line break, a tab...): a batch script "
                             "would read it as a line of commands of its own; rename it")
    lines = ["#!/bin/bash", *_directives(job_name=stem, ntasks=str(ranks), time=time or launch.get("time") or "0:30:00",
                                         output=f"{os.path.join(folder, stem).replace('%', '%%')}-%j.out",
                                         partition=partition or launch.get("partition"),
                                         account=account or launch.get("account"))]
    lines += ["", f"# {name}: exported by mpinb from {origin}, run in the Python environment the notebook "
                  f"ran in ({sys.prefix}).",
              f"export PATH={shlex.quote(os.path.dirname(sys.executable))}:$PATH"]
    for key, value in launch_environment(0).items():  # what this machine's MPI needs to run at all
        lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(f"cd {shlex.quote(folder)}")
    program = [sys.executable, script]
    if launch.get("launcher") in ("slurm", "srun"):
        lines.append(shlex.join(["srun", *srun_arguments(), *program]))
    else:
        lines.append(shlex.join([launch.get("mpiexec") or find_mpiexec(), "-n", str(ranks), *program]))
    return "\n".join(lines) + "\n"


def submit(job: str) -> tuple[str, str]:
    """Submit a batch script with ``sbatch``: the job's id and the file its output goes to."""
    if not os.path.isfile(job):
        raise FileNotFoundError(f"no batch script at {job}: `mpinb export NOTEBOOK --slurm` writes one")
    if shutil.which("sbatch") is None:
        raise FileNotFoundError("sbatch is not on PATH: submit from a machine of the Slurm cluster (its login node)")
    done = subprocess.run(["sbatch", "--parsable", job], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"sbatch refused {job}: {(done.stderr or done.stdout).strip()}")
    job_id = done.stdout.strip().split(";")[0]
    with open(job) as handle:
        output = read_directives(handle.read()).get("--output")
    if output is None:
        return job_id, os.path.join(os.path.dirname(os.path.abspath(job)), f"slurm-{job_id}.out")
    return job_id, output_path(output, job_id)


def output_path(pattern: str, job_id: str) -> str:
    """An ``--output`` pattern as Slurm fills it in for job ``job_id`` (``%j``; ``%%`` is ``%``)."""
    return re.sub(r"%([%j])", lambda match: "%" if match[1] == "%" else job_id, pattern)
