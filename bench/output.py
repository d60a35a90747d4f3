"""What the live per-rank view sends to the browser while a chatty cell runs.

A real pool runs a cell that prints steadily; its output reaches a real ``RankOutput`` as it would
in a notebook. Counted: the JSON bytes of every message the widget sends during the run (its news),
against what sending the whole output at each of the same syncs costs (how the view worked before:
every 250 ms, the full text of every rank, twice: per rank and merged).
"""

from __future__ import annotations

import json

import mpinb
from mpinb.widgets import RankOutput

CELL = "import time\nfor i in range({lines}):\n    print(f'rank {{rank}} line {{i:6d}} ' + 'x' * 40)\n" \
       "    if i % 100 == 99:\n        time.sleep(0.1)\n"


def output_traffic(ranks: int = 4, lines: int = 5_000) -> dict:
    """``{"news_bytes", "whole_bytes", "syncs", "seconds"}`` for ``lines`` lines per rank."""
    view = RankOutput(list(range(ranks)))
    counted = {"news_bytes": 0, "whole_bytes": 0, "syncs": 0}

    def send(content: dict, buffers: object = None) -> None:
        counted["news_bytes"] += len(json.dumps(content))

    original = view._send_news

    def send_news(now: float) -> None:
        original(now)
        counted["syncs"] += 1
        whole = {"stdout": view._text["stdout"], "stderr": view._text["stderr"], "merged": view._merged}
        counted["whole_bytes"] += len(json.dumps(whole))

    view.send = send  # type: ignore[method-assign]
    view._send_news = send_news  # type: ignore[method-assign]
    with mpinb.Pool(ranks) as pool:
        result = pool.run(CELL.format(lines=lines), on_output=view.append, trace=False)
    printed = sum(text.count("\n") for text in view._text["stdout"])
    assert printed == ranks * lines == sum(text.count("\n") for text in result.stdout.values()), \
        "every line reached the view"
    return {**counted, "seconds": result.elapsed}


def main() -> None:
    figures = output_traffic()
    print(f"{figures['syncs']} syncs in {figures['seconds']:.1f} s: news {figures['news_bytes'] / 1e6:.2f} MB, "
          f"whole output each sync {figures['whole_bytes'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
