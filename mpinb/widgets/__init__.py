"""Notebook views: one Python class and one ES module per widget."""

from .output import RankOutput
from .trace import TraceView

__all__ = ["RankOutput", "TraceView"]
