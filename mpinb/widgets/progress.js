// One mpinb.progress() loop across the ranks of a run: an overall bar with its line of text, then a
// small bar per rank; ranks that lag are orange, finished ones green.

/** @typedef {import("./state").ProgressState} ProgressState */

/**
 * mpinb's colours (mpinb/_colors.py) as CSS variables on ``root``, for progress.css.
 * @param {HTMLElement} root
 * @param {Record<string, string>} colors
 */
function setColors(root, colors) {
  for (const [name, value] of Object.entries(colors)) root.style.setProperty(`--mpinb-${name}`, value);
}

/** @type {import("@anywidget/types").Render<ProgressState>} */
function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mpinb-progress";
  setColors(root, model.get("colors"));
  const overall = document.createElement("div");
  overall.className = "overall";
  const fill = document.createElement("div");
  overall.appendChild(fill);
  const line = document.createElement("div");
  line.className = "line";
  const grid = document.createElement("div");
  grid.className = "ranks";
  root.append(overall, line, grid);
  el.append(root);
  /** @type {{ cell: HTMLSpanElement, label: HTMLSpanElement, bar: HTMLDivElement }[]} */
  const cells = [];

  function draw() {
    const ranks = model.get("ranks"), counts = model.get("counts"), done = model.get("done"), ended = model.get("ended");
    const elapsed = model.get("elapsed"), total = model.get("total"), over = model.get("over");
    const lagging = new Set(model.get("lagging"));
    const sum = counts.reduce((a, b) => a + b, 0);
    overall.classList.toggle("unknown", !total && !over);
    fill.style.width = total ? `${Math.min(100, (100 * sum) / (total * ranks.length)).toFixed(1)}%` : "100%";
    line.textContent = model.get("line");
    while (cells.length < ranks.length) {
      const cell = document.createElement("span");
      const label = document.createElement("span");
      const mini = document.createElement("span");
      mini.className = "mini";
      const bar = document.createElement("div");
      mini.appendChild(bar);
      cell.append(label, mini);
      grid.appendChild(cell);
      cells.push({ cell, label, bar });
    }
    const top = total || Math.max(1, ...counts);
    ranks.forEach((rank, i) => {
      const { cell, label, bar } = cells[i];
      const state = lagging.has(rank) ? "lagging" : done[i] ? "done" : ended[i] || over ? "stopped" : "";
      cell.className = `rank ${state}`;
      cell.dataset.rank = String(rank);
      label.textContent = String(rank);
      bar.style.width = `${Math.min(100, (100 * counts[i]) / top).toFixed(1)}%`;
      const rate = elapsed[i] > 0 ? counts[i] / elapsed[i] : 0;
      cell.title = `rank ${rank}: ${counts[i]}${total ? `/${total}` : ""}, ${rate.toPrecision(3)} it/s`
        + (state ? ` (${state})` : "");
    });
    root.dataset.count = String(sum);
    root.dataset.lagging = [...lagging].join(",");
    root.dataset.over = over ? "1" : "";
  }
  for (const name of ["counts", "done", "ended", "lagging", "line", "over", "total"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
