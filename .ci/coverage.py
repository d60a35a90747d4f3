"""`make coverage`: line coverage of mpinb per package, measured in every Python process the tests
start (the notebook side, the ranks, the controller, the watchdog, the kernels), on MPICH.

    python .ci/coverage.py          # make test-quick's selection (marked quick)
    python .ci/coverage.py --all    # every MPICH test (the other MPIs' runs are not measured)

coverage.py's ``patch = subprocess`` starts measuring in each Python process started with this
environment (the ranks inherit it through mpiexec); ``sigterm`` and ``_exit`` save the data of
ranks that a pool stops. The data and an HTML report go to test-artifacts/coverage/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-artifacts" / "coverage"

CONFIG = """\
[run]
source = mpinb
parallel = true
data_file = {data}
patch = subprocess, _exit
sigterm = true
disable_warnings = no-data-collected, module-not-measured
omit = */kernelspec/*
"""


def per_package(report: dict) -> dict[str, tuple[int, int]]:
    """(statements, covered) of each package of mpinb (``mpinb/`` alone: its top-level modules)."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path, data in report["files"].items():
        where = Path(path) if Path(path).is_absolute() else ROOT / path
        if not where.is_relative_to(ROOT / "mpinb"):
            continue
        parts = where.relative_to(ROOT / "mpinb").parts
        package = f"mpinb/{parts[0]}" if len(parts) > 1 else "mpinb/ (its own modules)"
        totals[package][0] += data["summary"]["num_statements"]
        totals[package][1] += data["summary"]["covered_lines"]
    return {name: (statements, covered) for name, (statements, covered) in sorted(totals.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--all", action="store_true", help="every MPICH test, not only make test-quick's")
    args, pytest_args = parser.parse_known_args(argv)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    rcfile = OUT / "coveragerc"
    rcfile.write_text(CONFIG.format(data=OUT / "data"))
    env = {**os.environ, "COVERAGE_RCFILE": str(rcfile)}
    coverage = [sys.executable, "-m", "coverage"]
    selection = [] if args.all else ["-m", "quick"]
    tests = subprocess.run([*coverage, "run", "-m", "pytest", *selection, *pytest_args], cwd=ROOT, env=env)
    if not list(OUT.glob("data.*")):
        print(f"mpinb: no coverage data was written (the tests exited with {tests.returncode} before any ran)")
        return tests.returncode or 1
    combined = subprocess.run([*coverage, "combine", "-q"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    if combined.returncode:
        print(combined.stderr, end="", file=sys.stderr)
        return combined.returncode
    unreadable = list(OUT.glob("data.*"))  # what combine could not read (it warns of each), it leaves
    for path in unreadable:
        path.unlink()
    subprocess.run([*coverage, "json", "-q", "-o", str(OUT / "coverage.json")], cwd=ROOT, env=env, check=True)
    subprocess.run([*coverage, "html", "-q", "-d", str(OUT / "html")], cwd=ROOT, env=env, check=True)
    table = per_package(json.loads((OUT / "coverage.json").read_text()))
    statements = sum(s for s, _ in table.values())
    covered = sum(c for _, c in table.values())
    print(f"\nline coverage of mpinb ({'every MPICH test' if args.all else 'make test-quick'}; "
          f"HTML in {OUT.relative_to(ROOT)}/html):")
    for name, (s, c) in table.items():
        print(f"  {name:28} {c:6} of {s:6} lines  {c / max(s, 1):4.0%}")
    print(f"  {'all of mpinb':28} {covered:6} of {statements:6} lines  {covered / max(statements, 1):4.0%}")
    if unreadable:
        print(f"  (not counted: the data of {len(unreadable)} processes, unreadable: each was killed while writing it)")
    if tests.returncode:
        print(f"mpinb: the tests failed (exit {tests.returncode}): the figures above count what ran")
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
