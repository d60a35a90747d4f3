"""What MPI and its launcher leave on a host when their processes do not end in order.

A rank unlinks MPI's shared-memory segments in ``MPI_Finalize``, which ranks of a pool never call
(see ``rank/_engine_main.py``): without a clean-up every stopped pool left its segments in
``/dev/shm`` (5 GB after a day of tests here). MPICH's ``hydra_pmi_proxy`` writes the host's
topology to a file (the path is compiled in, no ``TMPDIR``) and removes it only when it exits in
order: a killed ``mpiexec`` left one per pool; Open MPI's ``prterun`` keeps its session in a
folder named after its pid (``$TMPDIR/ompi.<pid>``), which it also removes only at an orderly
exit. Each file is found through the processes that map it or hold it open (each folder through
the launcher's pid), and removed only while it is still that file (its inode): a new job may
reuse the name.

Standard library only: a rank imports it as it exits, the watchdog (a script) when its owner dies.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable

# (Intel MPI unlinks its own once every rank has mapped it: one is left by a rank that dies first)
MPI_SEGMENT_PREFIXES = ("/dev/shm/mpich_shm_", "/dev/shm/sm_segment.", "/dev/shm/vader_segment.",
                        "/dev/shm/Intel_MPI_")
LAUNCHER_FILE_PREFIXES = ("/tmp/hydra_hwloc_xmlfile_",)

Leftover = tuple[str, int]  # (path, inode)


def mpi_files(pids: Iterable[int]) -> set[Leftover]:
    """The MPI shared-memory files that these processes map or hold open (a segment's maker holds
    it open before it maps it) and the launcher's files they hold open."""
    pids = set(pids)
    return mpi_segments(pids) | open_files(pids, MPI_SEGMENT_PREFIXES + LAUNCHER_FILE_PREFIXES)


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
    return open_files(pids, LAUNCHER_FILE_PREFIXES)


def open_files(pids: Iterable[int], prefixes: tuple[str, ...]) -> set[Leftover]:
    """The files whose paths start with one of ``prefixes`` that these processes hold open."""
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                path = os.readlink(f"/proc/{pid}/fd/{fd}")
                if path.startswith(prefixes):
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


def launcher_sessions(pids: Iterable[int]) -> set[Leftover]:
    """The session folders of Open MPI's launcher among these processes (prterun's, named after
    its pid), where they exist and belong to this user."""
    found = set()
    for pid in set(pids):
        path = os.path.join(tempfile.gettempdir(), f"ompi.{pid}")
        try:
            stat = os.lstat(path)
        except OSError:
            continue
        if os.path.isdir(path) and not os.path.islink(path) and stat.st_uid == os.getuid():
            found.add((path, stat.st_ino))
    return found


def remove_folders(leftovers: Iterable[Leftover]) -> None:
    """Remove each folder that is still the one found (same inode), with what it holds."""
    for path, inode in leftovers:
        try:
            if os.lstat(path).st_ino == inode:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def remove_own_segments() -> None:
    """What ``MPI_Finalize`` would unlink for this process: ranks on this host that still map the
    segments keep them until they exit."""
    remove_files(mpi_segments([os.getpid()]))
