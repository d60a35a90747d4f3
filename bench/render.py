"""Time from handing a 100,000-event trace to the space-time view until its first paint.

The view's own ES module (mpinb/widgets/trace.js) is loaded into a page served on localhost and
given the same state the notebook would send, in headless chromium; this times the drawing, not
JupyterLab.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import shutil
import tempfile
import threading

import mpinb
from mpinb.widgets.trace import TraceView

# The view's traits that hold binary columns (the rest is JSON as it is).
COLUMNS = ("events", "messages", "collectives", "waits", "path")

HARNESS = """<!doctype html><html><body style="width:1200px"><div id="view"></div>
<script type="module">
import view from "./trace.js";
const COLUMNS = COLUMNS_JSON;
const raw = await (await fetch("./state.json")).json();
const decode = (b64) => { const s = atob(b64); const a = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) a[i] = s.charCodeAt(i); return new DataView(a.buffer); };
for (const key of COLUMNS) for (const k in raw[key]) raw[key][k] = decode(raw[key][k]);
const model = { get: (k) => raw[k], on() {}, set() {}, save_changes() {} };
const began = performance.now();
view.render({ model, el: document.getElementById("view") });
const wait = () => {
  const canvas = document.querySelector("canvas[data-boxes]");
  if (canvas) window.firstPaint = { ms: performance.now() - began, boxes: Number(canvas.dataset.boxes),
                                    arrows: Number(canvas.dataset.arrows) };
  else requestAnimationFrame(wait);
};
requestAnimationFrame(wait);
</script></body></html>"""


def record_trace(events_per_rank: int = 25_000, ranks: int = 4):
    """A real trace: ring messages and barriers, ``ranks * events_per_rank`` calls in all."""
    rounds = events_per_rank // 3
    with mpinb.Pool(ranks) as pool:
        pool.trace_capacity = events_per_rank
        code = (f"for _ in range({rounds}):\n"
                "    comm.Sendrecv(np.zeros(1), dest=(rank + 1) % size,\n"
                "                  recvbuf=np.zeros(1), source=(rank - 1) % size)\n"
                "    comm.Barrier()\n"
                f"for _ in range({events_per_rank - 3 * rounds}):\n"
                "    comm.Barrier()\n")
        return pool.run(code).trace


def view_build_ms(trace) -> float:
    """Milliseconds to turn a fresh trace into its view's state (matching, waits, critical path,
    matrices, histograms): the notebook's share of showing a traced cell. Call it before anything
    else asks the trace for its waits or path, which it keeps once computed."""
    import time

    began = time.perf_counter()
    TraceView(trace, expanded=False).close()
    return (time.perf_counter() - began) * 1e3


def first_paint(trace) -> dict:
    """Render ``trace`` in headless chromium; ``{"ms": ..., "boxes": ..., "arrows": ...}``."""
    from playwright.sync_api import sync_playwright

    here = tempfile.mkdtemp(prefix="mpinb-render-")
    try:
        shutil.copy(os.path.join(os.path.dirname(mpinb.__file__), "widgets", "trace.js"), here)
        with open(os.path.join(here, "index.html"), "w") as handle:
            handle.write(HARNESS.replace("COLUMNS_JSON", json.dumps(COLUMNS)))
        with open(os.path.join(here, "state.json"), "w") as handle:
            json.dump(_state(trace), handle)
        handler = functools.partial(_QuietHandler, directory=here)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as play:
                browser = play.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                                               args=CHROMIUM_FLAGS)
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
                page.wait_for_function("() => window.firstPaint", timeout=60_000)
                result = page.evaluate("() => window.firstPaint")
                browser.close()
        finally:
            server.shutdown()
        return result
    finally:
        shutil.rmtree(here, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# Debian's chromium, headless, with nothing reaching for the network (see tests/browser.py).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _state(trace) -> dict:
    """Every synced trait of the view, as the notebook would send it (binary columns in base64)."""
    view = TraceView(trace, expanded=False)
    names = [name for name in TraceView.class_own_traits(sync=True) if not name.startswith("_")]
    state = {name: getattr(view, name) for name in names if name not in COLUMNS}
    for name in COLUMNS:
        state[name] = {k: base64.b64encode(v).decode() for k, v in getattr(view, name).items()}
    view.close()
    return state
