// Per-rank output of one %%mpi cell: a merged view (rank-coloured prefixes) and a tab per rank.
// State comes from mpinb/widgets/output.py; this module only draws it.

const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const MAX_MERGED_LINES = 5000;
const MARK = { running: "\u25cc", ok: "\u2713", error: "\u2717", interrupted: "\u25a0", idle: "" };

const CSS = `
.mpinb-out { font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; }
.mpinb-out .bar { display: flex; flex-wrap: wrap; gap: 2px; border-bottom: 1px solid #ccc; }
.mpinb-out .tab { padding: 2px 8px; cursor: pointer; border: 1px solid transparent;
  border-bottom: none; border-radius: 3px 3px 0 0; user-select: none; }
.mpinb-out .tab.active { border-color: #ccc; background: var(--jp-layout-color0, #fff);
  margin-bottom: -1px; font-weight: bold; }
.mpinb-out .tab .mark.error { color: #c00; }
.mpinb-out .tab .mark.ok { color: #59a14f; }
.mpinb-out .summary { margin-left: auto; color: #777; padding: 2px 6px; }
.mpinb-out pre { margin: 4px 0; max-height: 30em; overflow: auto; white-space: pre-wrap;
  font-family: var(--jp-code-font-family, monospace); font-size: var(--jp-code-font-size, 12px); }
.mpinb-out .err { color: #c00; }
.mpinb-out pre.notice { color: #8a4b00; background: #fff4e5; border-left: 3px solid #f28e2b; padding: 4px 8px; }
.mpinb-out .prefix { font-weight: bold; }
.mpinb-out .note { color: #777; font-style: italic; }
.mpinb-out table.values { border-collapse: collapse; margin-top: 4px; }
.mpinb-out table.values td { padding: 1px 8px; text-align: left; vertical-align: top;
  font-family: var(--jp-code-font-family, monospace); }
.mpinb-out .display img { max-width: 100%; }
`;

function color(rank) { return COLORS[rank % COLORS.length]; }

function rangeText(ranks) {
  const parts = [];
  for (let i = 0; i < ranks.length; ) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) j++;
    parts.push(i === j ? `${ranks[i]}` : `${ranks[i]}-${ranks[j]}`);
    i = j + 1;
  }
  return parts.join(", ");
}

function prefix(rank, isErr) {
  const span = document.createElement("span");
  span.className = "prefix";
  span.style.color = color(rank);
  span.textContent = isErr ? `[${rank}:err] ` : `[${rank}] `;
  return span;
}

function mergedLines(model) {
  // Chunks arrive in any size; split them into whole lines per (rank, stream).
  const ranks = model.get("ranks");
  const partial = new Map();
  const lines = [];
  for (const [index, stream, text] of model.get("merged")) {
    const key = `${index}:${stream}`;
    const pieces = ((partial.get(key) || "") + text).split("\n");
    partial.set(key, pieces.pop());
    for (const line of pieces) lines.push([ranks[index], stream === "stderr", line]);
  }
  for (const [key, rest] of partial) {
    if (rest) {
      const [index, stream] = key.split(":");
      lines.push([ranks[Number(index)], stream === "stderr", rest]);
    }
  }
  return lines;
}

function drawMerged(model, box) {
  const lines = mergedLines(model);
  const pre = document.createElement("pre");
  if (lines.length > MAX_MERGED_LINES) {
    const note = document.createElement("div");
    note.className = "note";
    note.textContent = `showing the last ${MAX_MERGED_LINES} of ${lines.length} lines; each rank's tab has all of its own`;
    box.appendChild(note);
  }
  for (const [rank, isErr, text] of lines.slice(-MAX_MERGED_LINES)) {
    pre.appendChild(prefix(rank, isErr));
    const body = document.createElement("span");
    if (isErr) body.className = "err";
    body.textContent = text + "\n";
    pre.appendChild(body);
  }
  if (lines.length) box.appendChild(pre);
  const displays = model.get("displays");
  model.get("ranks").forEach((rank, index) => {
    for (const item of displays[index] || []) {
      const label = document.createElement("div");
      label.appendChild(prefix(rank, false));
      box.appendChild(label);
      box.appendChild(drawDisplay(item));
    }
  });
}

