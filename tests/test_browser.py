"""The per-rank output widget in a real JupyterLab, in headless chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _processes import wait_until_gone
from browser import CHROMIUM, CHROMIUM_FLAGS, jupyterlab, page_on, run_all, write_notebook

from mpinb._colors import ODD, tint

pytestmark = pytest.mark.browser


@pytest.mark.timeout(240)
def test_per_rank_tabs_render_and_switch(tmp_path, artifacts, existing_pools):
    write_notebook(str(tmp_path / "ranks.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 3\nimport time\nfor i in range(2):\n    print('hello', i, 'from rank', rank, end='')\n"
        "    time.sleep(1)\n    print(' (after a second)')\n    time.sleep(2)\n"
        "if rank == 2:\n    print('a warning', file=__import__('sys').stderr)\nrank * 7",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "ranks.ipynb") as page:
        run_all(page)
        # While the ranks run, what they print arrives as news and is appended, half lines included.
        page.wait_for_selector(".mpinb-out .content:has-text('[2] hello 0 from rank 2 (after a second)')",
                               timeout=90_000)
        assert "running" in page.locator(".mpinb-out .summary").inner_text(), "the run has 5 s to go"
        done = page.wait_for_selector(".mpinb-out .summary:has-text('done')", timeout=90_000)
        assert "ranks 0-2" in done.inner_text()
        tabs = page.locator(".mpinb-out .tab")
        assert tabs.all_inner_texts()[0] == "All ranks"
        assert tabs.all_inner_texts()[1] == "By output"
        assert [t.strip() for t in tabs.all_inner_texts()[2:]] == ["rank 0 \u2713", "rank 1 \u2713", "rank 2 \u2713"]
        merged = page.locator(".mpinb-out .content").inner_text()
        for rank in range(3):
            assert f"[{rank}] hello 1 from rank {rank} (after a second)" in merged
        assert "[2:err] a warning" in merged
        assert "Out[1]" in merged and "7" in merged
        page.screenshot(path=os.path.join(artifacts, "per-rank-output-merged.png"))

        page.click(".mpinb-out .tab[data-tab='rank-1']")
        content = page.locator(".mpinb-out .content").inner_text()
        assert "hello 0 from rank 1" in content and "rank 0" not in content
        page.screenshot(path=os.path.join(artifacts, "per-rank-output-rank1.png"))
    assert not wait_until_gone(15, existing_pools), "shutting JupyterLab down must stop the notebook's pool"


@pytest.mark.timeout(240)
def test_many_ranks_group_their_output_and_jump_to_a_rank(tmp_path, artifacts, existing_pools):
    """24 ranks: no tab per rank (they would not fit), but tabs for the failed ones, ranks with the
    same output shown once, and a box that jumps to any rank."""
    write_notebook(str(tmp_path / "many.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 24\nprint('odd one' if rank == 5 else 'hello')\nif rank == 7:\n    raise ValueError('seven')",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "many.ipynb") as page:
        run_all(page)
        page.wait_for_selector(".mpinb-out .summary:has-text('failed on rank 7')", timeout=120_000)
        tabs = [t.strip() for t in page.locator(".mpinb-out .tab").all_inner_texts()]
        assert tabs == ["All ranks", "By output", "rank 7 \u2717"], "tabs for the failed rank only"
        page.click(".mpinb-out .tab[data-tab='grouped']")
        heads = page.locator(".mpinb-out .group-head").all_inner_texts()
        assert heads == ["ranks 0-4, 6-23 (23 ranks, same output)", "rank 5"]
        page.screenshot(path=os.path.join(artifacts, "many-ranks-by-output.png"))
        page.fill(".mpinb-out .jump input", "5")
        page.press(".mpinb-out .jump input", "Enter")
        page.wait_for_selector(".mpinb-out .tab.active[data-tab='rank-5']")
        assert "odd one" in page.locator(".mpinb-out .content").inner_text()
    assert not wait_until_gone(15, existing_pools), "shutting JupyterLab down must stop the notebook's pool"


@pytest.mark.timeout(240)
def test_space_time_diagram_matrix_and_summary(tmp_path, artifacts, existing_pools):
    write_notebook(str(tmp_path / "trace.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 3 --view full --verify\nfor step in range(2):\n    comm.send(rank, dest=(rank + 1) % size)\n"
        "    comm.recv(source=(rank - 1) % size)\ncomm.allreduce(rank)",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "trace.ipynb") as page:
        run_all(page)
        canvas = page.wait_for_selector(".mpinb-trace canvas[data-arrows]", timeout=90_000)
        found = page.wait_for_selector(".mpinb-findings", timeout=30_000).inner_text()
        assert "MPI correctness: this run works only by accident (1):" in found
        assert "send at line 3 on ranks 0-2: this exchange finishes only because MPI buffered a message" in found
        assert canvas.get_attribute("data-lanes") == "3"
        assert canvas.get_attribute("data-arrows") == "6", "one arrow per message"
        assert 3 <= int(canvas.get_attribute("data-boxes")) <= 15, "calls below a pixel are merged"
        info = page.locator(".mpinb-trace .info").inner_text()
        assert "15 MPI calls" in info and "6 messages" in info
        box = canvas.bounding_box()
        tip = page.locator(".mpinb-trace .tip")
        for x in range(60, int(box["width"]) - 10, 3):  # sweep rank 0's lane until a call is hit
            page.mouse.move(box["x"] + x, box["y"] + 18 + 13)
            if tip.is_visible():
                break
        assert tip.is_visible() and "rank 0:" in tip.inner_text() and "line" in tip.inner_text()
        page.screenshot(path=os.path.join(artifacts, "trace-space-time.png"))

        page.click(".mpinb-trace .tab[data-panel='matrix']")
        cells = page.locator(".mpinb-trace table.heat td.cell")
        assert cells.count() == 9
        assert cells.nth(1).inner_text() == "2" and cells.nth(0).inner_text() == ""
        page.screenshot(path=os.path.join(artifacts, "trace-matrix.png"))

        page.click(".mpinb-trace .tab[data-panel='summary']")
        assert page.locator(".mpinb-trace table tr").count() == 4
    assert not wait_until_gone(15, existing_pools)


@pytest.mark.timeout(240)
def test_one_sided_transfers_and_neighbour_arrows_are_drawn(tmp_path, artifacts, existing_pools):
    child = str(tmp_path / "child.py")
    with open(child, "w") as file:
        file.write("from mpi4py import MPI\nparent = MPI.Comm.Get_parent()\n"
                   "parent.send(1, dest=0)\nparent.Disconnect()\n")
    write_notebook(str(tmp_path / "rma.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 4 --view full\nimport time\nbuf = np.zeros(size)\nwin = MPI.Win.Create(buf, disp_unit=8, comm=comm)\n"
        "win.Fence()\nfor target in range(size):\n    if target != rank:\n"
        "        win.Put(np.full(1, rank * 1.0), target, rank)\n        time.sleep(0.02)\nwin.Fence()\nwin.Free()",
        "%%mpi --view full\ncart = comm.Create_cart([2, 2])\ncart.neighbor_allgather(rank)\ncart.Free()",
        "%%mpi --view full\nimport time\nwin = MPI.Win.Allocate(8, comm=comm)\ncomm.Barrier()\nif rank in (1, 2):\n"
        "    win.Lock(0)\n    time.sleep(0.1)\n    win.Unlock(0)\ncomm.Barrier()\nwin.Free()",
        "%%mpi --view full\nfh = MPI.File.Open(comm, 'grid.bin', MPI.MODE_CREATE | MPI.MODE_RDWR)\n"
        "fh.Write_at_all(rank * 8, np.full(1, rank * 1.0))\nback = np.zeros(1)\nfh.Read_at_all(0, back)\nfh.Close()",
        f"%%mpi --view full\nimport sys\nif rank == 0:\n"
        f"    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[{child!r}], maxprocs=2)\n"
        "    got = [inter.recv(source=c) for c in range(2)]\n    inter.Disconnect()",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "rma.ipynb") as page:
        run_all(page)
        page.wait_for_selector(".mpinb-trace >> nth=4", timeout=90_000)
        rma, grid = page.locator(".mpinb-trace").nth(0), page.locator(".mpinb-trace").nth(1)
        canvas = rma.locator("canvas[data-flows]")
        assert canvas.get_attribute("data-flows") == "12", "a Put from each rank to each other rank"
        assert canvas.get_attribute("data-arrows") == "0", "no point-to-point message"
        assert "12 one-sided or neighbourhood flows" in rma.locator(".info").inner_text()
        assert "rma" in rma.locator(".legend").inner_text()
        box = canvas.bounding_box()
        tip = rma.locator(".tip")
        said = ""
        for lane in range(4):  # sweep the lanes until an RMA call is hit
            for x in range(60, int(box["width"]) - 10, 2):
                page.mouse.move(box["x"] + x, box["y"] + 18 + 13 + 26 * lane)
                if tip.is_visible() and "(rma)" in tip.inner_text():
                    said = tip.inner_text()
                    break
            if said:
                break
        assert "Put (rma)" in said and "displacement" in said, said
        rma.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-rma-fence.png"))
        rma.locator(".tab[data-panel='matrix']").click()
        cells = rma.locator("table.heat td.cell")
        assert cells.count() == 16 and cells.nth(1).inner_text() == "1", "rank 0 put once into rank 1"
        assert grid.locator("canvas").get_attribute("data-flows") == "8", "each rank to its 2 neighbours only"
        locked = page.locator(".mpinb-trace").nth(2)
        assert locked.locator("canvas").get_attribute("data-locks") == "2", "two holds on rank 0's lane"
        locked.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-rma-lock.png"))
        written = page.locator(".mpinb-trace").nth(3).locator("canvas")
        assert written.get_attribute("data-file-lanes") == "1", "grid.bin's lane below the ranks'"
        assert written.get_attribute("data-io") == "8", "a write and a read between each rank and the file"
        assert "io" in page.locator(".mpinb-trace").nth(3).locator(".legend").inner_text()
        written.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-file-lane.png"))
        spawned = page.locator(".mpinb-trace").nth(4)
        lanes = spawned.locator("canvas")
        assert lanes.get_attribute("data-lanes") == "6", "two children's lanes after the 4 ranks'"
        assert lanes.get_attribute("data-arrows") == "2", "a message from each child to rank 0"
        spawned.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-spawned-lanes.png"))
        spawned.locator(".tab[data-panel='matrix']").click()
        heads = spawned.locator("table.heat tr td:first-child")
        assert [heads.nth(i).inner_text() for i in range(1, 7)][-2:] == ["child 0", "child 1"]
    assert not wait_until_gone(15, existing_pools)


@pytest.mark.timeout(240)
def test_the_trace_view_speaks_the_notebooks_language(tmp_path, artifacts, existing_pools, monkeypatch):
    monkeypatch.delenv("MPINB_LANGUAGE")  # (the tests' own English): the notebook's folder decides
    (tmp_path / "zh").mkdir()
    write_notebook(str(tmp_path / "zh" / "trace.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 2 --view full\nimport time\nif rank == 1:\n    time.sleep(0.2)\ncomm.allreduce(rank)",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "zh/trace.ipynb") as page:
        run_all(page)
        view = page.locator(".mpinb-trace").first
        view.locator("canvas[data-lanes='2']").wait_for(timeout=90_000)
        tabs = view.locator(".tab").all_inner_texts()
        assert tabs == ["时空图", "通信矩阵", "各 rank", "统计"], tabs
        assert "次 MPI 调用" in view.locator(".info").inner_text()
        assert "关键路径" in view.locator(".legend").inner_text()
        assert "负载不均衡" in view.locator(".loss").first.inner_text(), "the biggest loss, in Chinese"
        # Without a CJK font every Chinese character is the same box: two that draw alike are boxes.
        same = page.evaluate("""() => {
            const drawn = (text) => {
                const canvas = document.createElement("canvas");
                canvas.width = 48; canvas.height = 32;
                const context = canvas.getContext("2d");
                context.font = "24px sans-serif";
                context.fillText(text, 4, 26);
                return Array.from(context.getImageData(0, 0, 48, 32).data).join(",");
            };
            return drawn("\u4e2d") === drawn("\u56fd");
        }""")
        assert not same, "the browser draws Chinese as boxes: it needs a CJK font (make system installs fonts-noto-cjk)"
        view.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-zh.png"))
        view.locator(".tab[data-panel='summary']").click()
        assert "MPI 时间与计算时间" in view.locator("table").first.inner_text()
    assert not wait_until_gone(15, existing_pools)


@pytest.mark.timeout(240)
def test_waits_critical_path_filters_statistics_and_an_unfinished_run(tmp_path, artifacts, existing_pools):
    write_notebook(str(tmp_path / "insight.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 3 --view full\nimport time\nif rank == 1:\n    time.sleep(0.3)\n    comm.Send(np.ones(64), dest=0)\n"
        "elif rank == 0:\n    comm.Recv(np.zeros(64), source=1)\ncomm.allreduce(rank)",
        "%%mpi --view none\ncomm.allreduce(rank)",
        "%mpi compare",
        "%%mpi --view none\nimport time, mpinb\nfor step in mpinb.progress(range(20), desc='steps'):\n"
        "    time.sleep(0.15 if rank == 0 else 0.005)",
        "%%mpi --timeout 3 --view full\ncomm.recv(source=(rank + 1) % size)",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "insight.ipynb") as page:
        run_all(page)
        bar = page.locator(".mpinb-progress")
        bar.locator(".rank.lagging[data-rank='0']").wait_for(timeout=90_000)  # while it runs
        assert bar.locator(".rank.done").count() == 2, "ranks 1 and 2 finished long before rank 0"
        bar.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "progress-lagging-rank.png"))
        page.locator(".mpinb-progress[data-over='1'][data-count='60']").wait_for(timeout=30_000)
        assert bar.locator(".rank.done").count() == 3 and bar.locator(".rank.lagging").count() == 0
        assert bar.locator(".line").inner_text().startswith("steps: 100%")
        page.wait_for_selector(".mpinb-trace >> nth=3", timeout=90_000)
        first, stopped = page.locator(".mpinb-trace").nth(0), page.locator(".mpinb-trace").nth(3)
        compared = page.locator(".mpinb-compare canvas[data-axis-end]")
        assert compared.count() == 2, "before and after, one space-time diagram each"
        assert compared.nth(0).get_attribute("data-axis-end") == compared.nth(1).get_attribute("data-axis-end")
        assert "wall time" in page.locator(".mpinb-compare-table").inner_text()
        canvas = first.locator("canvas[data-waits]")
        assert int(canvas.get_attribute("data-waits")) >= 2, "the late sender and the waits at the allreduce"
        assert int(canvas.get_attribute("data-path")) >= 2, "the critical path passes rank 1, then rank 0"
        page.screenshot(path=os.path.join(artifacts, "trace-waits-and-path.png"))

        first.locator("input[data-filter='show_ranks']").fill("0-1")
        first.locator("canvas[data-lanes='2']").wait_for(timeout=10_000)
        first.locator("select[data-filter='show_op']").select_option("Recv")
        first.locator("canvas[data-boxes='1']").wait_for(timeout=10_000)
        assert first.locator("canvas").get_attribute("data-arrows") == "0", "the send is filtered out"
        first.locator("input[data-filter='show_path']").uncheck()
        first.locator("canvas[data-path='0']").wait_for(timeout=10_000)

        first.locator(".tab[data-panel='matrix']").click()
        first.locator("select[data-filter='measure']").select_option("time")
        cell = first.locator("table.heat tr").nth(2).locator("td.cell").nth(0)  # rank 1 -> rank 0
        assert cell.inner_text().endswith("ms"), cell.inner_text()
        first.locator(".tab[data-panel='stats']").click()
        assert first.locator("h4").all_inner_texts()[0].startswith("Message sizes")
        assert "Recv" in first.locator("table.heat").nth(1).inner_text()
        first.locator(".tab[data-panel='summary']").click()
        assert "waited" in first.locator(".loss").first.inner_text()
        assert "critical path" in first.locator(".path").inner_text()

        open_canvas = stopped.locator("canvas[data-open]")
        assert open_canvas.get_attribute("data-open") == "3", "each rank's broken-off recv"
        assert "3 calls unfinished" in stopped.locator(".info").inner_text()
        stopped.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(artifacts, "trace-deadlock-unfinished.png"))
    assert not wait_until_gone(15, existing_pools)


@pytest.mark.timeout(300)
def test_jupyterlabs_debugger_panel_stops_the_ranks_at_a_gutter_breakpoint(tmp_path, artifacts, existing_pools,
                                                                          monkeypatch):
    """The MPI kernel in JupyterLab: enable the debugger, click the gutter of line 2, run; the
    panel shows a rank's call stack and variables; continue moves to the next stopped rank, then
    the cell finishes."""
    import nbformat

    from mpinb.cli import _kernelspec as kernelspec

    jupyter = tmp_path / "jupyter"
    kernelspec.render(str(jupyter / "kernels"), ranks=2)
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = rank * 10\ny = x + 1\nz = y * 2\nz")])
    nb.metadata["kernelspec"] = {"name": "mpinb", "display_name": "Python (MPI, mpinb)", "language": "python"}
    nbformat.write(nb, str(tmp_path / "debug.ipynb"))
    with jupyterlab(str(tmp_path)) as server, page_on(server, "debug.ipynb") as page:
        page.click("[title='Enable Debugger']")
        page.locator(".jp-Cell .cm-breakpoint-gutter .cm-gutterElement").nth(2).click()  # line 2
        page.wait_for_selector(".jp-Cell span[aria-label='Breakpoint']", state="attached", timeout=10_000)
        page.locator("li[title*='Debugger']").first.click()  # the debugger sidebar
        # Listed there once the kernel has answered setBreakpoints: only then does the run stop at it.
        page.wait_for_selector(".jp-DebuggerBreakpoint-line:text-is('2')", timeout=30_000)
        run_all(page)
        page.wait_for_selector("text=Paused in Debugger", timeout=90_000)
        first = _rank_shown(page)  # its call stack and its variables (x = rank * 10)
        page.screenshot(path=os.path.join(artifacts, "debugger-panel-first-rank.png"))
        page.locator("[title^='Continue']").first.click()
        assert _rank_shown(page) == 1 - first, "continue moves the panel to the rank still stopped"
        page.screenshot(path=os.path.join(artifacts, "debugger-panel-second-rank.png"))
        page.locator("[title^='Continue']").first.click()
        page.wait_for_selector(".mpinb-out .summary:has-text('done')", timeout=60_000)
        merged = page.locator(".mpinb-out .content").inner_text()
        assert "Out[0]" in merged and "2" in merged and "22" in merged, merged
    assert not wait_until_gone(15, existing_pools), "shutting JupyterLab down must stop the kernel's pool"


def _rank_shown(page, timeout: float = 30) -> int:
    """The rank the debugger panel shows, once its call stack and its variables agree on it (the
    cell sets x = rank * 10)."""
    import re
    import time

    deadline = time.monotonic() + timeout
    while True:
        stack = page.locator(".jp-DebuggerCallstack").inner_text()
        variables = page.locator(".jp-DebuggerVariables").inner_text()
        shown = re.search(r"rank (\d+): <module>", stack)
        value = re.search(r"(^|\n)x:?\s*\n?(\d+)(\n|$)", variables)
        if shown and value and int(value.group(2)) == int(shown.group(1)) * 10:
            return int(shown.group(1))
        assert time.monotonic() < deadline, f"the panel shows {stack!r} and {variables!r}"
        time.sleep(0.2)


@pytest.mark.timeout(240)
def test_inspect_and_stacks_render_in_jupyterlab(tmp_path, artifacts, existing_pools):
    write_notebook(str(tmp_path / "views.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 3\nimport numpy as np\nv = np.arange(5.0)\nif rank == 1:\n    v[3] = -1",
        "%mpi inspect v",
        "%mpi stacks",
    ])
    with jupyterlab(str(tmp_path)) as server, page_on(server, "views.ipynb") as page:
        run_all(page)
        table = page.wait_for_selector(".mpinb-inspect table", timeout=120_000)
        odd = table.query_selector_all(f"tr[style*='{tint(ODD, 0.3)}']")
        assert [row.inner_text().split("\t")[0] for row in odd] == ["rank 1"], "the rank that differs is marked"
        assert "first: [3]: -1 vs 3" in page.locator(".mpinb-inspect").inner_text()
        assert page.locator(f".mpinb-inspect svg rect[fill='{ODD}']").count() == 1, "its bar is orange"
        stacks = page.wait_for_selector(".mpinb-stacks", timeout=60_000)
        assert stacks.inner_text().splitlines() == ["3 ranks: 3 idle", "ranks 0-2: idle"]
        page.screenshot(path=os.path.join(artifacts, "inspect-and-stacks.png"))
    assert not wait_until_gone(15, existing_pools)


# Accepted or refused alike by mpinb.common._ranges.parse_ranks and trace.js's rank filter; for those
# accepted, the ranks of 0-15 that each selects.
RANK_TEXTS = ["", "all", "*", " * ", "0", "3", "0-3", "0-3,6", " 1 , 2 - 2 ", "03", "0,0", "15", "3-1", "a",
              "1-", "-1", "1--2", "1-2-3", "2,,3", "0,", "+3", "1_0", "\u0663", "0x3", "1.5", "\t1", "0-30",
              "a ll", " al l"]


@pytest.mark.timeout(120)
def test_the_trace_views_rank_filter_follows_the_python_rule():
    from playwright.sync_api import sync_playwright

    from mpinb.common._ranges import parse_ranks

    source = (Path(__file__).parent.parent / "mpinb" / "widgets" / "trace.js").read_text()
    with sync_playwright() as play:
        browser = play.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            chosen = page.evaluate("""async ([source, texts]) => {
                const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
                const { parseRanks } = await import(url);
                return texts.map((text) => {
                    const ranges = parseRanks(text);
                    return ranges && [...Array(16).keys()].filter((r) => ranges.some(([a, b]) => a <= r && r <= b));
                });
            }""", [source, RANK_TEXTS])
        finally:
            browser.close()
    for text, javascript in zip(RANK_TEXTS, chosen):
        try:
            python = [rank for rank in parse_ranks(text, 31) if rank < 16]
        except ValueError:
            python = None
        assert javascript == python, f"{text!r}: trace.js selects {javascript}, parse_ranks {python}"


# Every text inside mpinb's views, with the contrast of its colour against what is behind it
# (backgrounds composited up to the first opaque one), as WCAG defines contrast.
CONTRASTS = """(selector) => {
    const parse = (text) => {
        let m = text.match(/^rgba?\\(([^)]*)\\)$/);
        if (m) { const p = m[1].split(/[\\s,/]+/).filter(Boolean).map(Number);
                 return [p[0] / 255, p[1] / 255, p[2] / 255, p.length > 3 ? p[3] : 1]; }
        m = text.match(/^color\\(srgb ([^)]*)\\)$/);
        if (m) { const p = m[1].split(/[\\s/]+/).filter(Boolean).map(Number);
                 return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
        throw new Error(`a colour this test cannot read: ${text}`);
    };
    const over = (top, below) => [0, 1, 2].map((i) => top[i] * top[3] + below[i] * (1 - top[3])).concat([1]);
    const background = (el) => {
        const layers = [];
        for (let node = el; node; node = node.parentElement) {
            const colour = parse(getComputedStyle(node).backgroundColor);
            if (colour[3] > 0) layers.push(colour);
            if (colour[3] >= 1) break;
        }
        return layers.reverse().reduce((below, top) => over(top, below), [1, 1, 1, 1]);
    };
    const luminance = (c) => {
        const [r, g, b] = c.slice(0, 3).map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const found = [];
    for (const root of document.querySelectorAll(selector)) {
        for (const el of [root, ...root.querySelectorAll("*")]) {
            const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
            if (!own || !el.getClientRects().length || getComputedStyle(el).visibility === "hidden") continue;
            const back = background(el), fore = over(parse(getComputedStyle(el).color), back);
            const [hi, lo] = [luminance(fore), luminance(back)].sort((a, b) => b - a);
            found.push({ text: el.textContent.trim().slice(0, 40), contrast: (hi + 0.05) / (lo + 0.05),
                         color: getComputedStyle(el).color, back: back.map((v) => v.toFixed(2)).join(",") });
        }
    }
    return found;
}"""
VIEWS = ".mpinb-out, .mpinb-trace, .mpinb-progress, .mpinb-inspect, .mpinb-stacks, .mpinb-check"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("app, theme", [("lab", "JupyterLab Light"), ("lab", "JupyterLab Dark"),
                                        ("notebook", "JupyterLab Dark")],
                         ids=["lab-light", "lab-dark", "notebook7-dark"])
def test_the_views_follow_the_theme_in_jupyterlab_and_notebook_7(tmp_path, artifacts, existing_pools, app, theme):
    """Every text of every view reads at WCAG AA's contrast (4.5:1) in the light and the dark
    theme, the canvas's lanes take the theme's colours, and the widgets work in Notebook 7."""
    write_notebook(str(tmp_path / "themed.ipynb"), [
        "%load_ext mpinb",
        "%%mpi -n 6 --view full\nimport sys, time\nprint('hello from rank', rank)\nif rank == 3:\n"
        "    print('a warning', file=sys.stderr)\nif rank == 1:\n    time.sleep(0.2)\n"
        "comm.send(rank, dest=(rank + 1) % size)\ncomm.recv(source=(rank - 1) % size)\n"
        "x = comm.allreduce(rank)",
        "%%mpi --view none\nimport mpinb\nfor step in mpinb.progress(range(8), desc='steps'):\n"
        "    time.sleep(0.2 if rank == 0 else 0.01)",
        "%%mpi\nv = np.arange(4.0) + (rank == 2)",
        "%mpi inspect v",
        "%mpi stacks",
        "from mpinb.teach._grading import CheckResult\n"
        "display(CheckResult('ring', True), CheckResult('ring', False, ['the exchange deadlocked']))",
        "%%mpi\nprint('last')\nif rank == 5:\n    raise ValueError('five')",  # last: Run All stops at an error
    ])
    dark = "Dark" in theme
    with jupyterlab(str(tmp_path), app=app, theme=theme) as server, page_on(server, "themed.ipynb") as page:
        # the theme is applied once its plugin has loaded
        page.wait_for_function(f"document.body.dataset.jpThemeLight === '{str(not dark).lower()}'", timeout=30_000)
        run_all(page)
        page.wait_for_selector(".mpinb-out .summary:has-text('failed on rank 5')", timeout=150_000)
        canvas = page.wait_for_selector(".mpinb-trace canvas[data-arrows]", timeout=30_000)
        assert (canvas.get_attribute("data-lanes"), canvas.get_attribute("data-arrows")) == ("6", "6")
        tabs = [t.strip() for t in page.locator(".mpinb-out").last.locator(".tab").all_inner_texts()]
        assert tabs[:3] == ["All ranks", "By output", "rank 0 \u2713"] and tabs[-1] == "rank 5 \u2717", tabs
        page.locator(".mpinb-out .tab[data-tab='rank-3']").first.click()
        assert "a warning" in page.locator(".mpinb-out .content").first.inner_text()
        page.locator(".mpinb-progress[data-over='1']").wait_for(timeout=30_000)
        # the lanes are drawn in the theme's colour: light on a light theme, dark on a dark one
        # (a tag that no call has leaves the lanes bare)
        trace = page.locator(".mpinb-trace").first
        trace.locator("input[data-filter='show_tag']").fill("999")
        trace.locator("canvas[data-boxes='0']").wait_for(timeout=10_000)
        bare = trace.locator("canvas").element_handle()
        lane = page.evaluate("""(c) => { const g = c.getContext('2d'), r = devicePixelRatio, seen = [];
            for (let x = 100; x < 900; x += 50) {  // the median: a collective's frame may cross one
                const [red, green, blue] = g.getImageData(x * r, (18 + 6) * r, 1, 1).data;
                seen.push((0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255);
            }
            return seen.sort((a, b) => a - b)[seen.length >> 1]; }""", bare)
        assert (lane < 0.35) if dark else (lane > 0.75), f"lane brightness {lane:.2f} in {theme}"
        trace.locator("input[data-filter='show_tag']").fill("")
        trace.locator("canvas[data-boxes]:not([data-boxes='0'])").wait_for(timeout=10_000)
        for panel in ("timeline", "matrix", "summary"):
            page.locator(f".mpinb-trace .tab[data-panel='{panel}']").first.click()
            page.wait_for_timeout(300)
            page.screenshot(path=os.path.join(artifacts, f"themed-{app}-{theme.split()[-1].lower()}-{panel}.png"),
                            full_page=True)
            texts = page.evaluate(CONTRASTS, VIEWS)
            assert len(texts) > 20, texts
            poor = [t for t in texts if t["contrast"] < 4.5]
            assert not poor, f"{theme}, {panel}: text below 4.5:1 contrast: {poor[:8]}"
        for kind in ("mpinb-inspect", "mpinb-stacks", "mpinb-check", "mpinb-progress"):
            assert page.locator(f".{kind}").count(), f"no {kind} was drawn"
        page.locator(".mpinb-check").last.scroll_into_view_if_needed()
        shade = theme.split()[-1].lower()
        page.screenshot(path=os.path.join(artifacts, f"themed-{app}-{shade}-inspect-stacks-check.png"))
    assert not wait_until_gone(15, existing_pools), "shutting the server down must stop the notebook's pool"
