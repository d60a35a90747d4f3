"""`make test`'s schedule: every test on MPICH, the every_mpi ones on Open MPI and Intel MPI too.

    python .ci/suite.py            # every stage (what `make test` and CI run)
    python .ci/suite.py --list     # the stages, what each selects, and its pytest command
    python .ci/suite.py --only install-openmpi,openmpi-slow,openmpi

Each stage is a pytest session (or the docs build, or an MPI's install) started with
``subprocess``; stages run side by side while their weights (about the cores each keeps busy) fit
on this machine's cores, so that the stages that mostly wait (hosts to start, timeouts to pass) run
beside those that compute (mpi4py's suite, the browser). Two stages that make hosts of their own
(network namespaces, a Slurm cluster) never run at once. Every test session marks its processes
(tests/_processes.py), so that none takes another's pools for leaks. A failing stage does not stop
the others; the run fails at the end, naming each failed stage. The run ends with a table of each
stage's wall and CPU time and the 20 slowest test files, also written to
test-artifacts/timings.json; each stage's output is in test-artifacts/stages/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
STAGES_FOLDER = ARTIFACTS / "stages"
VENVS = {"mpich": ".venv", "openmpi": ".venv-openmpi", "impi": ".venv-impi"}


@dataclass
class Stage:
    """One pytest session on one MPI: the tests of tests/ that ``select`` (a marker expression,
    empty for all) takes."""

    name: str
    mpi: str
    select: str = ""
    weight: float = 1.0  # the cores it keeps busy, roughly
    group: str = ""  # stages of one group run one at a time
    after: list[str] = field(default_factory=list)  # stages that must have ended first
    kind: str = "pytest"  # or "install", "site"
    env: dict[str, str] = field(default_factory=dict)

    def selects(self, marks: set[str]) -> bool:
        """Whether this stage runs a test that carries ``marks``."""
        from _pytest.mark.expression import Expression

        if self.kind != "pytest":
            return False
        return not self.select or Expression.compile(self.select).evaluate(lambda name: name in marks)

    def command(self) -> list[str]:
        python = str(ROOT / VENVS[self.mpi] / "bin" / "python")
        if self.kind in ("install", "site"):
            return ["make", "--no-print-directory", "install" if self.kind == "install" else "docs", f"MPI={self.mpi}"]
        return [python, "-m", "pytest", "tests", *(["-m", self.select] if self.select else [])]


# What the environment may set, else these: 40 random aborts in the stress test on MPICH
# (`MPINB_STRESS_ABORTS=500 make test` for more); the other MPIs run what may differ between MPIs
# (every_mpi), with 12 aborts and mpi4py's suite traced only (tracing is what could change results
# there; the untraced pass is mpi4py's own objects in a pool, the same on every MPI).
def _defaults(**values: str) -> dict[str, str]:
    return {name: os.environ.get(name, value) for name, value in values.items()}


MPICH = _defaults(MPINB_STRESS_ABORTS="40")
OTHER_MPI = _defaults(MPINB_STRESS_ABORTS="12", MPINB_SUITE_PASSES="traced", MPINB_SUITE_SILENT="0")

# By priority: a stage starts once its weight fits beside the running ones, its group is free
# and the stages it comes after have ended. A weight is about what the stage kept busy in a clean
# clone's run (its CPU seconds over its wall seconds), so that three lanes share the two cores:
# MPICH's tests; the other MPIs' tests, one stage at a time while the hosts' lane runs; and the
# stages that make hosts, which mostly wait (for timeouts, for Slurm, for ranks in other
# namespaces). The installs (mostly downloads) run beside the site, which runs before any tests:
# its tutorials time MPI and check the shape of what they measure. Open MPI's tests are two stages,
# the long ones (mpi4py's suite, the stress campaign) and the others, so that both run at once
# when the hosts' lane is done. (An earlier try of three lanes was slower than two; this one, with
# MPICH's host tests out of MPICH's session and Open MPI's split, was faster.)
STAGES = [
    Stage("site", "mpich", kind="site", weight=1.4),
    Stage("install-impi", "impi", kind="install", weight=0.3),
    Stage("install-openmpi", "openmpi", kind="install", weight=0.3),
    Stage("mpich", "mpich", "not hosts", after=["site"], weight=1.0, env=MPICH),
    Stage("mpich-hosts", "mpich", "hosts", group="hosts", after=["site"], weight=0.4, env=MPICH),
    Stage("impi", "impi", "every_mpi and not hosts", after=["install-impi", "site"], weight=0.5,
          env=OTHER_MPI),
    Stage("openmpi-hosts", "openmpi", "every_mpi and hosts", group="hosts", after=["install-openmpi", "site"],
          weight=0.4, env=OTHER_MPI),
    Stage("openmpi-slow", "openmpi", "every_mpi and slow and not hosts", after=["install-openmpi", "site"],
          weight=0.5, env=OTHER_MPI),
    Stage("openmpi", "openmpi", "every_mpi and not slow and not hosts", after=["install-openmpi", "site"],
          weight=0.5, env=OTHER_MPI),
]
# What runs on each MPI, as a marker expression: every test on MPICH; on the others, what may differ
# between MPIs, less (on Intel MPI) the tests that make hosts, which were never run there (its
# runtime's launcher across network-namespace hosts and Slurm's PMI are untried here).
RUNS_ON = {"mpich": "", "openmpi": "every_mpi", "impi": "every_mpi and not hosts"}
CAPACITY = float(len(os.sched_getaffinity(0)))  # the cores this run may use
# Each stage gets SIGTERM when this process ends, however it ends (a stage runs in a session of its
# own, so that stopping it reaches its whole tree: a CI job's end would not)
ENDS_WITH_THIS_PROCESS = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []


@dataclass
class Ran:
    stage: Stage
    began: float
    ended: float = 0.0
    code: int | None = None
    cpu_s: float = 0.0
    said: str = ""  # pytest's last line

    @property
    def ok(self) -> bool:
        return self.code == 0


class Schedule:
    """Starts the stages as they fit, and waits for each in a thread of its own."""

    def __init__(self, stages: list[Stage]):
        self.waiting = list(stages)
        self.running: dict[str, tuple[subprocess.Popen, Ran]] = {}
        self.done: dict[str, Ran] = {}
        self.known = {stage.name for stage in stages}
        self.lock = threading.Condition()
        self.start = time.monotonic()

    def run(self) -> list[Ran]:
        with self.lock:
            while self.waiting or self.running:
                self._start_what_fits()
                self.lock.wait(timeout=5)
        return sorted(self.done.values(), key=lambda ran: ran.began)

    def _start_what_fits(self) -> None:
        for stage in list(self.waiting):
            busy = sum(proc_ran[1].stage.weight for proc_ran in self.running.values())
            groups = {proc_ran[1].stage.group for proc_ran in self.running.values()} - {""}
            ready = all(name in self.done or name not in self.known for name in stage.after)
            fits = busy + stage.weight <= CAPACITY + 1e-9 or not self.running
            if not (fits and ready and stage.group not in groups):
                continue
            self.waiting.remove(stage)
            self._launch(stage)

    def _launch(self, stage: Stage) -> None:
        STAGES_FOLDER.mkdir(parents=True, exist_ok=True)
        timings = STAGES_FOLDER / f"{stage.name}.json"
        timings.unlink(missing_ok=True)  # (a stage that dies early must not report a past run's)
        log = open(STAGES_FOLDER / f"{stage.name}.log", "w")
        env = {**os.environ, **stage.env, "MPINB_TIMINGS": str(timings)}
        site_folder = None
        if stage.kind == "site":
            site_folder = tempfile.mkdtemp(prefix="mpinb-site-")
            env |= {"XDG_RUNTIME_DIR": site_folder, "IPYTHONDIR": os.path.join(site_folder, "ipython"),
                    "MPINB_VERIFY": "1", "MPINB_TEST_SESSION": f"site-{os.getpid()}"}
        ran = Ran(stage, time.monotonic() - self.start)
        print(f"mpinb: {ran.began:6.0f} s  {stage.name} starts: {' '.join(stage.command())}", flush=True)
        try:
            proc = subprocess.Popen(ENDS_WITH_THIS_PROCESS + stage.command(), cwd=ROOT, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as err:  # (a venv that is not there: --only without its install stage)
            log.write(f"mpinb: {stage.name} could not start: {err}\n")
            log.close()
            ran.ended, ran.code, ran.said = ran.began, 127, f"could not start: {err}"
            self.done[stage.name] = ran
            _report(ran)
            return
        self.running[stage.name] = (proc, ran)
        threading.Thread(target=self._wait, args=(proc, ran, log, site_folder), daemon=True).start()

    def _wait(self, proc: subprocess.Popen, ran: Ran, log, site_folder: str | None) -> None:
        code, cpu_s = 1, 0.0
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # (its CPU time and that of what it waited for)
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            cpu_s = usage.ru_utime + usage.ru_stime
            log.close()
            if site_folder is not None:
                left = _site_leftovers(site_folder)
                if left:
                    with open(log.name, "a") as handle:
                        handle.write(f"\nmpinb: the site's pools left these behind: {left}\n")
                    code = code or 1
        finally:
            with self.lock:
                ran.ended, ran.code, ran.cpu_s = time.monotonic() - self.start, code, cpu_s
                ran.said = _last_line(Path(log.name))
                del self.running[ran.stage.name]
                self.done[ran.stage.name] = ran
                _report(ran)
                self.lock.notify()

    def stop(self) -> None:
        """Ends every running stage (each in a session of its own; the pools' watchdogs sweep)."""
        for proc, _ in list(self.running.values()):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def _site_leftovers(folder: str) -> list[str]:
    """What the docs build's pools left in their runtime and IPython folders (nothing, if each
    stopped cleanly); the folder is removed."""
    left = [str(path) for path in Path(folder).glob("mpinb-*/*")]
    profile = Path(folder, "ipython", "profile_mpinb")
    left += [str(path) for name in ("log", "security", "stacks") for path in (profile / name).rglob("*")
             if path.is_file()]
    shutil.rmtree(folder, ignore_errors=True)
    return left


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no output)"


