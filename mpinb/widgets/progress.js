// One mpinb.progress() loop across the ranks of a run: an overall bar with its line of text, then a
// small bar per rank; ranks that lag are orange, finished ones green.

const CSS = `
.mpinb-progress { font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; margin: 4px 0; }
.mpinb-progress .overall { height: 10px; background: #e8e8e8; border-radius: 2px; overflow: hidden; max-width: 640px; }
.mpinb-progress .overall > div { height: 100%; background: #4e79a7; transition: width 0.2s; }
.mpinb-progress .overall.unknown > div { width: 100% !important; background: repeating-linear-gradient(
  45deg, #4e79a7 0 8px, #7ea2c8 8px 16px); }
.mpinb-progress .line { font-family: var(--jp-code-font-family, monospace); font-size: 11px; margin: 2px 0 4px; white-space: pre; }
.mpinb-progress .ranks { display: flex; flex-wrap: wrap; gap: 3px 8px; max-width: 900px; }
.mpinb-progress .rank { display: flex; align-items: center; gap: 3px; color: #555; font-size: 10px; }
.mpinb-progress .rank .mini { width: 56px; height: 5px; background: #e8e8e8; }
.mpinb-progress .rank .mini > div { height: 100%; background: #4e79a7; }
.mpinb-progress .rank.lagging { color: #c85200; font-weight: bold; }
.mpinb-progress .rank.lagging .mini > div { background: #f28e2b; }
.mpinb-progress .rank.done .mini > div { background: #59a14f; }
.mpinb-progress .rank.stopped .mini > div { background: #bab0ac; }
`;

function render({ model, el }) {
  const style = document.createElement("style");
  style.textContent = CSS;
  const root = document.createElement("div");
  root.className = "mpinb-progress";
  const overall = document.createElement("div");
  overall.className = "overall";
  const fill = document.createElement("div");
  overall.appendChild(fill);
  const line = document.createElement("div");
  line.className = "line";
  const grid = document.createElement("div");
  grid.className = "ranks";
  root.append(overall, line, grid);
  el.append(style, root);
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
      cell.dataset.rank = rank;
      label.textContent = rank;
      bar.style.width = `${Math.min(100, (100 * counts[i]) / top).toFixed(1)}%`;
      const rate = elapsed[i] > 0 ? counts[i] / elapsed[i] : 0;
      cell.title = `rank ${rank}: ${counts[i]}${total ? `/${total}` : ""}, ${rate.toPrecision(3)} it/s`
        + (state ? ` (${state})` : "");
    });
    root.dataset.count = sum;
    root.dataset.lagging = [...lagging].join(",");
    root.dataset.over = over ? "1" : "";
  }
  for (const name of ["counts", "done", "ended", "lagging", "line", "over", "total"]) model.on(`change:${name}`, draw);
  draw();
}

export default { render };
