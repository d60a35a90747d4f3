"""Plain mpiexec's reports of mpi4py's suite, kept between runs in the user's cache.

The baseline that each pool pass is compared with depends only on what plain mpiexec runs: the
MPI library and its launcher, mpi4py, Python and the packages of the environment, the suite's
files and its runner, the modules run together and in which order, the settings that MPI, Python
and the suite read, and the machine's cores and kernel. A kept baseline is named by a digest of
all of these (their contents, not where they are: each clean clone builds venvs of its own), so
that a change to any of them runs plain mpiexec again. Plain mpiexec's run of the suite costs
120-180 s of CPU per MPI here, about an eighth of `make test`.

    MPINB_SUITE_BASELINE=fresh   # run plain mpiexec anyway (and keep what it reports)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from importlib.metadata import distributions
from pathlib import Path

KEEP = 12  # baselines kept, the most recently used: three MPIs, a few versions of the runner
# What changes what MPI, its launcher or Python do: these variables' values are in the key
SETTING_PREFIXES = ("MPICH_", "MPIR_", "HYDRA_", "MPIEXEC_", "OMPI_", "PRTE_", "PMIX_", "I_MPI_", "FI_", "UCX_",
                    "HWLOC_", "MPI4PY_", "OMP_", "OPENBLAS_", "PYTHON", "COVERAGE_")
# These hold paths (which differ between clones) or a batch job's identity: only whether they are set
SET_OR_NOT = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONPYCACHEPREFIX", "LD_PRELOAD", "LD_LIBRARY_PATH",
              "COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG", "COVERAGE_RCFILE", "COVERAGE_FILE",
              "SLURM_JOB_ID", "PBS_JOBID")
# The MPI stack's files, by name: in the folder of the libmpi that mpi4py loads (and below it), and
# beside the launcher
MPI_FILE = re.compile(r"mpi|fabric|-fi\.so|pmix|prrte|prte|open-pal|open-rte|hwloc|event|libuc[pstm]|ucx|psm|hydra"
                      r"|orted")
SUITE_READS = re.compile(r"""(?:environ\.get|getenv|environ\[)\(?\s*['"]([A-Za-z_0-9]+)['"]""")


def baseline_key(suite: Path, runner: Path, modules: list[str], launcher: list[str], env: dict[str, str],
                 harness: Path) -> tuple[str, dict[str, object]]:
    """The digest that names the baseline of ``modules`` run together by ``launcher + [python,
    runner, ...]`` in ``env`` (``harness``: the test file that runs it), and what went into it
    (kept beside the baseline, for whoever wonders why it was run again)."""
    suite_files = {path.relative_to(suite): path.read_bytes() for path in sorted(suite.rglob("*"))
                   if path.is_file() and "__pycache__" not in path.parts}
    suite_reads = {name for path, text in suite_files.items() if path.suffix == ".py"
                   for name in SUITE_READS.findall(text.decode(errors="replace"))}
    parts: dict[str, object] = {
        "python": sys.version,
        "machine": [platform.machine(), platform.release(), os.cpu_count(), len(os.sched_getaffinity(0))],
        "packages": sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions()
                            if d.metadata["Name"] and d.metadata["Name"].lower() != "mpinb"}),
        "mpi": _mpi_library(env),
        "launcher": [*_mpi_files(Path(os.path.realpath(launcher[0])).parent, recurse=False), *launcher[1:]],
        "settings": sorted(f"{name}={value}" for name, value in env.items()
                           if (name.startswith(SETTING_PREFIXES) or name in suite_reads) and name not in SET_OR_NOT),
        "set": sorted(name for name in SET_OR_NOT if name in env),
        "suite": _digest_files(suite_files),
        "runner": [_digest_file(runner), _digest_file(harness)],
        "modules": modules,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24], parts


def load(folder: Path, key: str, modules: list[str]) -> tuple[dict[str, list[dict]], dict[str, float]] | None:
    """The kept reports and seconds of ``modules`` under ``key``, or None (none kept, or a fresh
    run asked for)."""
    if asked_for_fresh():
        return None
    path = folder / f"{key}.json"
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    reports = kept.get("reports") if isinstance(kept, dict) else None
    seconds = kept.get("seconds") if isinstance(kept, dict) else None
    if not isinstance(reports, dict) or not isinstance(seconds, dict) \
            or not all(module in reports and module in seconds for module in modules):
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # (used: the least recently used go first)
    return {module: reports[module] for module in modules}, {module: seconds[module] for module in modules}


