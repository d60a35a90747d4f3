"""Recorded MPI traffic: events, matched messages, summaries and exports."""

from ._trace import Trace

__all__ = ["Trace"]
