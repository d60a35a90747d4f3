"""Entry point of each rank's process: ipyparallel's engine, minus what a rank never uses.

Run as a script (not ``-m``), so that nothing of mpinb is imported before the engine needs it.
ipykernel imports its debugger (debugpy, about 90 ms of CPU) at start-up, although engines cannot
be debugged; with four ranks starting on two cores that is time every rank waits for.
"""

import sys

sys.modules.setdefault("debugpy", None)  # makes `import debugpy` fail fast: no debugger

from ipyparallel.engine.app import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
