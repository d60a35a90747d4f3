"""Draws the README's picture of the views (docs/figures/views.svg) from a real traced run.

The run is a small halo exchange with uneven work: four ranks compute for different times, pass a
value round a ring and agree on a sum, three times. Its trace shows what the in-cell view shows:
a lane per rank, the calls as boxes, an arrow per message, the time ranks lost waiting (the red
bands) and the critical path (the dark red line). Run it with the project's environment, which
starts a pool of four ranks: ``.venv/bin/python docs/draw_views.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mpinb
from mpinb.trace._svg import space_time_svg

PICTURE = Path(__file__).resolve().parent / "figures" / "views.svg"
RANKS = 4
STEPS = 3
PROGRAM = f"""\
import time
for step in range({STEPS}):
    time.sleep(0.004 * (rank + 1))  # uneven work: the higher ranks compute longer
    halo = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
    total = comm.allreduce(halo)
total
"""


def draw(pool: mpinb.Pool) -> str:
    """The picture of one run of :data:`PROGRAM` on ``pool`` (of :data:`RANKS` ranks)."""
    result = pool.run(PROGRAM, trace=True)
    if set(result.value.values()) != {sum(range(RANKS))}:
        raise RuntimeError(f"the run computed {result.value}, not {sum(range(RANKS))} on every rank")
    return space_time_svg(result.trace, width=720)


def main(path: Path = PICTURE) -> None:
    with mpinb.Pool(RANKS) as pool:
        path.write_text(draw(pool) + "\n")
    print(f"drew {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else PICTURE)
