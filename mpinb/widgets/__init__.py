"""Notebook views: one Python class and one ES module per widget."""

from .compare import CompareView
from .output import RankOutput
from .progress import ProgressView
from .trace import TraceView

__all__ = ["CompareView", "ProgressView", "RankOutput", "TraceView"]
