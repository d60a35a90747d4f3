"""Per-rank output as plain text and static HTML.

This is what a notebook keeps where widgets are not rendered (nbclient, nbconvert, GitHub), and
what ``RunResult`` shows in a terminal.
"""

from __future__ import annotations

import html

from .._colors import ERROR, rank_color, text_color
from ..common._ranges import format_ranks


def grouped_values(ranks: list[int], values: dict[int, str]) -> list[tuple[list[int], str]]:
    """``[(ranks, repr)]``: ranks whose last expression had the same repr share one row."""
    groups: dict[str, list[int]] = {}
    for rank in ranks:
        text = values.get(rank)
        if text:
            groups.setdefault(text, []).append(rank)
    return [(group, text) for text, group in groups.items()]


def _plain(bundle: dict) -> str:
    data = bundle.get("data", {})
    return data.get("text/plain", "<" + ", ".join(sorted(data)) + ">")


def grouped_output(ranks, stdout, stderr, outputs) -> list[list[int]]:
    """Ranks in groups that printed and displayed exactly the same (each group in rank order, the
    groups by their first rank); ranks with no output are left out. At 64 ranks that all print
    ``hello``, one line instead of 64."""
    groups: dict[tuple, list[int]] = {}
    for rank in ranks:
        shown = tuple(_plain(bundle) for bundle in outputs.get(rank, []))
        key = (stdout.get(rank, ""), stderr.get(rank, ""), shown)
        if key != ("", "", ()):
            groups.setdefault(key, []).append(rank)
    return sorted(groups.values())


def as_text(ranks, stdout, stderr, outputs, values) -> str:
    lines = []
    for group in grouped_output(ranks, stdout, stderr, outputs):
        first, label = group[0], format_ranks(group)
        lines += [f"[{label}] {line}" for line in stdout.get(first, "").splitlines()]
        lines += [f"[{label}:err] {line}" for line in stderr.get(first, "").splitlines()]
        lines += [f"[{label}] {_plain(bundle)}" for bundle in outputs.get(first, [])]
    for group, text in grouped_values(ranks, values):
        lines.append(f"Out[{format_ranks(group)}]: {text}")
    return "\n".join(lines)


def _html_bundle(bundle: dict) -> str:
    data = bundle.get("data", {})
    if "image/png" in data:
        return f'<img src="data:image/png;base64,{data["image/png"]}"/>'
    if "image/svg+xml" in data:
        return data["image/svg+xml"]
    if "text/html" in data:
        return data["text/html"]
    return f"<pre>{html.escape(_plain(bundle))}</pre>"


def as_html(ranks, stdout, stderr, outputs, values) -> str:
    rows = []
    for group in grouped_output(ranks, stdout, stderr, outputs):
        first, label = group[0], format_ranks(group)
        label_style = f"color:{text_color(rank_color(first))};font-weight:bold"
        tag = f'<span style="{label_style}">[{label}]</span> '
        err = f'<span style="{label_style}">[{label}:err]</span> '
        text = [tag + html.escape(line) for line in stdout.get(first, "").splitlines()]
        text += [err + f'<span style="color:{text_color(ERROR)}">{html.escape(line)}</span>'
                 for line in stderr.get(first, "").splitlines()]
        if text:
            rows.append('<pre style="margin:0">' + "\n".join(text) + "</pre>")
        for bundle in outputs.get(first, []):
            rows.append(f'<div>{tag}</div><div>{_html_bundle(bundle)}</div>')
    groups = grouped_values(ranks, values)
    if groups:
        cells = "".join(
            f'<tr><td style="text-align:left">Out[{format_ranks(group)}]</td>'
            f'<td style="text-align:left"><code>{html.escape(text)}</code></td></tr>'
            for group, text in groups
        )
        rows.append(f'<table class="mpinb-values">{cells}</table>')
    return '<div class="mpinb-output">' + "".join(rows) + "</div>"
