"""What MPI and its launcher leave on a host when their processes do not end in order.

A rank unlinks MPI's shared-memory segments in ``MPI_Finalize``, which ranks of a pool never call
(see ``rank/_engine_main.py``): without a clean-up every stopped pool left its segments in
``/dev/shm`` (5 GB after a day of tests here). MPICH's ``hydra_pmi_proxy`` writes the host's
topology to a file (the path is compiled in, no ``TMPDIR``) and removes it only when it exits in
order: a killed ``mpiexec`` left one per pool. Each file is found through the processes that map
it or hold it open, and removed only while it is still that file (its inode): a new job may reuse
the name.

Standard library only: a rank imports it as it exits, the watchdog (a script) when its owner dies.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

MPI_SEGMENT_PREFIXES = ("/dev/shm/mpich_shm_", "/dev/shm/sm_segment.", "/dev/shm/vader_segment.")
LAUNCHER_FILE_PREFIXES = ("/tmp/hydra_hwloc_xmlfile_",)

Leftover = tuple[str, int]  # (path, inode)


def mpi_files(pids: Iterable[int]) -> set[Leftover]:
    """The MPI shared-memory files that these processes map and the launcher's files they hold open."""
    pids = set(pids)
    return mpi_segments(pids) | launcher_files(pids)


def mpi_segments(pids: Iterable[int]) -> set[Leftover]:
    """The MPI shared-memory files that these processes map."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as handle:
                for line in handle:
                    fields = line.rstrip("\n").split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith(MPI_SEGMENT_PREFIXES):
                        found.add((fields[5], int(fields[4])))
        except (OSError, ValueError):
            continue
    return found


def launcher_files(pids: Iterable[int]) -> set[Leftover]:
    """The launcher's temporary files that these processes hold open."""
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                path = os.readlink(f"/proc/{pid}/fd/{fd}")
                if path.startswith(LAUNCHER_FILE_PREFIXES):
                    found.add((path, os.stat(f"/proc/{pid}/fd/{fd}").st_ino))
            except OSError:
                continue
    return found


def remove_files(leftovers: Iterable[Leftover]) -> None:
    """Unlink each file that is still the one found (same inode)."""
    for path, inode in leftovers:
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except OSError:
            pass


def remove_own_segments() -> None:
    """What ``MPI_Finalize`` would unlink for this process: ranks on this host that still map the
    segments keep them until they exit."""
    remove_files(mpi_segments([os.getpid()]))
