// Per-rank output of one %%mpi cell: a merged view (rank-coloured prefixes), a view that groups
// ranks with the same output, and a tab per rank (beyond MANY ranks: tabs for failed ranks only,
// and a box to jump to any rank).
// State comes from mpinb/widgets/output.py; this module only draws it. While a run goes on, the
// widget sends only what is new ("news" messages), which is appended to what is drawn; the whole
// output arrives as state at the end (and when a view opens late, it asks for it).

const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const MAX_MERGED_LINES = 5000;
const MANY = 16; // more ranks than this: no tab per rank
const FAILED_TABS = 8;
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
.mpinb-out .group-head { font-weight: bold; margin-top: 6px; cursor: pointer; }
.mpinb-out .group-head .count { color: #777; font-weight: normal; }
.mpinb-out .jump { padding: 1px 6px; color: #555; }
.mpinb-out .jump input { width: 4.5em; font-size: 11px; }
.mpinb-out .jump input.bad { outline: 2px solid #c00; }
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

function mergedLines(out) {
  // Chunks arrive in any size; split them into whole lines per (rank, stream).
  const ranks = out.ranks;
  const partial = new Map();
  const lines = [];
  for (const [index, stream, text] of out.merged) {
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

function mergedLine(rank, isErr, text) {
  const line = document.createElement("span");
  line.appendChild(prefix(rank, isErr));
  const body = document.createElement("span");
  if (isErr) body.className = "err";
  body.textContent = text + "\n";
  line.appendChild(body);
  return line;
}

function drawMerged(out, box) {
  const lines = mergedLines(out);
  const note = document.createElement("div");
  note.className = "note";
  box.appendChild(note);
  const pre = document.createElement("pre");
  box.appendChild(pre);
  for (const [rank, isErr, text] of lines.slice(-MAX_MERGED_LINES)) pre.appendChild(mergedLine(rank, isErr, text));
  const shown = { pre, note, count: lines.length, partial: new Map(), displays: document.createElement("div") };
  capMerged(shown);
  out.displays.forEach((items, index) => {
    for (const item of items || []) addMergedDisplay(shown, out.ranks[index], item);
  });
  box.appendChild(shown.displays);
  return shown;
}

function capMerged(shown) {
  // Keep the last MAX_MERGED_LINES lines in the page; each rank's tab has all of its own.
  while (shown.pre.childElementCount > MAX_MERGED_LINES) shown.pre.firstElementChild.remove();
  shown.note.textContent = shown.count > MAX_MERGED_LINES
    ? `showing the last ${MAX_MERGED_LINES} of ${shown.count} lines; each rank's tab has all of its own` : "";
}

function addMergedText(shown, rank, index, stream, text) {
  // A line that is still open (no newline yet) is drawn where it began and grows in place.
  const key = `${index}:${stream}`;
  const open = shown.partial.get(key);
  const pieces = ((open ? open.text : "") + text).split("\n");
  const rest = pieces.pop();
  if (open) {
    if (!pieces.length) { // still no newline: the open line grows
      open.text = rest;
      open.element.lastChild.textContent = rest + "\n";
      return;
    }
    open.element.lastChild.textContent = pieces.shift() + "\n";
    shown.partial.delete(key);
  }
  for (const line of pieces) {
    shown.pre.appendChild(mergedLine(rank, stream === "stderr", line));
    shown.count++;
  }
  if (rest) {
    const element = mergedLine(rank, stream === "stderr", rest);
    shown.pre.appendChild(element);
    shown.count++;
    shown.partial.set(key, { element, text: rest });
  }
  capMerged(shown);
}

function addMergedDisplay(shown, rank, item) {
  const label = document.createElement("div");
  label.appendChild(prefix(rank, false));
  shown.displays.appendChild(label);
  shown.displays.appendChild(drawDisplay(item));
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

function groupedOutput(out) {
  // Ranks with exactly the same text and displays share one block, in order of their first rank.
  const groups = new Map();
  const silent = [];
  out.ranks.forEach((rank, index) => {
    const displays = out.displays[index] || [];
    if (!out.stdout[index] && !out.stderr[index] && !displays.length) { silent.push(rank); return; }
    const key = JSON.stringify([out.stdout[index], out.stderr[index], displays]);
    if (!groups.has(key)) groups.set(key, { index, ranks: [] });
    groups.get(key).ranks.push(rank);
  });
  return { groups: [...groups.values()], silent };
}

function drawGrouped(out, box, select) {
  const { groups, silent } = groupedOutput(out);
  for (const group of groups) {
    const head = document.createElement("div");
    head.className = "group-head";
    head.style.color = color(group.ranks[0]);
    head.dataset.ranks = rangeText(group.ranks);
    head.textContent = `${group.ranks.length === 1 ? "rank" : "ranks"} ${rangeText(group.ranks)} `;
    const count = document.createElement("span");
    count.className = "count";
    count.textContent = group.ranks.length > 1 ? `(${group.ranks.length} ranks, same output)` : "";
    head.appendChild(count);
    head.title = `show rank ${group.ranks[0]} alone`;
    head.addEventListener("click", () => select(out.ranks.indexOf(group.ranks[0])));
    box.appendChild(head);
    const body = document.createElement("div");
    drawRank(out, group.index, body);
    box.appendChild(body);
  }
  if (silent.length) {
    const note = document.createElement("div");
    note.className = "note";
    note.textContent = `no output: ${silent.length === 1 ? "rank" : "ranks"} ${rangeText(silent)}`;
    box.appendChild(note);
  }
  return null; // news redraws this view (at most a few times a second)
}

function drawRank(out, index, box) {
  const shown = { index, stdout: document.createElement("pre"), stderr: document.createElement("pre"),
                  displays: document.createElement("div"), note: document.createElement("div") };
  shown.stderr.className = "err";
  shown.note.className = "note";
  box.append(shown.note, shown.stdout, shown.stderr, shown.displays);
  shown.stdout.textContent = out.stdout[index] || "";
  shown.stderr.textContent = out.stderr[index] || "";
  for (const item of out.displays[index] || []) shown.displays.appendChild(drawDisplay(item));
  markEmpty(shown);
  return shown;
}

function markEmpty(shown) {
  shown.stdout.hidden = !shown.stdout.textContent;
  shown.stderr.hidden = !shown.stderr.textContent;
  const empty = shown.stdout.hidden && shown.stderr.hidden && !shown.displays.childElementCount;
  shown.note.textContent = empty ? "no output" : "";
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
  let out = null; // this view's copy of the output: the state plus the news since
  let shown = null; // the elements that news is appended to
  let view = null; // "merged" or "rank", what `shown` belongs to

  function fromState() {
    out = {
      ranks: model.get("ranks"),
      stdout: [...model.get("stdout")],
      stderr: [...model.get("stderr")],
      displays: model.get("displays").map((items) => [...items]),
      merged: model.get("merged").map((chunk) => [...chunk]),
    };
  }

  function draw() {
    root.replaceChildren();
    const mode = model.get("mode");
    const ranks = out.ranks;
    const states = model.get("state");
    const bar = document.createElement("div");
    bar.className = "bar";
    const many = ranks.length > MANY;
    let perRank = ranks.map((_, i) => i);
    if (many) { // the failed ranks, and the one shown, get tabs; the box jumps to any other
      perRank = perRank.filter((i) => states[i] === "error").slice(0, FAILED_TABS);
      if (typeof selected === "number" && !perRank.includes(selected)) perRank.push(selected);
    }
    const tabs = mode === "tabs" ? ["merged", "grouped", ...perRank] : [];
    for (const key of tabs) {
      const tab = document.createElement("span");
      tab.className = "tab" + (key === selected ? " active" : "");
      tab.dataset.tab = typeof key === "string" ? key : `rank-${ranks[key]}`;
      if (key === "merged") {
        tab.textContent = "All ranks";
      } else if (key === "grouped") {
        tab.textContent = "By output";
        tab.title = "ranks with the same output together";
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
    if (mode === "tabs" && many) bar.appendChild(jumpBox(ranks));
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
      shown = index >= 0 ? drawRank(out, index, box) : null;
      view = "rank";
      drawValues(model, box, index);
    } else if (mode === "merged" || selected === "merged") {
      shown = drawMerged(out, box);
      view = "merged";
      drawValues(model, box, null);
    } else if (selected === "grouped") {
      shown = drawGrouped(out, box, (index) => { selected = index; draw(); });
      view = "grouped";
      drawValues(model, box, null);
    } else {
      shown = drawRank(out, selected, box);
      view = "rank";
      drawValues(model, box, selected);
    }
    root.appendChild(box);
  }

  function jumpBox(ranks) {
    const label = document.createElement("label");
    label.className = "jump";
    label.textContent = "rank ";
    const input = document.createElement("input");
    input.type = "number";
    input.min = String(Math.min(...ranks));
    input.max = String(Math.max(...ranks));
    input.placeholder = `${input.min}-${input.max}`;
    input.title = "show one rank's output";
    if (typeof selected === "number") input.value = String(ranks[selected]);
    input.addEventListener("input", () => { // each valid rank as it is typed
      const index = input.value === "" ? -1 : ranks.indexOf(Number(input.value));
      input.classList.toggle("bad", input.value !== "" && index < 0);
      if (index < 0) return;
      selected = index;
      draw();
      const again = root.querySelector(".jump input"); // the redrawn box keeps the focus
      if (again) { again.focus(); again.value = String(ranks[index]); }
    });
    input.addEventListener("keydown", (event) => event.stopPropagation()); // keys are not the notebook's
    label.appendChild(input);
    return label;
  }

  function applyNews(items) {
    let redrawAll = false;
    for (const item of items) {
      if (item[0] === "text") {
        const [, index, stream, text] = item;
        out[stream][index] += text;
        out.merged.push([index, stream, text]);
        if (view === "merged") addMergedText(shown, out.ranks[index], index, stream, text);
        else if (shown && shown.index === index) { shown[stream].textContent += text; markEmpty(shown); }
      } else if (item[0] === "display") {
        const [, index, display] = item;
        out.displays[index].push(display);
        if (view === "merged") addMergedDisplay(shown, out.ranks[index], display);
        else if (shown && shown.index === index) { shown.displays.appendChild(drawDisplay(display)); markEmpty(shown); }
      } else if (item[0] === "reset") { // a carriage return rewrote a stream: rare, draw afresh
        const [, index, stream, text] = item;
        out[stream][index] = text;
        redrawAll = true;
      }
    }
    if (redrawAll || view === "grouped") redraw();
  }

  let pending = false;
  function redraw() {
    // Coalesce bursts of state changes into one draw per frame.
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  }
  function reload() { fromState(); redraw(); }
  for (const name of ["ranks", "stdout", "stderr", "displays", "merged"]) model.on(`change:${name}`, reload);
  for (const name of ["state", "values", "mode", "notice"]) model.on(`change:${name}`, redraw);
  model.on("change:summary", () => {
    const summary = root.querySelector(".summary");
    if (summary) summary.textContent = model.get("summary");
  });
  model.on("msg:custom", (message) => { if (message.type === "news") applyNews(message.items); });
  fromState();
  draw();
  if (model.get("state").includes("running")) model.send({ type: "snapshot" });
}

export default { render };
