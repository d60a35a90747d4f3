"""The ``mpinb`` command: lab, run (notebooks without a browser), doctor, kernel install, bench."""

from ._main import main

__all__ = ["main"]
