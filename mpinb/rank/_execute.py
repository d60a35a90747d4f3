"""Runs a cell or a script on one rank and reports what happened as a plain dict.

Every exception of user code is caught here and described (type, message, user-only traceback,
line), so that the notebook can merge identical failures across ranks and show each once.
"""

from __future__ import annotations

import ast
import builtins
import functools
import io
import linecache
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from ..common import _progress
from ..common._protocol import Failure, Limits, Reply, failure, reply
from ..common._values import pack
from . import _debugger, _output, _user_code
from ._output import capped_output
from .mpi import _left_behind, _waiting, _world
from .mpi._calls import PACKAGE_DIR
from .mpi._recorder import RECORDER
from .mpi._tracing import recording

_HERE = os.path.dirname(os.path.abspath(__file__))
_INTERNAL = (_HERE, os.path.dirname(runpy.__file__) + os.sep + "runpy.py")


def run_cell(source: str, filename: str, limits: Limits) -> Reply:
    """Execute ``source`` in the user's namespace; the last expression's value is returned."""
    namespace = _user_namespace()
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    breakpoints = limits.get("breakpoints")
    return _run(lambda: _exec_cell(source, filename, namespace, breakpoints), filename, limits)


def run_file(path: str, args: list[str], stdin: str | None, cwd: str, limits: Limits) -> Reply:
    """Run a script as ``mpiexec python path *args`` would: ``__main__``, argv, cwd, stdin on rank 0."""

    def script() -> None:
        with _as_main_program(path, args, stdin, cwd), _fresh_user_modules():
            runpy.run_path(path, run_name="__main__")

    return _run(script, path, limits)


