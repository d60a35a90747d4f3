"""The colours of mpinb's views, written once.

Python's static HTML and SVG (what saved notebooks and nbconvert keep) use them directly; each
widget hands the ones it draws with to its ES module as state, so that no JavaScript file holds
a colour of its own (``tests/test_layout.py`` checks that). Neutral colours (text, lanes,
borders, backgrounds) are not here: they follow the notebook's light or dark theme, through
JupyterLab's CSS variables in the widgets' CSS files.
"""

from __future__ import annotations

from .common._events import KIND_NAMES

# Tableau 10, colour-blind friendly: ranks take its colours in turn.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
BLUE, ORANGE, GREEN, RED, TEAL, _YELLOW, PURPLE, PINK, BROWN, GREY = PALETTE

# A traced call's box, by its kind's number (send, recv, collective, wait, probe, rma, epoch, io:
# mpinb.common._events); a one-sided transfer's arrow has its call's colour.
KIND_COLORS = (BLUE, GREEN, ORANGE, BROWN, GREY, PURPLE, TEAL, PINK)
WAIT_COLOR = "rgba(214,39,40,0.85)"  # the part of a call spent waiting for another rank
PATH_COLOR = "rgba(176,21,26,0.9)"  # the critical path
COLLECTIVE_FRAME = "rgba(242,142,43,0.9)"  # a collective's frame across its members' lanes
ERROR = "#d62728"  # what went wrong: stderr, a failed rank, a slower run
BETTER = "#2ca02c"  # a faster run in a comparison
ODD = "#e8822a"  # a rank whose value differs from the others'

# What the widgets draw with, by name: each widget's ES module sets them as CSS variables
# (``--mpinb-NAME``) on its root for its CSS file, and draws its canvas with them.
WIDGET_COLORS = {
    "wait": WAIT_COLOR, "path": PATH_COLOR, "collective-frame": COLLECTIVE_FRAME, "error": ERROR, "ok": GREEN,
    "notice": ORANGE, "going": BLUE, "lagging": ORANGE, "done": GREEN, "stopped": GREY,
    **{f"kind-{name}": color for name, color in zip(KIND_NAMES, KIND_COLORS)},
}


def rank_color(rank: int) -> str:
    """The colour of ``rank``'s output and lane label."""
    return PALETTE[rank % len(PALETTE)]


def text_color(color: str, share: int = 50) -> str:
    """``color`` as the colour of text, readable on a light page and on a dark one alike: mixed
    with the colour of the text around it (dark on a light theme, light on a dark one)."""
    return f"color-mix(in srgb, {color} {share}%, currentColor)"


def tint(color: str, alpha: float = 0.22) -> str:
    """``color`` as a background that lets the page's own show through (light or dark), so that
    the theme's text colour stays readable on it. ``color`` is ``#rrggbb``."""
    red, green, blue = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({red},{green},{blue},{alpha:g})"
