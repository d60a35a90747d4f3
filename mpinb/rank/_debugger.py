"""The debugger on a rank.

It gives the rank's Python stack at any moment, post-mortem of the last run's failure,
breakpoints, and expressions evaluated for the notebook.

The notebook reaches a rank on ipyparallel's control channel, which ipykernel serves in a thread
of its own: a rank answers while it is idle, while it runs a cell, and while it is stopped at a
breakpoint or blocked in MPI. The control thread reads the main thread's frames and evaluates
expressions; what must happen in the main thread (stepping, continuing) goes to the ``pdb`` that
a breakpoint started there, whose input is a queue that the control thread fills. Expressions run
in a helper thread under a time limit, so that one which blocks (a receive nobody sends) cannot
take the control channel down with it.

Nothing here runs while no one debugs: the breakpoint hook costs nothing until ``breakpoint()``,
and stepping traces only while a rank is stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import linecache
import os
import pdb
import queue
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from ..common._protocol import (
    DEBUG_ANSWER_WITHIN,
    DEBUG_COMPUTE_WITHIN,
    DEBUG_KEY,
    DEBUG_REPLY,
    DEBUG_REQUEST,
    DebugState,
    Frame,
)
from . import _user_code
from .mpi import _waiting

# Modules a step never stops in: mpinb's own calls (a traced send is one step) and the engine
# that runs the cell (a step past a cell's last line ends the session).
SKIPPED = ["mpinb.*", "IPython.*", "ipykernel.*", "ipyparallel.*", "tornado.*", "asyncio.*", "zmq.*",
           "traitlets.*", "runpy", "threading", "queue", "bdb", "pdb", "contextlib"]
ANSWER_WITHIN = 0.5  # a command that does not bring the rank back to its prompt by then: running
EVALUATE_WITHIN = 5.0  # an expression the notebook asked for, on a helper thread
# What the helper thread may take where the notebook waits less: its answer must come first
LISTED_WITHIN = DEBUG_ANSWER_WITHIN - 0.5  # a table of variables' reprs
COMPUTED_WITHIN = DEBUG_COMPUTE_WITHIN - 5.0  # inspect's summary of a value (digests of a large array)
RESUMING = {"c", "cont", "continue", "n", "next", "s", "step", "r", "return", "unt", "until", "j", "jump",
            "q", "quit", "exit", "run", "restart"}
BLOCKS = 64  # an array's digest per block, to find where arrays that should agree differ
MAX_BLOCK_VALUES = 4096

_kernel: Any = None
_main: int = threading.main_thread().ident or 0


def install(kernel: Any) -> None:
    """On a rank of a pool: serve the notebook's debugger requests, and make ``breakpoint()`` stop
    this rank for the notebook (under plain mpiexec, Python's own pdb stays)."""
    global _kernel
    _kernel = kernel
    kernel.control_handlers[DEBUG_REQUEST] = _on_request
    sys.breakpointhook = breakpointhook


# -- what the rank keeps between requests ---------------------------------------------------------


class _Stop:
    """The main thread stopped at a breakpoint: its pdb reads commands from ``commands``."""

    def __init__(self) -> None:
        self.commands: queue.Queue[str] = queue.Queue()
        self.asking = threading.Event()  # the pdb waits for the next command
        self.output: list[str] = []
        self.lock = threading.Lock()
        self.debugger: RankPdb | None = None
        self.where: Frame | None = None
        self.since = 0.0

    def take_output(self) -> str:
        with self.lock:
            text, self.output = "".join(self.output), []
        return _without_prompt(text)


_stop: _Stop | None = None  # the breakpoint session of the current run
_detached = False  # breakpoint() no longer stops in this run (the notebook said "detach")
_failure: TracebackType | None = None  # the last run's failure, for post-mortem, until the next run
_inspector: RankPdb | None = None  # a post-mortem (or live) session opened by the notebook
_inspected = io.StringIO()
_max_chars = 1_000_000  # what one debugger command may print (the last run's max_output_chars)


def new_run(max_chars: int = 1_000_000) -> None:
    """A run starts: the last one's failure and sessions are forgotten. What a debugger command
    prints is capped at the run's ``max_chars``, as the run's own output is."""
    global _failure, _inspector, _stop, _detached, _max_chars
    _failure, _inspector, _stop, _detached, _max_chars = None, None, None, False, max_chars


def keep_failure(error: BaseException) -> None:
    """The run failed (or was interrupted): its traceback stays for post-mortem until the next run."""
    global _failure
    _failure = error.__traceback__


def run_ended() -> None:
    """The run is over: a step past its last line must not go on tracing the engine."""
    global _stop
    if _stop is not None:
        sys.settrace(None)
        _stop = None


def state() -> DebugState:
    stop = _stop
    if stop is not None and stop.asking.is_set() and stop.where is not None:
        return {"mode": "stopped", "where": stop.where, "since": stop.since}
    if _waiting.current is not None:
        return {"mode": "waiting", "wait": _waiting.current}
    if _user_code.is_running():
        return {"mode": "running"}
    return {"mode": "idle", "failure": _failure is not None}


# -- breakpoints ----------------------------------------------------------------------------------


def breakpointhook(*args: object, **kwargs: object) -> None:
    """``breakpoint()`` on a rank of a pool: stop here for the notebook's debugger."""
    if os.environ.get("PYTHONBREAKPOINT") == "0" or _detached:  # Python's own switch, or the notebook's
        return
    stop_here(sys._getframe(1))


def stop_here(frame: FrameType) -> None:
    """Stop the main thread at ``frame``'s next line, in a pdb that takes commands from the
    notebook. A rank already stopped (``breakpoint()`` typed at its prompt) stays as it is."""
    global _stop
    if threading.get_ident() != _main:
        print("mpinb: breakpoint() in a thread other than the main one is ignored on the ranks", file=sys.stderr)
        return
    if _stop is not None and _stop.debugger is not None:
        if not _stop.asking.is_set():  # armed with gutter breakpoints, running: stop here as well
            _stop.debugger.set_trace(frame)
        return
    stop = _stop = _Stop()
    stop.debugger = RankPdb(stdin=_Commands(stop), stdout=_Output(stop))
    stop.debugger.set_trace(frame)


def arm(breakpoints: dict[str, list[int]], frame: FrameType) -> list[str]:
    """Before a run (from ``frame``, the one that runs the user's code): stop at these lines
    (JupyterLab's gutter breakpoints). What could not be set, in words. Tracing stays on for the
    run, but only frames of files with a breakpoint are traced line by line."""
    global _stop
    stop = _stop = _Stop()
    debugger = stop.debugger = RankPdb(stdin=_Commands(stop), stdout=_Output(stop))
    refused = [said for file, lines in breakpoints.items() for line in lines
               if (said := debugger.set_break(file, line))]
    debugger.set_trace(frame)
    debugger.set_continue()
    return refused


class RankPdb(pdb.Pdb):
    """Python's pdb, fed by the notebook: interrupts end the session instead of being swallowed
    by the prompt, and SIGINT stays mpinb's (it interrupts user code only)."""

    def __init__(self, stdin: Any = None, stdout: Any = None):
        super().__init__(stdin=stdin, stdout=stdout, skip=SKIPPED, nosigint=True, readrc=False)

    def _cmdloop(self) -> None:
        self.allow_kbdint = True
        self.cmdloop()
        self.allow_kbdint = False

    def get_stack(self, f: FrameType | None, t: TracebackType | None) -> tuple[list, int]:
        """The user's frames only: mpinb's and the engine's are hidden from where/up/down, and a
        session that would start in one of them starts in the nearest user frame."""
        stack, index = super().get_stack(f, t)
        kept = [i for i, (frame, _) in enumerate(stack)
                if not self.is_skipped_module(frame.f_globals.get("__name__") or "")
                and _is_users(frame.f_code.co_filename)]
        if not kept:
            return stack, index
        below = [position for position, i in enumerate(kept) if i <= index]
        return [stack[i] for i in kept], below[-1] if below else 0

    def interaction(self, frame: FrameType | None, traceback: TracebackType | None) -> None:
        try:
            super().interaction(frame, traceback)
        except BaseException:
            sys.settrace(None)
            raise
        finally:
            if _stop is not None and _stop.debugger is self:
                _announce({"mode": "running"})


class _Commands:
    """The stopped pdb's input: each line is a command the notebook sent."""

    def __init__(self, stop: _Stop):
        self.stop = stop

    def readline(self) -> str:
        stop = self.stop
        assert stop.debugger is not None
        stop.where = _frame_of(stop.debugger.curframe)
        stop.since = time.time()
        stop.asking.set()  # the last command's output is complete
        _announce({"mode": "stopped", "where": stop.where, "since": stop.since})
        try:
            while True:
                try:
                    return stop.commands.get(timeout=0.05) + "\n"
                except queue.Empty:
                    pass
        finally:
            stop.asking.clear()


_waiting.safe_points.add(_Commands.readline.__code__)  # an interrupt ends the session here


class _Output:
    def __init__(self, stop: _Stop):
        self.stop = stop

    def write(self, text: str) -> int:
        with self.stop.lock:
            self.stop.output.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _announce(debug: DebugState) -> None:
    try:
        _waiting.publish_data({DEBUG_KEY: debug})
    except Exception:  # noqa: BLE001 - outside an engine there is no channel
        pass


def _without_prompt(text: str) -> str:
    return text[: -len("(Pdb) ")] if text.endswith("(Pdb) ") else text


# -- the notebook's requests (on the control thread) ----------------------------------------------


def _on_request(stream: Any, idents: list, message: dict) -> None:
    content = message["content"]
    try:
        operation = _OPERATIONS[content["op"]]
        reply: dict = operation(**content.get("args", {}))
        reply["status"] = "ok"
    except Exception as err:  # noqa: BLE001 - the notebook says what went wrong on which rank
        reply = {"status": "error", "ename": type(err).__name__, "evalue": str(err)}
    _kernel.session.send(stream, DEBUG_REPLY, reply, parent=message, ident=idents)


def _stack() -> dict:
    frame = sys._current_frames().get(_main)
    frames = []
    while frame is not None:
        frames.append(_frame_of(frame))
        frame = frame.f_back
    return {"frames": frames, "state": state()}


def _frame_of(frame: FrameType | None) -> Frame:
    if frame is None:
        return {"file": "", "line": 0, "function": "", "code": ""}
    code = frame.f_code
    line = frame.f_lineno or 0
    return {"file": code.co_filename, "line": line, "function": code.co_name,
            "code": linecache.getline(code.co_filename, line).strip()}


def _command(line: str) -> dict:
    """A debugger command: to the stopped pdb if the rank is stopped, else to a post-mortem session
    (the last run's failure), else to the frames of the running main thread (read only)."""
    stop = _stop
    if stop is not None and stop.asking.is_set():
        stop.take_output()
        stop.asking.clear()
        stop.commands.put(line)
        deadline = time.monotonic() + ANSWER_WITHIN
        while not stop.asking.is_set() and time.monotonic() < deadline and _stop is stop:
            time.sleep(0.002)
        return {"output": _capped(stop.take_output()), "state": state()}
    if _inspector is None:
        opened = _open()
        if line.strip() in ("", "where", "w", "bt"):
            return opened
    return {"output": _capped(_inspect_command(line)), "state": state()}


def _capped(text: str) -> str:
    """At most the run's ``max_output_chars`` of what a command printed, and how much was left out."""
    if len(text) <= _max_chars:
        return text
    return text[:_max_chars] + f"\n... {len(text) - _max_chars:,} more characters not shown (max_output_chars)\n"


def _detach() -> dict:
    """Continue, and let breakpoint() no longer stop this rank in this run."""
    global _detached
    _detached = True
    return _command("c")


def _open() -> dict:
    """Start a session on the last run's failure, or on the running main thread's frames."""
    global _inspector
    _inspected.seek(0)
    _inspected.truncate()
    debugger = RankPdb(stdout=_inspected)
    debugger.reset()
    if _failure is not None and not _user_code.is_running():
        debugger.setup(None, _failure)
        what = "post-mortem"
    else:
        frame = sys._current_frames().get(_main)
        user = _innermost_user_frame(frame)
        if user is None:
            raise LookupError("this rank has nothing to debug: the last run did not fail, and the rank is "
                              "not running user code (set a breakpoint() to stop it while it runs)")
        debugger.setup(user, None)
        what = "live (read-only: the rank runs on)"
    _inspector = debugger
    debugger.print_stack_entry(debugger.stack[debugger.curindex])
    return {"output": _take_inspected(), "state": state(), "session": what}


def _inspect_command(line: str) -> str:
    global _inspector
    debugger = _inspector
    assert debugger is not None
    word = line.strip().split(" ", 1)[0]
    if word in ("q", "quit", "exit"):
        _inspector = None
        return ""
    if word in RESUMING:
        if _failure is not None:
            return "post-mortem: the run is over, there is nothing to step or continue (q leaves)\n"
        return "this rank runs on: stepping needs it stopped at a breakpoint(); here its frames are only read\n"
    _aside(lambda: debugger.onecmd(line))
    return _take_inspected()


def _take_inspected() -> str:
    text = _inspected.getvalue()
    _inspected.seek(0)
    _inspected.truncate()
    return text


def _stopped() -> RankPdb:
    stop = _stop
    if stop is None or not stop.asking.is_set() or stop.debugger is None:
        raise RuntimeError("this rank is not stopped at a breakpoint")
    return stop.debugger


def _frames() -> dict:
    """The stopped rank's user frames, innermost first (for JupyterLab's call stack)."""
    debugger = _stopped()
    return {"frames": [_frame_of(frame) | {"line": line} for frame, line in reversed(debugger.stack)]}


def _frame_at(level: int) -> FrameType:
    stack = list(reversed(_stopped().stack))
    if not 0 <= level < len(stack):
        raise IndexError(f"no frame {level}: the stack has {len(stack)}")
    return stack[level][0]


HIDDEN = {"In", "Out", "exit", "quit", "get_ipython", "open", "mpi_rank", "mpi_size"}  # IPython's, the engine's


def _variables(level: int | None = None, scope: str = "locals") -> dict:
    """Name, type and a short repr of a frame's locals or globals (``level``, innermost 0), or of
    the user's namespace (``level`` None)."""
    if level is None:
        from IPython import get_ipython

        names = get_ipython().user_ns
    else:
        frame = _frame_at(level)
        names = frame.f_locals if scope == "locals" else frame.f_globals
    shown = [(name, value) for name, value in sorted(names.items())
             if not name.startswith("_") and name not in HIDDEN and type(value).__name__ != "module"][:500]
    # the values' __repr__ are the user's code: all of them within the limit, off this thread
    try:
        rows = _aside(lambda: [{"name": name, "type": type(value).__qualname__,
                                "value": _short(_safe_repr(value), 120)} for name, value in shown], LISTED_WITHIN)
    except TimeoutError:  # a slow __repr__ among them: the table still comes, without values
        rows = [{"name": name, "type": type(value).__qualname__, "value": "(a repr is slow: evaluate it alone)"}
                for name, value in shown]
    return {"variables": rows}


def _evaluate(expression: str, level: int | None = None) -> dict:
    """``expression`` in a stopped frame (``level``, innermost 0), else in the user's namespace."""
    if level is None:
        globals_, locals_ = _namespace()
    else:
        frame = _frame_at(level)
        globals_, locals_ = frame.f_globals, frame.f_locals
    try:
        code = compile(expression, "<debugger>", "eval")
    except SyntaxError:
        _aside(lambda: exec(compile(expression, "<debugger>", "exec"), globals_, locals_))
        return {"result": "", "type": ""}
    def shown() -> dict:
        value = eval(code, globals_, locals_)
        return {"result": _short(_safe_repr(value), 2000), "type": type(value).__qualname__}

    return _aside(shown)


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STANDARD_LIBRARY = os.path.dirname(os.__file__) + os.sep


def _is_users(filename: str) -> bool:
    """A cell (``<mpi-cell-N>``, or the file JupyterLab named it) or a file of the user's."""
    if filename.startswith("<mpi-cell-"):
        return True
    return not (filename.startswith(("<", _PACKAGE, _STANDARD_LIBRARY)) or "-packages" + os.sep in filename)


def _innermost_user_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None:
        if _is_users(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def _aside(work: Callable[[], Any], within: float = EVALUATE_WITHIN) -> Any:
    """``work()`` on a helper thread, for at most ``within`` seconds. Helpers that outlive their
    question (a repr that never returns) run on, but only ``MAX_HELPERS`` of them: beyond, a
    question is refused rather than piled up beside them, since each runs the user's code and
    could take what the user's program waits for."""
    _helpers[:] = [helper for helper in _helpers if helper.is_alive()]
    if len(_helpers) >= MAX_HELPERS:
        raise TimeoutError(f"{len(_helpers)} earlier questions' evaluations still run on this rank (waiting for "
                           "MPI?): ask again once they have finished")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # noqa: BLE001 - given to the caller
            box["error"] = err

    helper = threading.Thread(target=run, name="mpinb-debugger", daemon=True)
    _helpers.append(helper)
    helper.start()
    helper.join(within)
    if helper.is_alive():
        raise TimeoutError(f"it did not finish within {within:g} s (is it waiting for MPI?); it runs on "
                           "in the background")
    if "error" in box:
        raise box["error"]
    return box.get("value")


MAX_HELPERS = 4
_helpers: list[threading.Thread] = []  # helper threads that may still run


def _namespace() -> tuple[dict, Any]:
    """Where the notebook's expressions run: the stopped frame, else the user's namespace."""
    from IPython import get_ipython

    stop = _stop
    if stop is not None and stop.asking.is_set() and stop.debugger is not None and stop.debugger.curframe:
        frame = stop.debugger.curframe
        return frame.f_globals, stop.debugger.curframe_locals
    if _user_code.is_running():
        raise RuntimeError("this rank is running: inspect it while it is idle or stopped at a breakpoint")
    namespace = get_ipython().user_ns
    return namespace, namespace


def _inspect(expr: str, blocks: int = BLOCKS) -> dict:
    """A summary of ``expr`` that travels cheaply: type, shape, a digest of the value, for numbers
    their value, for arrays min, max, norm and one digest per block (never the array itself)."""
    globals_, locals_ = _namespace()
    code = compile(expr, "<inspect>", "eval")
    try:
        value = _aside(lambda: eval(code, globals_, locals_))
    except NameError as err:
        return {"missing": getattr(err, "name", None) or str(err)}
    # digesting a large array takes what it takes on a crowded machine; any other value's summary
    # (its __repr__, pickling and len()) is the user's code, held to the expression's limit
    within = COMPUTED_WITHIN if _numeric_array(value) else EVALUATE_WITHIN
    return _aside(lambda: summarise(value, blocks), within)


def _numeric_array(value: object) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray) and value.dtype.kind in "biufc"


def summarise(value: object, blocks: int = BLOCKS) -> dict:
    summary: dict[str, Any] = {"type": type(value).__qualname__}
    numpy = sys.modules.get("numpy")
    if numpy is not None and not isinstance(value, (str, bytes)):
        try:
            array = numpy.asarray(value) if isinstance(value, (list, tuple, numpy.ndarray, numpy.generic)) else None
        except Exception:  # noqa: BLE001 - a list of odd things is summarised by its repr
            array = None
        if array is not None and array.dtype.kind in "biufc" and array.size:
            flat = numpy.ascontiguousarray(array).reshape(-1)
            summary.update(shape=list(array.shape), dtype=str(array.dtype), size=int(array.size),
                           min=_number(flat.min()) if flat.dtype.kind != "c" else None,
                           max=_number(flat.max()) if flat.dtype.kind != "c" else None,
                           norm=float(numpy.linalg.norm(flat)), nans=int(numpy.isnan(flat).sum())
                           if flat.dtype.kind in "fc" else 0,
                           digest=_digest(flat.tobytes()),
                           blocks=[_digest(part.tobytes()) for part in numpy.array_split(flat, min(blocks, flat.size))])
            if array.size == 1:
                summary["value"] = _number(flat[0])
            summary["repr"] = _short(numpy.array2string(array, threshold=8, edgeitems=2))
            return summary
    if isinstance(value, (int, float, bool)):
        summary["value"] = value
    summary["repr"] = _short(_safe_repr(value))
    summary["digest"] = _digest(_stable_bytes(value))
    if hasattr(value, "__len__"):
        with contextlib.suppress(Exception):
            summary["size"] = len(value)
    return summary


def _elements(expr: str, block_numbers: list[int], blocks: int = BLOCKS) -> dict:
    """The values of some blocks of an array (to say which elements differ), at most a few
    thousand of them."""
    import numpy

    globals_, locals_ = _namespace()
    value = _aside(lambda: eval(compile(expr, "<inspect>", "eval"), globals_, locals_))
    flat = numpy.ascontiguousarray(numpy.asarray(value)).reshape(-1)
    bounds = numpy.array_split(numpy.arange(flat.size), min(blocks, flat.size))
    out, room = {}, MAX_BLOCK_VALUES
    for number in block_numbers:
        indices = bounds[number][:room]
        out[str(number)] = {"first": int(indices[0]) if len(indices) else 0,
                            "values": [_number(v) for v in flat[indices]]}
        room -= len(indices)
        if room <= 0:
            break
    return {"blocks": out, "shape": list(numpy.shape(value))}


def _number(value: Any) -> float | int | complex:
    item = value.item() if hasattr(value, "item") else value
    return item


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _stable_bytes(value: object) -> bytes:
    import pickle

    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - not picklable: its repr stands for it
        return _safe_repr(value).encode()


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as err:  # noqa: BLE001 - a broken __repr__ must not lose the table
        return f"<{type(value).__name__}: repr failed: {err!r}>"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_OPERATIONS: dict[str, Callable[..., dict]] = {
    "stack": _stack,
    "state": lambda: {"state": state()},
    "command": _command,
    "detach": _detach,
    "frames": _frames,
    "variables": _variables,
    "evaluate": _evaluate,
    "inspect": _inspect,
    "elements": _elements,
}