def _user_namespace() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def _exec_cell(source: str, filename: str, namespace: dict, breakpoints: dict[str, list[int]] | None = None) -> object:
    tree = ast.parse(source, filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _ends_quietly(source):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    if breakpoints:
        for refused in _debugger.arm(breakpoints, sys._getframe()):
            print(f"mpinb: {refused}", file=sys.stderr)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        return eval(compile(last, filename, "eval"), namespace)
    return None


def _ends_quietly(source: str) -> bool:
    """IPython's rule: a trailing ``;`` hides the value of the last expression."""
    lines = [line.split("#", 1)[0].rstrip() for line in source.rstrip().splitlines()]
    return bool(lines) and lines[-1].endswith(";")


_redelivery: threading.Timer | None = None
REDELIVER_AFTER = 0.002


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT (the notebook's stop button, or the pool releasing ranks) interrupts user code
    only. One that arrives as a run ends must not break mpinb's own clean-up, which puts
    mpi4py's objects back after an untraced run and restores the output streams.

    Inside mpinb's own code a KeyboardInterrupt could fall between posting a nonblocking MPI call
    and keeping its request (MPI would then use a freed buffer), so there the interrupt is held
    and delivered again a moment later; in mpinb's polled waits, which abandon their requests
    safely, it raises at once."""
    _waiting.count_interrupt()
    if not _user_code.is_running():
        return
    code = frame.f_code if frame is not None else None
    if code is not None and code.co_filename.startswith(PACKAGE_DIR) and code not in _waiting.safe_points:
        _deliver_again_soon()
        return
    raise KeyboardInterrupt


def _deliver_again_soon() -> None:
    global _redelivery
    if _redelivery is not None and _redelivery.is_alive():
        return
    main = threading.main_thread().ident
    assert main is not None
    _redelivery = threading.Timer(REDELIVER_AFTER, signal.pthread_kill, (main, signal.SIGINT))
    _redelivery.daemon = True
    _redelivery.start()


def install_interrupt_handler() -> None:
    """Ours while the rank is idle and while it runs a request (ipykernel puts Python's default
    handler in place for each request, and its own saved one back afterwards)."""
    signal.signal(signal.SIGINT, _interrupt)


def _run(body: Callable[[], object], filename: str, limits: Limits) -> Reply:
    record = reply()
    start = time.perf_counter()
    _progress.new_run()
    _debugger.new_run(limits["max_chars"])
    displays_before = _output.displays
    install_interrupt_handler()
    tracing = recording(_user_namespace(), limits["trace"], limits["trace_capacity"], limits.get("verify", False))
    with capped_output(limits["max_lines"], limits["max_chars"]) as dropped, tracing as traced:
        try:
            _user_code.enter()
            try:
                value = body()
                # the value's __repr__ and its pickling are user code too: interruptible
                packed = pack(value) if value is not None else None
            finally:
                _user_code.leave()
                _debugger.run_ended()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                record["error"] = _describe(exc, filename, exit_code=exc.code)
        except BaseException as exc:  # noqa: BLE001 - every failure of user code is reported
            _debugger.keep_failure(exc)
            record["error"] = failed = _describe(exc, filename)
            failed["waiting"] = _waiting.interrupted_wait()
            if failed["waiting"] is not None:
                RECORDER.add_unfinished(failed["waiting"])
            _waiting.clear()
        else:
            if packed is not None:
                record["value"], record["repr"], record["why"] = packed
                record["has_value"] = True
        _show_figures()
    record["trace"] = traced["trace"]
    if record["trace"] is not None and record["error"] is None:
        record["trace"]["left"] = _left_behind.look(_world.traced_world())
    record["dropped_lines"] = dropped["lines"]
    record["wrote"] = bool(dropped["wrote"]) or _output.displays != displays_before
    record["elapsed"] = time.perf_counter() - start
    if _progress.last_states:
        record["progress"] = dict(_progress.last_states)
    if held := _waiting.abandoned_count():  # counted, not tested: no MPI call at the end of every run
        record["held"] = held
    return record


def _describe(exc: BaseException, filename: str, exit_code: object = None) -> Failure:
    tbe = traceback.TracebackException.from_exception(exc)
    frames = [f for f in tbe.stack if not f.filename.startswith(_INTERNAL)]
    tbe.stack = traceback.StackSummary.from_list(frames or list(tbe.stack)[-1:])
    line = next((f.lineno for f in reversed(frames) if f.filename == filename), None)
    if line is None and isinstance(exc, SyntaxError):
        line = exc.lineno
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    message = str(exc)
    if isinstance(exc, SystemExit):
        message = _exit_message(exit_code)
    return failure(name, message, "".join(tbe.format()), line=line, file=filename)


def _exit_message(code: object) -> str:
    """What the process would exit with under mpiexec, as Python's ``sys.exit(code)`` has it: an
    int as it is (``True`` is 1), anything else 1, printed."""
    if isinstance(code, int):
        return f"exit code {int(code)}"
    return f"exit code 1: {code}"


@contextmanager
def _as_main_program(path: str, args: list[str], stdin: str | None, cwd: str) -> Iterator[None]:
    from mpi4py import MPI

    saved = (sys.argv, list(sys.path), sys.stdin, builtins.input, os.getcwd())
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    on_rank0 = MPI.COMM_WORLD.Get_rank() == 0
    sys.stdin = io.StringIO(stdin if (stdin and on_rank0) else "")
    builtins.input = _input_from_stdin
    os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv, sys.path[:], sys.stdin, builtins.input = saved[0], saved[1], saved[2], saved[3]
        os.chdir(saved[4])


@contextmanager
def _fresh_user_modules() -> Iterator[None]:
    """A run imports the user's own modules anew, as a new process under mpiexec would: an edit
    to a helper shows, and its ``comm = MPI.COMM_WORLD`` is this run's world. Afterwards the
    ranks' modules are what they were, so the notebook's own imports are untouched. Libraries
    (the standard library, installed packages, mpinb) are kept: importing them again costs time,
    and some extension modules (numpy's) refuse to load twice."""
    hidden = {name: module for name, module in list(sys.modules.items()) if _is_users(module)}
    for name in hidden:
        del sys.modules[name]
    before = set(sys.modules)
    try:
        yield
    finally:
        for name in [n for n, module in list(sys.modules.items()) if n not in before and _is_users(module)]:
            del sys.modules[name]
        sys.modules.update(hidden)


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    paths.add(os.path.dirname(_HERE))  # mpinb itself (an editable install lives elsewhere)
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)


def _is_users(module: object) -> bool:
    """Whether a module is the user's own code: it has a file, outside every library folder."""
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and _is_user_path(path)


@functools.cache
def _is_user_path(path: str) -> bool:  # cached: a run asks about every loaded module twice
    return not os.path.realpath(path).startswith(_library_roots())


def _input_from_stdin(prompt: object = "") -> str:
    """``input()`` reading the script's stdin (the kernel's own input() asks the notebook)."""
    if prompt:
        sys.stdout.write(str(prompt))
        sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError("EOF when reading a line")
    return line[:-1] if line.endswith("\n") else line


def _show_figures() -> None:
    """Send open matplotlib figures to the notebook, as the inline backend does after a cell."""
    if "matplotlib.pyplot" not in sys.modules:
        return
    try:
        import matplotlib.pyplot as plt

        if plt.get_fignums() and "inline" in plt.get_backend():
            plt.show()
    except Exception:  # noqa: BLE001 - a plotting failure must not hide the cell's own result
        traceback.print_exc()
