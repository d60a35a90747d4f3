"""Recorded MPI traffic.

The package covers events, matched messages, wait states, the critical path, comparisons and
exports."""

from ._compare import Comparison
from ._findings import Finding
from ._path import CriticalPath
from ._trace import Trace

__all__ = ["Comparison", "CriticalPath", "Finding", "Trace"]