def _report(ran: Ran) -> None:
    """A stage's result as it ends: its last line, or its whole output if it failed."""
    verdict = "passed" if ran.ok else f"FAILED (exit {ran.code})"
    print(f"mpinb: {ran.ended:6.0f} s  {ran.stage.name} {verdict} after {ran.ended - ran.began:.0f} s: {ran.said}",
          flush=True)
    if not ran.ok:
        print(f"---- {ran.stage.name}: test-artifacts/stages/{ran.stage.name}.log ----")
        print((STAGES_FOLDER / f"{ran.stage.name}.log").read_text(errors="replace"), flush=True)
        print(f"---- end of {ran.stage.name} ----", flush=True)


# The lines of a failed stage's log that say what failed: pytest's summary lines, and the docs
# build's errors with the notebook each names.
_FAILURE_LINE = re.compile(r"^(FAILED|ERROR) |\.ipynb\b.*\b(Error|failed|timed out)|\b(Error|failed)\b.*\.ipynb\b"
                           r"|^[\w.]*(Error|Interrupted|Exception)\b: |Timeout waiting for execute reply")
_MOST_LINES = 20


def why_failed(log: str) -> list[str]:
    """What a failed stage's log says failed, in at most 20 lines of at most 300 characters: the
    whole log is printed as the stage ends, but a CI page that shows only a run's end would not
    name the failure."""
    lines = [line.rstrip() for line in log.splitlines() if _FAILURE_LINE.search(line.strip())]
    lines = list(dict.fromkeys(lines))  # (an error repeated by every worker, once)
    shown = [line if len(line) <= 300 else line[:297] + "..." for line in lines[:_MOST_LINES]]
    if len(lines) > _MOST_LINES:
        shown.append(f"... and {len(lines) - _MOST_LINES} more such lines")
    return shown or ["(no line of its log names a failure: its end is above)"]


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) // 2**20 for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal")), 0)
    return (f"{os.cpu_count()} cores ({model}; this run may use {CAPACITY:.0f}), {memory} GiB, "
            f"Python {platform.python_version()}")