function drawDisplay(item) {
  const div = document.createElement("div");
  div.className = "display";
  if (item.mime === "image/png") {
    const img = document.createElement("img");
    img.src = `data:image/png;base64,${item.data}`;
    div.appendChild(img);
  } else if (item.mime === "image/svg+xml" || item.mime === "text/html") {
    div.innerHTML = item.data;
  } else {
    const pre = document.createElement("pre");
    pre.textContent = item.data;
    div.appendChild(pre);
  }
  return div;
}

function drawRank(model, index, box) {
  const out = model.get("stdout")[index] || "";
  const err = model.get("stderr")[index] || "";
  if (out) {
    const pre = document.createElement("pre");
    pre.textContent = out;
    box.appendChild(pre);
  }
  if (err) {
    const pre = document.createElement("pre");
    pre.className = "err";
    pre.textContent = err;
    box.appendChild(pre);
  }
  for (const item of model.get("displays")[index] || []) box.appendChild(drawDisplay(item));
  if (!out && !err && !(model.get("displays")[index] || []).length) {
    const note = document.createElement("div");
    note.className = "note";
    note.textContent = "no output";
    box.appendChild(note);
  }
}

function drawValues(model, box, only) {
  const ranks = model.get("ranks");
  const groups = new Map();
  model.get("values").forEach((text, index) => {
    if (!text || (only !== null && index !== only)) return;
    if (!groups.has(text)) groups.set(text, []);
    groups.get(text).push(ranks[index]);
  });
  if (!groups.size) return;
  const table = document.createElement("table");
  table.className = "values";
  for (const [text, group] of groups) {
    const row = table.insertRow();
    row.insertCell().textContent = `Out[${rangeText(group)}]`;
    row.insertCell().textContent = text;
  }
  box.appendChild(table);
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mpinb-out";
  const style = document.createElement("style");
  style.textContent = CSS;
  el.appendChild(style);
  el.appendChild(root);
  let selected = "merged";

  function draw() {
    root.replaceChildren();
    const mode = model.get("mode");
    const ranks = model.get("ranks");
    const states = model.get("state");
    const bar = document.createElement("div");
    bar.className = "bar";
    const tabs = mode === "tabs" ? ["merged", ...ranks.map((_, i) => i)] : [];
    for (const key of tabs) {
      const tab = document.createElement("span");
      tab.className = "tab" + (key === selected ? " active" : "");
      tab.dataset.tab = key === "merged" ? "merged" : `rank-${ranks[key]}`;
      if (key === "merged") {
        tab.textContent = "All ranks";
      } else {
        const state = states[key] || "idle";
        tab.textContent = `rank ${ranks[key]} `;
        tab.style.color = color(ranks[key]);
        const mark = document.createElement("span");
        mark.className = `mark ${state}`;
        mark.textContent = MARK[state] || "";
        tab.appendChild(mark);
      }
      tab.addEventListener("click", () => { selected = key; draw(); });
      bar.appendChild(tab);
    }
    const summary = document.createElement("span");
    summary.className = "summary";
    summary.textContent = model.get("summary");
    bar.appendChild(summary);
    root.appendChild(bar);
    const notice = model.get("notice");
    if (notice) {
      const pre = document.createElement("pre");
      pre.className = "notice";
      pre.textContent = notice;
      root.appendChild(pre);
    }

    const box = document.createElement("div");
    box.className = "content";
    if (mode === "rank0") {
      const index = ranks.indexOf(0);
      if (index >= 0) drawRank(model, index, box);
      drawValues(model, box, index);
    } else if (mode === "merged" || selected === "merged") {
      drawMerged(model, box);
      drawValues(model, box, null);
    } else {
      drawRank(model, selected, box);
      drawValues(model, box, selected);
    }
    root.appendChild(box);
  }

  let pending = false;
  function redraw() {
    // Coalesce bursts of trait changes into one draw per frame.
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  }
  for (const name of ["ranks", "stdout", "stderr", "displays", "merged", "state", "values", "mode", "summary", "notice"]) {
    model.on(`change:${name}`, redraw);
  }
  draw();
}

export default { render };
