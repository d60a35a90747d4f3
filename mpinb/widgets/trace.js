// Message-flow views of one traced run: space-time diagram (canvas), communication matrix,
// per-rank summary. Event columns arrive as binary typed arrays (see trace.py).

const KIND = ["send", "recv", "collective", "wait", "probe"];
const KIND_COLOR = ["#4e79a7", "#59a14f", "#f28e2b", "#9c755f", "#bab0ac"];
const LEFT = 56, RIGHT = 10, AXIS = 18;
const LABEL_H = 12; // px a lane label needs
const PLOT_MAX_H = 540; // px; taller plots (many ranks) scroll

const CSS = `
.mpinb-trace { font-family: var(--jp-ui-font-family, sans-serif); font-size: 12px; }
.mpinb-trace .bar { display: flex; gap: 2px; align-items: center; border-bottom: 1px solid #ccc; }
.mpinb-trace .tab { padding: 2px 8px; cursor: pointer; border-radius: 3px 3px 0 0; user-select: none; }
.mpinb-trace .tab.active { font-weight: bold; border: 1px solid #ccc; border-bottom: none; }
.mpinb-trace .info { margin-left: auto; color: #777; padding: 0 6px; }
.mpinb-trace .toggle { cursor: pointer; color: #4e79a7; padding: 0 6px; user-select: none; }
.mpinb-trace .plot { position: relative; overflow-y: auto; }
.mpinb-trace canvas { display: block; cursor: crosshair; }
.mpinb-trace .tip { position: absolute; pointer-events: none; background: #fff; border: 1px solid #999;
  padding: 3px 6px; white-space: pre; font-family: var(--jp-code-font-family, monospace); font-size: 11px;
  box-shadow: 1px 1px 3px rgba(0,0,0,.2); display: none; z-index: 10; }
.mpinb-trace table { border-collapse: collapse; margin: 6px 0; }
.mpinb-trace td, .mpinb-trace th { padding: 2px 6px; text-align: right; font-variant-numeric: tabular-nums; }
.mpinb-trace .heat td.cell { width: 28px; height: 22px; text-align: center; color: #222; }
.mpinb-trace .legend { color: #555; margin: 4px 0; }
.mpinb-trace .legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px; }
.mpinb-trace .stack { display: flex; height: 12px; width: 240px; background: #eee; }
.mpinb-trace .loss { color: #8a4b00; margin: 2px 0; }
`;