def cpu_ticks() -> tuple[int, int]:
    """The machine's (busy, all) CPU ticks since boot, every process's (/proc/stat): what the run
    left idle, which the stages' own CPU times cannot say (a pool's daemons are not reaped)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]] + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq  # (guest time is inside user's; steal is another VM's)
    return busy, busy + idle + iowait + steal


def summary(runs: list[Ran], wall: float, ticks: tuple[int, int] = (0, 0)) -> dict:
    """The table printed at the end, as data: each stage, the 20 slowest test files, and every file
    (by CPU time)."""
    files = []
    for ran in runs:
        path = STAGES_FOLDER / f"{ran.stage.name}.json"
        if path.exists():
            files += [{"file": file, "stage": ran.stage.name, "seconds": round(row["seconds"], 1),
                       "cpu_s": round(row["cpu_s"], 1)} for file, row in json.loads(path.read_text()).items()]
    busy = sum(ran.cpu_s for ran in runs)
    return {"machine": machine(), "wall_s": round(wall), "cpu_s": round(busy),
            "cores_busy": round(busy / wall / (os.cpu_count() or 1), 2) if wall else 0,
            "machine_busy": round(ticks[0] / ticks[1], 2) if ticks[1] else 0,
            "stages": [{"stage": ran.stage.name, "mpi": ran.stage.mpi, "began_s": round(ran.began),
                        "wall_s": round(ran.ended - ran.began), "cpu_s": round(ran.cpu_s), "ok": ran.ok,
                        "said": ran.said} for ran in runs],
            "slowest_files": sorted(files, key=lambda row: -row["seconds"])[:20],
            "files": sorted(files, key=lambda row: -row["cpu_s"])}


def print_table(table: dict) -> None:
    print(f"\nmpinb: make test on {table['machine']}: {table['wall_s']} s, {table['cpu_s']} CPU s "
          f"({table['cores_busy']:.0%} of the cores, counting the processes each stage waited for; "
          f"this machine's cores were busy {table['machine_busy']:.0%} of the run (/proc/stat: every process)")
    print(f"{'stage':16} {'MPI':8} {'began':>6} {'wall s':>7} {'CPU s':>6}  result")
    for row in table["stages"]:
        print(f"{row['stage']:16} {row['mpi']:8} {row['began_s']:6} {row['wall_s']:7} {row['cpu_s']:6}  "
              f"{'ok' if row['ok'] else 'FAILED'}: {row['said']}")
    print("\nthe 20 slowest test files (setup, call and teardown of each test; CPU s: the session's and"
          " the processes it reaped):")
    print(f"{'wall s':>8} {'CPU s':>7}  {'stage':16} file")
    for row in table["slowest_files"]:
        print(f"{row['seconds']:8.1f} {row['cpu_s']:7.1f}  {row['stage']:16} {row['file']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the stages and their commands, run nothing")
    parser.add_argument("--only", help="comma-separated stage names (their `after` stages are not run)")
    args = parser.parse_args(argv)
    stages = STAGES
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {stage.name for stage in STAGES}
        if unknown:
            parser.error(f"no stage named {', '.join(sorted(unknown))}; --list shows them")
        stages = [stage for stage in STAGES if stage.name in names]
    if args.list:
        for stage in stages:
            print(f"{stage.name:16} weight {stage.weight:3}  {' '.join(stage.command())}")
        return 0
    # A background job of a non-interactive shell (how CI starts it) ignores SIGINT: stopping by
    # hand is SIGTERM then; each ends every stage (and so does this process's death: see
    # ENDS_WITH_THIS_PROCESS).
    schedule = Schedule(stages)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda number, _: (schedule.stop(), sys.exit(128 + number)))
    print(f"mpinb: {len(stages)} stages on {machine()}; each one's output: test-artifacts/stages/", flush=True)
    began, ticks_before = time.monotonic(), cpu_ticks()
    try:
        runs = schedule.run()
    finally:
        schedule.stop()
    ticks_after = cpu_ticks()
    table = summary(runs, time.monotonic() - began,
                    (ticks_after[0] - ticks_before[0], ticks_after[1] - ticks_before[1]))
    print_table(table)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(table, indent=1))
    failed = [ran for ran in runs if not ran.ok]
    for ran in failed:
        print(f"\nmpinb: why {ran.stage.name} failed (from test-artifacts/stages/{ran.stage.name}.log):")
        print("\n".join("  " + line for line in why_failed(
            (STAGES_FOLDER / f"{ran.stage.name}.log").read_text(errors="replace"))))
    if failed:
        print(f"mpinb: these stages failed: {' '.join(ran.stage.name for ran in failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
