"""Notebook views: one Python class and one ES module per widget."""

from .output import RankOutput

__all__ = ["RankOutput"]