def save(folder: Path, key: str, parts: dict[str, object], reports: dict[str, list[dict]],
         seconds: dict[str, float]) -> None:
    """Keep a baseline, written whole or not at all (sessions run side by side), and only the KEEP
    most recently used; a failure to keep one only costs a later run plain mpiexec's time."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=f".{key}.", suffix=".partial", delete=False) as file:
            json.dump({"measured": time.strftime("%Y-%m-%dT%H:%M:%S"), "of": parts, "reports": reports,
                       "seconds": seconds}, file)
        os.replace(file.name, folder / f"{key}.json")
    _evict(folder)


def forget(folder: Path, key: str) -> None:
    """Drop a kept baseline (the pool disagreed with it: the next run measures plain mpiexec)."""
    (folder / f"{key}.json").unlink(missing_ok=True)


def asked_for_fresh() -> bool:
    """Whether ``MPINB_SUITE_BASELINE=fresh`` asks for plain mpiexec's run whatever is kept."""
    asked = os.environ.get("MPINB_SUITE_BASELINE", "")
    if asked not in ("", "kept", "fresh"):
        raise ValueError(f"MPINB_SUITE_BASELINE={asked!r}: give 'fresh' (run plain mpiexec again) or "
                         "'kept' (the default: reuse a kept baseline)")
    return asked == "fresh"


def _evict(folder: Path) -> None:
    """Remove all but the KEEP most recently used baselines, and partial files an hour old (of
    a session stopped while it wrote). Another session may remove a file meanwhile."""
    def used(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    kept = sorted(folder.glob("*.json"), key=used, reverse=True)
    stale = [path for path in folder.glob(".*.partial") if used(path) < time.time() - 3600]
    for path in [*kept[KEEP:], *stale]:
        path.unlink(missing_ok=True)


def _mpi_library(env: dict[str, str]) -> list[str]:
    """The MPI library that mpi4py loads in this environment: its version text, and the digest of
    each file of MPI's stack in the folder of the libmpi it maps (a system MPI rebuilt keeps its
    version and its names)."""
    probe = ("import mpi4py; mpi4py.rc.initialize = False\n"
             "from mpi4py import MPI\n"
             "print(MPI.Get_library_version().strip().replace('\\n', ' '))\n"
             "print('\\n'.join(sorted({line.split()[-1] for line in open('/proc/self/maps')\n"
             "      if line.split()[-1].startswith('/') and '.so' in line.split()[-1]})))")
    said = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60,
                          check=True).stdout.splitlines()
    mapped = [Path(path) for path in said[1:]]
    folders = sorted({path.parent for path in mapped if path.name.startswith("libmpi")})
    extension = [f"{path.name}:{_digest_file(path)}" for path in mapped if path.name.startswith("MPI.")]
    return [said[0], *extension, *(entry for folder in folders for entry in _mpi_files(folder, recurse=True))]


def _mpi_files(folder: Path, recurse: bool) -> list[str]:
    """``name:digest`` of each compiled file of MPI's stack in ``folder`` (and in its subfolders but a
    Python's, if ``recurse``), named relative to it."""
    found = []
    for path in sorted(folder.rglob("*") if recurse else folder.iterdir()):
        inside = path.relative_to(folder).parts
        if recurse and inside[0].startswith("python"):
            continue
        if path.is_file() and MPI_FILE.search(path.name.lower()) and _is_program(path):
            found.append(f"{'/'.join(inside)}:{_digest_file(path)}")
    return found


def _is_program(path: Path) -> bool:
    """Whether the file is compiled code (scripts, pkg-config and libtool files name the folder
    they were installed in, which differs between clones)."""
    with open(path, "rb") as file:
        return file.read(4) == b"\x7fELF"


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _digest_files(files: dict[Path, bytes]) -> str:
    digest = hashlib.sha256()
    for path, content in files.items():
        digest.update(str(path).encode() + b"\0" + content)
    return digest.hexdigest()[:16]