function column(view, Type) {
  if (!view) return new Type(0);
  const size = Type.BYTES_PER_ELEMENT;
  if (view.byteOffset % size === 0) return new Type(view.buffer, view.byteOffset, view.byteLength / size);
  return new Type(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
}

function load(model) {
  const e = model.get("events"), m = model.get("messages"), c = model.get("collectives");
  const ev = {
    rank: column(e.rank, Int32Array), kind: column(e.kind, Int8Array), op: column(e.op, Int16Array),
    start: column(e.start, Float64Array), stop: column(e.stop, Float64Array),
    peer: column(e.peer, Int32Array), tag: column(e.tag, Int32Array), bytes: column(e.bytes, Float64Array),
    file: column(e.file, Int16Array), line: column(e.line, Int32Array),
  };
  const msg = {
    source: column(m.source, Int32Array), dest: column(m.dest, Int32Array),
    start: column(m.start, Float64Array), end: column(m.end, Float64Array),
  };
  const coll = {
    low: column(c.low, Int32Array), high: column(c.high, Int32Array),
    start: column(c.start, Float64Array), end: column(c.end, Float64Array),
  };
  const ranks = model.get("ranks");
  const lane = new Map(ranks.map((r, i) => [r, i]));
  const byLane = ranks.map(() => []);
  for (let i = 0; i < ev.rank.length; i++) byLane[lane.get(ev.rank[i])].push(i);  // sorted by start
  return { ev, msg, coll, ranks, lane, byLane: byLane.map((a) => Int32Array.from(a)) };
}

function fmtTime(s) {
  if (s >= 1) return `${s.toFixed(2)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
  return `${(s * 1e6).toFixed(1)} \u00b5s`;
}

function fmtBytes(n) {
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} kB`;
  return `${n} B`;
}

// The space-time diagram's geometry: which span of time is shown, and where things go on the canvas.
function makeFrame(laneCount, laneH, duration) {
  const frame = {
    laneH, width: 0, height: AXIS + laneH * laneCount + 4, view: { t0: 0, t1: duration },
    xOf: (t) => LEFT + ((t - frame.view.t0) / (frame.view.t1 - frame.view.t0)) * (frame.width - LEFT - RIGHT),
    tOf: (x) => frame.view.t0 + ((x - LEFT) / (frame.width - LEFT - RIGHT)) * (frame.view.t1 - frame.view.t0),
    yOf: (laneIndex) => AXIS + laneIndex * laneH,
  };
  return frame;
}

function drawLanes(g, frame, ranks) {
  g.font = "11px sans-serif";
  g.textBaseline = "middle";
  // Lanes thinner than a label: label every few (the tooltip names the rank of any call).
  const every = Math.ceil(LABEL_H / frame.laneH);
  ranks.forEach((r, i) => {
    g.fillStyle = "#f6f6f6";
    g.fillRect(LEFT, frame.yOf(i) + Math.min(1, frame.laneH / 4), frame.width - LEFT - RIGHT,
               Math.max(frame.laneH - 2, 1));
    if (i % every) return;
    g.fillStyle = "#333";
    g.fillText(`rank ${r}`, 4, frame.yOf(i) + Math.max(frame.laneH, LABEL_H) / 2);
  });
  g.fillStyle = "#777";
  const { t0, t1 } = frame.view;
  for (let k = 0; k <= 4; k++) {
    const t = t0 + (k / 4) * (t1 - t0);
    g.fillText(fmtTime(t), Math.min(frame.xOf(t), frame.width - 50), AXIS / 2);
  }
}

function drawCalls(g, frame, data) {
  // Anything narrower than a pixel is merged into that pixel. Returns the boxes drawn.
  const { ev } = data;
  let boxes = 0;
  data.byLane.forEach((indices, laneIndex) => {
    const y = frame.yOf(laneIndex) + 2, h = frame.laneH - 4;
    let lastPixel = -1;
    for (let j = 0; j < indices.length; j++) {
      const i = indices[j];
      const x0 = frame.xOf(ev.start[i]), x1 = frame.xOf(ev.stop[i]);
      if (x1 < LEFT || x0 > frame.width) continue;
      if (x1 - x0 < 1) {
        const pixel = Math.floor(x0);
        if (pixel === lastPixel) continue;
        lastPixel = pixel;
      }
      g.fillStyle = KIND_COLOR[ev.kind[i]] || "#999";
      g.fillRect(x0, y, Math.max(x1 - x0, 1), h);
      boxes++;
    }
  });
  return boxes;
}

function drawCollectives(g, frame, data) {
  // One frame across the lanes of the ranks that took part.
  const { coll, lane } = data;
  g.strokeStyle = "rgba(242,142,43,0.9)";
  for (let k = 0; k < coll.low.length; k++) {
    const x0 = frame.xOf(coll.start[k]), x1 = frame.xOf(coll.end[k]);
    if (x1 < LEFT || x0 > frame.width || !lane.has(coll.low[k]) || !lane.has(coll.high[k])) continue;
    const y0 = frame.yOf(lane.get(coll.low[k])) + 1, y1 = frame.yOf(lane.get(coll.high[k])) + frame.laneH - 1;
    g.strokeRect(x0, y0, Math.max(x1 - x0, 1), y1 - y0);
  }
}

function drawMessages(g, frame, data) {
  // An arrow from each send to the end of its receive. Returns the arrows drawn.
  const { msg, lane } = data;
  let arrows = 0;
  g.strokeStyle = "rgba(30,30,30,0.55)";
  g.fillStyle = "rgba(30,30,30,0.7)";
  g.lineWidth = 1;
  for (let k = 0; k < msg.source.length; k++) {
    const x0 = frame.xOf(msg.start[k]), x1 = frame.xOf(msg.end[k]);
    if (Math.max(x0, x1) < LEFT || Math.min(x0, x1) > frame.width) continue;
    const y0 = frame.yOf(lane.get(msg.source[k])) + frame.laneH / 2;
    const y1 = frame.yOf(lane.get(msg.dest[k])) + frame.laneH / 2;
    g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke();
    const angle = Math.atan2(y1 - y0, x1 - x0);
    g.beginPath();
    g.moveTo(x1, y1);
    g.lineTo(x1 - 6 * Math.cos(angle - 0.4), y1 - 6 * Math.sin(angle - 0.4));
    g.lineTo(x1 - 6 * Math.cos(angle + 0.4), y1 - 6 * Math.sin(angle + 0.4));
    g.fill();
    arrows++;
  }
  return arrows;
}

function callAt(frame, data, x, y) {
  // The call under the cursor (index into the event columns), or -1.
  const laneIndex = Math.floor((y - AXIS) / frame.laneH);
  if (laneIndex < 0 || laneIndex >= data.ranks.length || x < LEFT) return -1;
  const t = frame.tOf(x), slack = (2 / (frame.width - LEFT - RIGHT)) * (frame.view.t1 - frame.view.t0);
  const indices = data.byLane[laneIndex], { ev } = data;
  let lo = 0, hi = indices.length - 1, last = -1;
  while (lo <= hi) {  // last call that started before the cursor
    const mid = (lo + hi) >> 1;
    if (ev.start[indices[mid]] <= t + slack) { last = mid; lo = mid + 1; } else hi = mid - 1;
  }
  for (let j = last; j >= 0 && j > last - 50; j--) {
    const i = indices[j];
    if (ev.stop[i] + slack >= t) return i;
  }
  return -1;
}

function callText(model, ev, i) {
  const ops = model.get("ops"), files = model.get("files");
  const peer = ev.peer[i] >= 0 ? `  peer ${ev.peer[i]}` : "";
  const tag = ev.tag[i] >= 0 ? `  tag ${ev.tag[i]}` : "";
  return `rank ${ev.rank[i]}: ${ops[ev.op[i]]} (${KIND[ev.kind[i]]})${peer}${tag}\n`
    + `${fmtBytes(ev.bytes[i])}  ${fmtTime(ev.stop[i] - ev.start[i])} at ${fmtTime(ev.start[i])}\n`
    + `${files[ev.file[i]]}, line ${ev.line[i]}`;
}

function timeline(model, data, box) {
  const expanded = model.get("expanded");
  // Up to a few dozen ranks fit as they are; beyond, lanes thin out and the plot scrolls.
  const thinnest = data.ranks.length > 128 ? 3 : 8;
  const laneH = expanded ? 26 : Math.max(thinnest, Math.min(16, Math.floor(120 / data.ranks.length)));
  const plot = document.createElement("div");
  plot.className = "plot";
  plot.style.maxHeight = `${PLOT_MAX_H}px`;
  const canvas = document.createElement("canvas");
  const tip = document.createElement("div");
  tip.className = "tip";
  plot.append(canvas, tip);
  box.appendChild(plot);
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = KIND.slice(0, 4).map((k, i) => `<span style="background:${KIND_COLOR[i]}"></span>${k}`).join("")
    + "<span style='background:#fff;border:1px solid #ccc'></span>computing \u00b7 wheel: zoom, drag: pan, double-click: reset";
  box.appendChild(legend);

  const duration = Math.max(model.get("duration"), 1e-9);
  const frame = makeFrame(data.ranks.length, laneH, duration);
  const dpr = window.devicePixelRatio || 1;

  function size() {
    frame.width = Math.max(box.clientWidth || 800, 300);
    canvas.width = frame.width * dpr; canvas.height = frame.height * dpr;
    canvas.style.width = `${frame.width}px`; canvas.style.height = `${frame.height}px`;
  }

  function draw() {
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, frame.width, frame.height);
    drawLanes(g, frame, data.ranks);
    g.save();
    g.beginPath(); g.rect(LEFT, 0, frame.width - LEFT - RIGHT, frame.height); g.clip();
    const boxes = drawCalls(g, frame, data);
    drawCollectives(g, frame, data);
    const arrows = drawMessages(g, frame, data);
    g.restore();
    // What was drawn, for tests and for anyone inspecting the page.
    Object.assign(canvas.dataset, { lanes: data.ranks.length, boxes, arrows });
  }

  let dragging = null;
  canvas.addEventListener("mousemove", (event) => {
    const rect = canvas.getBoundingClientRect();
    const x = event.clientX - rect.left, y = event.clientY - rect.top;
    const view = frame.view;
    if (dragging) {
      const dt = ((dragging.x - x) / (frame.width - LEFT - RIGHT)) * (view.t1 - view.t0);
      view.t0 += dt; view.t1 += dt; dragging.x = x; draw();
      return;
    }
    const i = callAt(frame, data, x, y);
    if (i < 0) { tip.style.display = "none"; return; }
    tip.textContent = callText(model, data.ev, i);
    tip.style.display = "block";
    tip.style.left = `${Math.min(x + 12, frame.width - 260)}px`;
    tip.style.top = `${y + 12}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; dragging = null; });
  canvas.addEventListener("mousedown", (event) => { dragging = { x: event.offsetX }; });
  canvas.addEventListener("mouseup", () => { dragging = null; });  // leaving the canvas ends a drag too
  canvas.addEventListener("wheel", (event) => {
    event.preventDefault();
    const view = frame.view;
    const t = frame.tOf(event.offsetX), factor = event.deltaY < 0 ? 0.8 : 1.25;
    view.t0 = t - (t - view.t0) * factor; view.t1 = t + (view.t1 - t) * factor;
    draw();
  }, { passive: false });
  canvas.addEventListener("dblclick", () => { frame.view.t0 = 0; frame.view.t1 = duration; draw(); });
  size();
  draw();
  return () => { size(); draw(); };
}

function matrix(model, box) {
  const bytes = model.get("matrix_bytes"), counts = model.get("matrix_count");
  const peak = Math.max(1, ...bytes.flat());
  const table = document.createElement("table");
  table.className = "heat";
  const head = table.insertRow();
  head.insertCell().textContent = "from \\ to";
  bytes.forEach((_, j) => { head.insertCell().textContent = j; });
  bytes.forEach((row, i) => {
    const tr = table.insertRow();
    tr.insertCell().textContent = `rank ${i}`;
    row.forEach((value, j) => {
      const cell = tr.insertCell();
      cell.className = "cell";
      const level = value / peak;
      cell.style.background = value ? `rgba(78,121,167,${0.15 + 0.85 * level})` : "#fafafa";
      cell.style.color = level > 0.6 ? "#fff" : "#222";
      cell.textContent = counts[i][j] || "";
      cell.title = `rank ${i} \u2192 rank ${j}: ${counts[i][j]} messages, ${fmtBytes(value)}`;
    });
  });
  const note = document.createElement("div");
  note.className = "legend";
  note.textContent = "point-to-point messages (numbers) and bytes (colour) from each rank to each rank";
  box.append(table, note);
}

function summary(model, box) {
  const rows = model.get("summary");
  const table = document.createElement("table");
  table.innerHTML = "<tr><th>rank</th><th style='text-align:left'>time in MPI vs computing</th><th>wall</th>"
    + "<th>in MPI</th><th>waiting</th><th>msgs out</th><th>msgs in</th><th>bytes out</th><th>bytes in</th></tr>";
  for (const row of rows) {
    const tr = table.insertRow();
    const share = row.wall > 0 ? row.mpi / row.wall : 0;
    tr.insertCell().textContent = row.rank;
    const stack = document.createElement("div");
    stack.className = "stack";
    stack.innerHTML = `<div style="width:${(100 * share).toFixed(1)}%;background:#f28e2b"></div>`;
    const cell = tr.insertCell();
    cell.style.textAlign = "left";
    cell.appendChild(stack);
    tr.insertCell().textContent = fmtTime(row.wall);
    tr.insertCell().textContent = `${(100 * share).toFixed(0)}%`;
    tr.insertCell().textContent = fmtTime(row.waiting || 0);
    tr.insertCell().textContent = row.messages_sent;
    tr.insertCell().textContent = row.messages_received;
    tr.insertCell().textContent = fmtBytes(row.bytes_sent);
    tr.insertCell().textContent = fmtBytes(row.bytes_received);
  }
  box.appendChild(table);
  for (const text of model.get("losses")) { // where time was lost, biggest first
    const line = document.createElement("div");
    line.className = "loss";
    line.textContent = text;
    box.appendChild(line);
  }
}

function render({ model, el }) {
  const style = document.createElement("style");
  style.textContent = CSS;
  const root = document.createElement("div");
  root.className = "mpinb-trace";
  el.append(style, root);
  const data = load(model);
  let resize = null;

  function draw() {
    root.replaceChildren();
    const bar = document.createElement("div");
    bar.className = "bar";
    for (const [key, label] of [["timeline", "Space-time"], ["matrix", "Matrix"], ["summary", "Per rank"]]) {
      const tab = document.createElement("span");
      tab.className = "tab" + (model.get("panel") === key ? " active" : "");
      tab.dataset.panel = key;
      tab.textContent = label;
      tab.addEventListener("click", () => { model.set("panel", key); model.save_changes(); });
      bar.appendChild(tab);
    }
    const info = document.createElement("span");
    info.className = "info";
    const dropped = model.get("dropped");
    info.textContent = `${data.ev.rank.length} MPI calls \u00b7 ${data.msg.source.length} messages \u00b7 `
      + fmtTime(model.get("duration")) + (dropped ? ` \u00b7 ${dropped} calls not recorded (buffer full)` : "");
    const toggle = document.createElement("span");
    toggle.className = "toggle";
    toggle.textContent = model.get("expanded") ? "\u25b4 compact" : "\u25be expand";
    toggle.addEventListener("click", () => { model.set("expanded", !model.get("expanded")); model.save_changes(); });
    bar.append(info, toggle);
    const box = document.createElement("div");
    box.className = "panel";
    root.append(bar, box);
    const panel = model.get("panel");
    resize = null;
    if (panel === "matrix") matrix(model, box);
    else if (panel === "summary") summary(model, box);
    else {
      // The canvas needs the box's width, known once it is in the page.
      requestAnimationFrame(() => { resize = timeline(model, data, box); });
    }
  }
  model.on("change:panel", draw);
  model.on("change:expanded", draw);
  const observer = new ResizeObserver(() => { if (resize) resize(); });
  observer.observe(root);
  draw();
  return () => observer.disconnect();
}

export default { render };
