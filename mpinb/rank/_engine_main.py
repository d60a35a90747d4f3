"""Entry point of each rank's process: ipyparallel's engine, minus what a rank never uses.

Run as a script (not ``-m``), so that nothing of mpinb is imported before the engine needs it.
ipykernel imports its debugger (debugpy, about 90 ms of CPU) at start-up, although engines cannot
be debugged; with four ranks starting on two cores that is time every rank waits for.

Local ranks start together with the controller and wait for its connection file. ipyparallel
looks for it every 100 ms; the file is the last thing start-up waits for, so we look every 5 ms,
and read it only once it holds complete JSON (the controller does not write it atomically).
"""

import json
import os
import select
import sys
import time
import traceback

# ipykernel reads a rank's file descriptors 1 and 2 (os.write, C extensions) unless it believes
# itself under pytest: ranks of a pool started by a test must behave as a user's do.
os.environ.pop("PYTEST_CURRENT_TEST", None)
sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]  # `import debugpy` fails fast: no debugger

from ipykernel.iostream import PIPE_BUFFER_SIZE as _PIPE_BUFFER_SIZE  # noqa: E402
from ipykernel.iostream import OutStream  # noqa: E402
from ipyparallel.engine.app import IPEngine, main  # noqa: E402

_FILE_POLL_S = 0.005
_configured_init_engine = IPEngine.init_engine


def _init_engine_briskly(self: IPEngine) -> None:
    if not self.connection_info_env and self.wait_for_url_file:
        self.find_connection_file()
        deadline = time.monotonic() + self.wait_for_url_file
        while not _written(self.url_file) and time.monotonic() < deadline:
            time.sleep(_FILE_POLL_S)
    _configured_init_engine(self)


def _written(path: str) -> bool:
    """The controller writes its file in place: seen too early, it is empty or cut short."""
    try:
        with open(path) as handle:
            json.load(handle)
    except (OSError, ValueError):
        return False
    return True


IPEngine.init_engine = _init_engine_briskly


def _stop_now(self: IPEngine, signum: int, frame: object) -> None:
    """SIGTERM ends the rank at once. ipyparallel's own handler stops the event loop and lets a
    running cell go on (a batch system's SIGTERM after another task died then waits for its kill
    timeout, keeping the nodes busy); the pool that sends it stops every rank anyway."""
    _exit(128 + signum)


IPEngine._signal_stop = _stop_now

# What a rank's file descriptors 1 and 2 receive is also copied to its log file, which lives as
# long as the pool: this much per stream, then a line saying that the rest went to the notebook.
LOG_COPY_LIMIT = 4 * 2**20


def _watch_pipe_fd(self: OutStream) -> None:
    """ipykernel's reader of fd 1 or 2 (``OutStream._watch_pipe_fd``), with two changes: the text
    goes through the running cell's output cap (``mpinb.rank._output.from_file_descriptor``),
    and the copy to the log file is bounded by ``LOG_COPY_LIMIT``."""
    if self._fid is None:
        return
    from mpinb.rank import _output

    # bytes read from the pipe, and of those, gone through: _output.drain_file_descriptors waits
    # for what was written before a cell ended to be handled
    self._mpinb_read = self._mpinb_handled = 0  # type: ignore[attr-defined]
    _output.watched.append(self)
    copied = 0
    try:
        while True:
            select.select([self._fid], [], [])
            data = os.read(self._fid, _PIPE_BUFFER_SIZE)
            self._mpinb_read += len(data)  # type: ignore[attr-defined]
            if not data or not self._should_watch:
                break
            _output.from_file_descriptor(self, data.decode(errors="replace"))
            if copied < LOG_COPY_LIMIT:
                os.write(self._original_stdstream_copy, data[:LOG_COPY_LIMIT - copied])
                copied += len(data)
                if copied >= LOG_COPY_LIMIT:
                    os.write(self._original_stdstream_copy, f"\n[mpinb] this rank's log keeps the first "
                             f"{LOG_COPY_LIMIT // 2**20} MB of its {self.name}; the rest went to the "
                             "notebook only.\n".encode())
            self._mpinb_handled = self._mpinb_read  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - as ipykernel's: kept for its flush to raise
        self._exc = sys.exc_info()
    finally:
        self._mpinb_handled = self._mpinb_read  # type: ignore[attr-defined]


OutStream._watch_pipe_fd = _watch_pipe_fd  # type: ignore[method-assign]
_ipykernels_write = OutStream.write


def _write(self: OutStream, string: str) -> int | None:
    """ipykernel's ``OutStream.write``, under the last run's output cap between runs too
    (``mpinb.rank._output.write_between_runs``)."""
    from mpinb.rank import _output

    return _output.write_between_runs(self, string, _ipykernels_write)


OutStream.write = _write  # type: ignore[method-assign]


def _exit(code: object) -> None:
    """End the process once the engine has stopped, without MPI_Finalize: the pool stops every rank
    at once, and after a rank died (a host failed) MPI_Finalize waits for it forever, which kept
    the others alive until the batch system's kill timeout and their nodes busy."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        if (spawns := sys.modules.get("mpinb.rank.mpi._spawn")) is not None:
            spawns.remove_folders()  # of spawns whose run never ended (the pool stopped during it)
        from mpinb.common._leftover_files import remove_own_segments  # (the pool removes them too, if no rank got here)

        remove_own_segments()
    finally:
        os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _refuse_a_host_not_expected() -> None:
    """A pool that takes its ranks to run on its own host listens on Unix sockets there, and
    signals and sweeps their processes there: a rank that mpiexec started elsewhere (hosts it
    found in a file or an allocation mpinb did not know of) says so and ends the job at once,
    rather than waiting in vain for the controller."""
    import socket

    expected = os.environ.get("MPINB_EXPECTED_HOST")  # EXPECTED_HOST_ENVIRONMENT of mpinb.common._protocol
    here = socket.gethostname()
    if expected and here != expected:
        print(f"mpinb: this rank runs on {here}, not on {expected}, where the pool expects every rank: name the "
              "hosts (--hosts a,b or --hostfile FILE) so that the pool runs as one across hosts.",
              file=sys.stderr, flush=True)
        os._exit(3)


if __name__ == "__main__":
    _refuse_a_host_not_expected()
    outcome: object = 1
    try:
        outcome = main()
    except SystemExit as stop:
        outcome = stop.code
    except RuntimeError as err:  # a signal stopped the engine's event loop (the pool stops, srun ends a step)
        if "Event loop stopped" not in str(err):
            traceback.print_exc()
    except BaseException:  # noqa: BLE001 - the rank's log shows it; _exit below ends the process
        traceback.print_exc()
    finally:
        _exit(outcome)
