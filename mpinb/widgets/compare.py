"""Two traced runs side by side, so that before and after an optimisation read at a glance.

It shows the differences per rank and per operation, and both space-time diagrams on one time
axis."""

from __future__ import annotations

import html

import ipywidgets as widgets

from .._colors import BETTER, ERROR, text_color
from ..trace import Comparison, Trace
from ..trace._compare import change, seconds
from ..trace._svg import space_time_svg
from ._fallback import StaticFallback
from .trace import TraceView


def compare(a: object, b: object, labels: tuple[str, str] = ("before", "after")) -> CompareView:
    """Compare two runs: a view of both, whose ``comparison`` holds the numbers.

    :param a: the first run, a :class:`~mpinb.Trace` or a :class:`~mpinb.RunResult` with one.
    :param b: the second, likewise.
    :param labels: what the view calls the two runs.
    :returns: the view; ``.comparison`` is a :class:`mpinb.trace.Comparison`.
    """
    return CompareView(Comparison(_trace_of(a, labels[0]), _trace_of(b, labels[1]), (labels[0], labels[1])))


def _trace_of(run: object, label: str) -> Trace:
    trace = getattr(run, "trace", run)
    if isinstance(trace, Trace):
        return trace
    if trace is None:
        raise ValueError(f"the {label!r} run has no trace: it ran untraced (--no-trace, trace=False) "
                         "or made no MPI call; compare two traced runs")
    raise TypeError(f"compare() takes two Trace or RunResult objects; the {label!r} run is a {type(run).__name__}")


class CompareView(StaticFallback, widgets.VBox):
    """The table of differences, then each run's :class:`TraceView` on a shared time axis."""

    def __init__(self, comparison: Comparison):
        self.comparison = comparison
        self.axis_end = max(_end(comparison.a), _end(comparison.b))
        label_a, label_b = comparison.labels
        super().__init__([
            widgets.HTML(_table(comparison)),
            widgets.HTML(f"<b>{html.escape(label_a)}</b>"),
            TraceView(comparison.a, axis_end=self.axis_end),
            widgets.HTML(f"<b>{html.escape(label_b)}</b>"),
            TraceView(comparison.b, axis_end=self.axis_end),
        ])
        self.add_class("mpinb-compare")

    def _fallback(self) -> tuple[str, str]:
        label_a, label_b = (html.escape(label) for label in self.comparison.labels)
        page = (f'<div class="mpinb-compare">{_table(self.comparison)}'
                f"<p><b>{label_a}</b></p>{space_time_svg(self.comparison.a, t_end=self.axis_end)}"
                f"<p><b>{label_b}</b></p>{space_time_svg(self.comparison.b, t_end=self.axis_end)}</div>")
        return self.comparison.text(), page


def _end(trace: Trace) -> float:
    return max((end for _, end in trace.span.values()), default=0.0)


def _table(comparison: Comparison) -> str:
    label_a, label_b = (html.escape(label) for label in comparison.labels)
    head = f"<tr><th></th><th>{label_a}</th><th>{label_b}</th><th>change</th></tr>"
    body = []
    for what, a, b in comparison.rows():
        colour = text_color(BETTER) if b < a else text_color(ERROR) if b > a else "inherit"
        body.append(f'<tr><td style="text-align:left">{html.escape(what)}</td><td>{seconds(a)}</td>'
                    f'<td>{seconds(b)}</td><td style="color:{colour}">{change(a, b)}</td></tr>')
    style = ("<style>.mpinb-compare-table{border-collapse:collapse;font-variant-numeric:tabular-nums;"
             "text-align:right;font-size:12px}.mpinb-compare-table td,.mpinb-compare-table th"
             "{padding:1px 10px;line-height:1.3}</style>")
    rows = "".join(body)
    return f'{style}<table class="mpinb-compare-table">{head}{rows}</table>'

