"""Run modules of mpi4py's own test suite, as its ``test/main.py`` does, and report each test.

    mpiexec -n 2 python runner.py TESTDIR REPORT_PREFIX MODULE [MODULE...]

For each module every rank writes ``REPORT_PREFIX+MODULE.RANK.json``: ``{"outcomes": {test id:
ok|fail|error|skip}, "details": {test id: traceback}, "ran": N, "seconds": S}``. The same script
runs under plain ``mpiexec`` and through ``Pool.run_file``, so the two reports compare test by
test. Several modules run one after the other in one process, as a pool runs them, each with the
suite's own modules imported anew, as a pool's run imports them.
"""

import json
import os
import sys
import time
import unittest


class Recording(unittest.TextTestResult):
    """Keeps one outcome per test (a failing subtest fails its test)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes: dict = {}
        self.details: dict = {}

    def _note(self, test, outcome, err=None):
        test_id = test.id()
        if self.outcomes.get(test_id) in ("fail", "error") and outcome in ("ok", "skip"):
            return
        self.outcomes[test_id] = outcome
        if err is not None:
            self.details[test_id] = self._exc_info_to_string(err, test)[-3000:]

    def addSuccess(self, test):
        super().addSuccess(test)
        self._note(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._note(test, "fail", err)

    def addError(self, test, err):
        super().addError(test, err)
        # errors outside a test (a module that fails to import, setUpClass) have their own ids
        self._note(test, "error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._note(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._note(test, "ok")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._note(test, "ok")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._note(test, "fail" if failed else "error", err)


def main() -> None:
    testdir, prefix, *modules = sys.argv[1:]
    sys.path.insert(0, testdir)
    from mpi4py import MPI

    for module in modules:
        before = set(sys.modules)
        began = time.monotonic()
        report = run(testdir, module)
        report["seconds"] = time.monotonic() - began
        path = f"{prefix}{module}.{MPI.COMM_WORLD.Get_rank()}.json"
        with open(path + ".part", "w") as handle:
            json.dump(report, handle)
        os.replace(path + ".part", path)  # (whoever waits for the report reads it whole)
        for name in set(sys.modules) - before:  # (the suite's helpers too: anew for the next)
            if os.path.realpath(getattr(sys.modules[name], "__file__", None) or "/").startswith(
                    os.path.join(os.path.realpath(testdir), "")):
                del sys.modules[name]


def run(testdir: str, module: str) -> dict:
    """One module's outcomes, through mpi4py's own test program (same options, same set-up)."""
    sys.argv = [os.path.join(testdir, "main.py"), module]
    from main import TestProgram

    results = []

    class Runner(unittest.TextTestRunner):
        def _makeResult(self):
            results.append(super()._makeResult())
            return results[-1]

    try:
        TestProgram(module=None, testRunner=Runner(stream=sys.stderr, resultclass=Recording))
    except SystemExit:  # main.py's program always exits
        pass
    result = results[0] if results else None
    return {
        "ran": result.testsRun if result else 0,
        "outcomes": result.outcomes if result else {},
        "details": result.details if result else {},
    }


if __name__ == "__main__":
    main()
