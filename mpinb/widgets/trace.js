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
.mpinb-trace .path { color: #b0151a; margin: 2px 0; white-space: pre; font-family: var(--jp-code-font-family, monospace); font-size: 11px; }
.mpinb-trace .filters { display: flex; gap: 10px; align-items: center; margin: 4px 0; color: #555; flex-wrap: wrap; }
.mpinb-trace .filters input[type=text] { width: 64px; font-size: 11px; }
.mpinb-trace .filters select { font-size: 11px; max-width: 140px; }
.mpinb-trace .filters .bad { outline: 1px solid #d62728; }
.mpinb-trace h4 { margin: 8px 0 2px; font-size: 12px; }
`;
const WAIT_KINDS = ["late sender", "late receiver", "wait at collective", "wait at barrier"];
const WAIT_COLOR = "rgba(214,39,40,0.85)";
const PATH_COLOR = "rgba(176,21,26,0.9)";

function column(view, Type) {
  if (!view) return new Type(0);
  const size = Type.BYTES_PER_ELEMENT;
  if (view.byteOffset % size === 0) return new Type(view.buffer, view.byteOffset, view.byteLength / size);
  return new Type(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
}

function load(model) {
  const e = model.get("events"), m = model.get("messages"), c = model.get("collectives");
  const w = model.get("waits"), p = model.get("path");
  const ev = {
    rank: column(e.rank, Int32Array), kind: column(e.kind, Int8Array), op: column(e.op, Int16Array),
    comm: column(e.comm, Int16Array), start: column(e.start, Float64Array), stop: column(e.stop, Float64Array),
    peer: column(e.peer, Int32Array), tag: column(e.tag, Int32Array), bytes: column(e.bytes, Float64Array),
    file: column(e.file, Int16Array), line: column(e.line, Int32Array), open: column(e.open, Int8Array),
  };
  const msg = {
    source: column(m.source, Int32Array), dest: column(m.dest, Int32Array),
    start: column(m.start, Float64Array), end: column(m.end, Float64Array),
    send: column(m.send, Int32Array), recv: column(m.recv, Int32Array),
  };
  const coll = {
    low: column(c.low, Int32Array), high: column(c.high, Int32Array),
    start: column(c.start, Float64Array), end: column(c.end, Float64Array),
    op: column(c.op, Int16Array), comm: column(c.comm, Int16Array),
  };
  const waits = {
    rank: column(w.rank, Int32Array), start: column(w.start, Float64Array), end: column(w.end, Float64Array),
    peer: column(w.peer, Int32Array), kind: column(w.kind, Int8Array),
  };
  const path = { rank: column(p.rank, Int32Array), start: column(p.start, Float64Array), end: column(p.end, Float64Array) };
  return { ev, msg, coll, waits, path, allRanks: model.get("ranks") };
}

// "0-3,6" -> the ranges it names, as [first, last] pairs ("", "all" and "*": every rank); null when
// it does not parse (ASCII digits, spaces ignored) or a range runs backwards ("3-1"): the rule of
// mpinb._ranges.parse_ranks, tested equal in tests/test_browser.py. Ranges are never expanded.
export function parseRanks(text) {
  if (["", "all", "*"].includes(text.trim())) return [[0, Infinity]];
  const ranges = [];
  for (const part of text.replace(/ /g, "").split(",")) {
    const match = /^([0-9]+)(?:-([0-9]+))?$/.exec(part);
    if (!match) return null;
    const first = +match[1], last = match[2] === undefined ? first : +match[2];
    if (last < first) return null;
    ranges.push([first, last]);
  }
  return ranges;
}

// Which ranks (lanes) and which calls the filters leave; sets data.ranks, lane, byLane, visible.
function applyFilters(model, data) {
  const ops = model.get("ops"), comms = model.get("comms");
  const rankText = model.get("show_ranks").trim(), tagText = model.get("show_tag").trim();
  const chosen = rankText ? parseRanks(rankText) : null;
  const op = ops.indexOf(model.get("show_op")), comm = comms.indexOf(model.get("show_comm"));
  const tag = /^-?\d+$/.test(tagText) ? +tagText : null;
  data.ranks = chosen ? data.allRanks.filter((r) => chosen.some(([first, last]) => first <= r && r <= last))
    : data.allRanks.slice();
  if (!data.ranks.length) data.ranks = data.allRanks.slice();
  data.lane = new Map(data.ranks.map((r, i) => [r, i]));
  const { ev } = data, n = ev.rank.length;
  const visible = new Uint8Array(n);
  const byLane = data.ranks.map(() => []);
  for (let i = 0; i < n; i++) {  // sorted by start
    const laneIndex = data.lane.get(ev.rank[i]);
    if (laneIndex === undefined) continue;
    if (op >= 0 && ev.op[i] !== op) continue;
    if (comm >= 0 && ev.comm[i] !== comm) continue;
    if (tag !== null && ev.tag[i] !== tag) continue;
    visible[i] = 1;
    byLane[laneIndex].push(i);
  }
  data.visible = visible;
  data.byLane = byLane.map((a) => Int32Array.from(a));
  data.filtered = data.ranks.length < data.allRanks.length || op >= 0 || comm >= 0 || tag !== null;
  data.badRanks = Boolean(rankText) && !chosen;
  data.badTag = Boolean(tagText) && tag === null;
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
      if (ev.open[i]) continue;
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
  // One frame across the lanes of the ranks that took part (of those shown).
  const { coll, ranks } = data, ops = data.opFilter, comms = data.commFilter;
  g.strokeStyle = "rgba(242,142,43,0.9)";
  for (let k = 0; k < coll.low.length; k++) {
    if ((ops >= 0 && coll.op[k] !== ops) || (comms >= 0 && coll.comm[k] !== comms)) continue;
    const x0 = frame.xOf(coll.start[k]), x1 = frame.xOf(coll.end[k]);
    if (x1 < LEFT || x0 > frame.width) continue;
    const first = firstLane(ranks, coll.low[k]), last = firstLane(ranks, coll.high[k] + 1) - 1;  // shown members
    if (first > last) continue;
    const y0 = frame.yOf(first) + 1, y1 = frame.yOf(last) + frame.laneH - 1;
    g.strokeRect(x0, y0, Math.max(x1 - x0, 1), y1 - y0);
  }
}

// The first lane (index into the sorted shown ranks) whose rank is at least ``rank``.
function firstLane(ranks, rank) {
  let lo = 0, hi = ranks.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (ranks[mid] < rank) lo = mid + 1; else hi = mid; }
  return lo;
}

function arrowHead(g, x0, y0, x1, y1, filled) {
  const angle = Math.atan2(y1 - y0, x1 - x0);
  g.beginPath();
  g.moveTo(x1 - 6 * Math.cos(angle - 0.4), y1 - 6 * Math.sin(angle - 0.4));
  g.lineTo(x1, y1);
  g.lineTo(x1 - 6 * Math.cos(angle + 0.4), y1 - 6 * Math.sin(angle + 0.4));
  if (filled) g.fill(); else g.stroke();
}

function drawMessages(g, frame, data) {
  // An arrow from each send to the end of its receive (both halves shown). Returns the arrows drawn.
  const { msg, lane, visible } = data;
  let arrows = 0;
  g.strokeStyle = "rgba(30,30,30,0.55)";
  g.fillStyle = "rgba(30,30,30,0.7)";
  g.lineWidth = 1;
  for (let k = 0; k < msg.source.length; k++) {
    if (!visible[msg.send[k]] || !visible[msg.recv[k]]) continue;
    const x0 = frame.xOf(msg.start[k]), x1 = frame.xOf(msg.end[k]);
    if (Math.max(x0, x1) < LEFT || Math.min(x0, x1) > frame.width) continue;
    const y0 = frame.yOf(lane.get(msg.source[k])) + frame.laneH / 2;
    const y1 = frame.yOf(lane.get(msg.dest[k])) + frame.laneH / 2;
    g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke();
    arrowHead(g, x0, y0, x1, y1, true);
    arrows++;
  }
  return arrows;
}

function drawWaits(g, frame, data) {
  // The waiting part of each call that waited: a red band along the bottom of its box.
  const { waits, lane } = data;
  let drawn = 0;
  g.fillStyle = WAIT_COLOR;
  for (let k = 0; k < waits.rank.length; k++) {
    if (!lane.has(waits.rank[k])) continue;
    const x0 = frame.xOf(waits.start[k]), x1 = frame.xOf(waits.end[k]);
    if (x1 < LEFT || x0 > frame.width) continue;
    const y = frame.yOf(lane.get(waits.rank[k]));
    const band = Math.max(2, Math.floor(frame.laneH / 4));
    g.fillRect(x0, y + frame.laneH - 2 - band, Math.max(x1 - x0, 1), band);
    drawn++;
  }
  return drawn;
}

function drawOpen(g, frame, data) {
  // Calls that a stopped run broke off: an open box to where the rank stopped, and a dashed arrow
  // towards the rank it waited for, so that a deadlock's cycle shows as crossing arrows.
  const { ev, lane } = data;
  let drawn = 0;
  g.save();
  g.setLineDash([4, 3]);
  g.lineWidth = 1.5;
  for (let i = 0; i < ev.rank.length; i++) {
    if (!ev.open[i] || !data.visible[i]) continue;
    const x0 = frame.xOf(ev.start[i]), x1 = frame.xOf(ev.stop[i]);
    const y = frame.yOf(lane.get(ev.rank[i]));
    g.strokeStyle = KIND_COLOR[ev.kind[i]] || "#999";
    g.strokeRect(x0, y + 2, Math.max(x1 - x0, 2), frame.laneH - 4);
    if (ev.peer[i] >= 0 && lane.has(ev.peer[i]) && ev.peer[i] !== ev.rank[i]) {
      const y0 = y + frame.laneH / 2, y1 = frame.yOf(lane.get(ev.peer[i])) + frame.laneH / 2;
      g.strokeStyle = WAIT_COLOR;
      g.beginPath(); g.moveTo(x1, y0); g.lineTo(x1 - 28, y1); g.stroke();
      g.setLineDash([]);
      arrowHead(g, x1, y0, x1 - 28, y1, false);
      g.setLineDash([4, 3]);
    }
    drawn++;
  }
  g.restore();
  return drawn;
}

function drawPath(g, frame, data) {
  // The critical path: a red line through the lanes, jumping where a message or an arrival set the time.
  const { path, lane } = data;
  let steps = 0, last = null;
  g.save();
  g.strokeStyle = PATH_COLOR;
  g.lineWidth = 2.5;
  g.beginPath();
  for (let k = 0; k < path.rank.length; k++) {
    if (!lane.has(path.rank[k])) { last = null; continue; }
    const y = frame.yOf(lane.get(path.rank[k])) + frame.laneH / 2;
    const x0 = frame.xOf(path.start[k]), x1 = frame.xOf(path.end[k]);
    if (last) g.moveTo(last.x, last.y); else g.moveTo(x0, y);
    g.lineTo(x0, y);
    g.lineTo(x1, y);
    last = { x: x1, y };
    steps++;
  }
  g.stroke();
  g.restore();
  return steps;
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

function callText(model, data, i) {
  const { ev, waits } = data;
  const ops = model.get("ops"), files = model.get("files");
  const peer = ev.peer[i] >= 0 ? `  peer ${ev.peer[i]}` : "";
  const tag = ev.tag[i] >= 0 ? `  tag ${ev.tag[i]}` : "";
  let text = `rank ${ev.rank[i]}: ${ops[ev.op[i]]} (${KIND[ev.kind[i]]})${peer}${tag}\n`
    + `${fmtBytes(ev.bytes[i])}  ${fmtTime(ev.stop[i] - ev.start[i])} at ${fmtTime(ev.start[i])}\n`
    + `${files[ev.file[i]]}, line ${ev.line[i]}`;
  if (ev.open[i]) text += "\nunfinished: still waiting when the run stopped";
  for (let k = 0; k < waits.rank.length; k++) {
    if (waits.rank[k] === ev.rank[i] && waits.start[k] >= ev.start[i] - 1e-9 && waits.end[k] <= ev.stop[i] + 1e-9) {
      text += `\n${WAIT_KINDS[waits.kind[k]]}: waited ${fmtTime(waits.end[k] - waits.start[k])} for rank ${waits.peer[k]}`;
    }
  }
  return text;
}

function filterBar(model, data, onChange) {
  // Ranks, operation, communicator, tag; and whether waits and the critical path are drawn.
  const bar = document.createElement("div");
  bar.className = "filters";
  const text = (key, label, hint) => {
    const input = document.createElement("input");
    input.type = "text"; input.value = model.get(key); input.placeholder = hint; input.dataset.filter = key;
    // Applied as one types (JupyterLab's command mode may take the Enter key for itself).
    let pause = null;
    input.addEventListener("input", () => {
      clearTimeout(pause);
      pause = setTimeout(() => { model.set(key, input.value); model.save_changes(); onChange(); }, 250);
    });
    const wrap = document.createElement("label");
    wrap.append(`${label} `, input);
    return [wrap, input];
  };
  const choice = (key, label, values) => {
    const select = document.createElement("select");
    select.dataset.filter = key;
    for (const value of ["", ...values]) select.add(new Option(value || "all", value, false, value === model.get(key)));
    select.addEventListener("change", () => { model.set(key, select.value); model.save_changes(); onChange(); });
    const wrap = document.createElement("label");
    wrap.append(`${label} `, select);
    return wrap;
  };
  const check = (key, label) => {
    const box = document.createElement("input");
    box.type = "checkbox"; box.checked = model.get(key); box.dataset.filter = key;
    box.addEventListener("change", () => { model.set(key, box.checked); model.save_changes(); onChange(); });
    const wrap = document.createElement("label");
    wrap.append(box, ` ${label}`);
    return wrap;
  };
  const [ranksLabel, ranksInput] = text("show_ranks", "ranks", "all");
  const [tagLabel, tagInput] = text("show_tag", "tag", "all");
  bar.append(ranksLabel, choice("show_op", "op", model.get("ops")), choice("show_comm", "comm", model.get("comms")),
             tagLabel, check("show_waits", "waits"), check("show_path", "critical path"));
  const mark = () => { ranksInput.classList.toggle("bad", data.badRanks); tagInput.classList.toggle("bad", data.badTag); };
  return [bar, mark];
}

function timeline(model, data, box) {
  const expanded = model.get("expanded");
  const plot = document.createElement("div");
  plot.className = "plot";
  plot.style.maxHeight = `${PLOT_MAX_H}px`;
  const canvas = document.createElement("canvas");
  const tip = document.createElement("div");
  tip.className = "tip";
  plot.append(canvas, tip);
  const legend = document.createElement("div");
  legend.className = "legend";
  legend.innerHTML = KIND.slice(0, 4).map((k, i) => `<span style="background:${KIND_COLOR[i]}"></span>${k}`).join("")
    + "<span style='background:#fff;border:1px solid #ccc'></span>computing"
    + `<span style="background:${WAIT_COLOR}"></span>waiting`
    + `<span style="background:${PATH_COLOR};height:3px"></span>critical path`
    + "<span style='background:#fff;border:1px dashed #d62728'></span>unfinished"
    + " \u00b7 wheel: zoom, drag: pan, double-click: reset";

  const duration = Math.max(model.get("duration"), model.get("axis_end"), 1e-9);
  const dpr = window.devicePixelRatio || 1;
  let frame = null;

  function layout() {
    applyFilters(model, data);
    data.opFilter = model.get("ops").indexOf(model.get("show_op"));
    data.commFilter = model.get("comms").indexOf(model.get("show_comm"));
    // Up to a few dozen ranks fit as they are; beyond, lanes thin out and the plot scrolls.
    const thinnest = data.ranks.length > 128 ? 3 : 8;
    const laneH = expanded ? 26 : Math.max(thinnest, Math.min(16, Math.floor(120 / data.ranks.length)));
    const view = frame ? frame.view : { t0: 0, t1: duration };
    frame = makeFrame(data.ranks.length, laneH, duration);
    frame.view = view;
    size();
  }

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
    const waits = model.get("show_waits") ? drawWaits(g, frame, data) : 0;
    drawCollectives(g, frame, data);
    const arrows = drawMessages(g, frame, data);
    const open = drawOpen(g, frame, data);
    const path = model.get("show_path") ? drawPath(g, frame, data) : 0;
    g.restore();
    // What was drawn, for tests and for anyone inspecting the page.
    Object.assign(canvas.dataset, { lanes: data.ranks.length, boxes, arrows, waits, open, path, axisEnd: duration });
  }

  const [filters, markBad] = filterBar(model, data, () => { layout(); draw(); markBad(); });
  box.append(filters, plot, legend);
  // The biggest loss and what set the time, in words under the picture (the rest: Per rank).
  const [loss] = model.get("losses"), [path] = model.get("path_text");
  for (const [text, className] of [[loss, "loss"], [path, "path"]]) {
    if (!text) continue;
    const line = document.createElement("div");
    line.className = className;
    line.textContent = text;
    box.appendChild(line);
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
    tip.textContent = callText(model, data, i);
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
  layout();
  draw();
  markBad();
  return () => { size(); draw(); };
}

const MEASURES = { messages: "matrix_count", bytes: "matrix_bytes", time: "matrix_time" };

function matrix(model, box) {
  const measure = model.get("measure");
  const values = model.get(MEASURES[measure]);
  const bytes = model.get("matrix_bytes"), counts = model.get("matrix_count"), times = model.get("matrix_time");
  const peak = Math.max(1e-12, ...values.flat());
  const switcher = document.createElement("div");
  switcher.className = "filters";
  const select = document.createElement("select");
  select.dataset.filter = "measure";
  for (const key of Object.keys(MEASURES)) select.add(new Option(key, key, false, key === measure));
  select.addEventListener("change", () => { model.set("measure", select.value); model.save_changes(); });
  switcher.append("show ", select);
  const table = document.createElement("table");
  table.className = "heat";
  const head = table.insertRow();
  head.insertCell().textContent = "from \\ to";
  values.forEach((_, j) => { head.insertCell().textContent = j; });
  const show = { messages: (v) => (v ? String(v) : ""), bytes: (v) => (v ? fmtBytes(v) : ""), time: (v) => (v ? fmtTime(v) : "") };
  values.forEach((row, i) => {
    const tr = table.insertRow();
    tr.insertCell().textContent = `rank ${i}`;
    row.forEach((value, j) => {
      const cell = tr.insertCell();
      cell.className = "cell";
      const level = value / peak;
      cell.style.background = value ? `rgba(78,121,167,${0.15 + 0.85 * level})` : "#fafafa";
      cell.style.color = level > 0.6 ? "#fff" : "#222";
      cell.textContent = show[measure](value);
      cell.title = `rank ${i} \u2192 rank ${j}: ${counts[i][j]} messages, ${fmtBytes(bytes[i][j])}, ${fmtTime(times[i][j])}`;
    });
  });
  const note = document.createElement("div");
  note.className = "legend";
  note.textContent = {
    messages: "point-to-point messages from each rank to each rank",
    bytes: "bytes sent point to point from each rank to each rank",
    time: "seconds from each send's start to its receive's end, summed (a late sender's wait included)",
  }[measure];
  box.append(switcher, table, note);
}

function histogram(title, data, format, box) {
  // Operations down, bins across; each cell's shade is its share of the operation's calls.
  const heading = document.createElement("h4");
  heading.textContent = title;
  const table = document.createElement("table");
  table.className = "heat";
  const counts = Object.entries(data.counts);
  const used = data.edges.slice(0, -1).map((_, b) => counts.some(([, row]) => row[b]));
  const first = used.indexOf(true), last = used.lastIndexOf(true);
  if (first < 0) return;
  const head = table.insertRow();
  head.insertCell();
  for (let b = first; b <= last; b++) head.insertCell().textContent = `\u2265${format(data.edges[b])}`;
  for (const [op, row] of counts) {
    const tr = table.insertRow();
    tr.insertCell().textContent = op;
    const peak = Math.max(1, ...row);
    for (let b = first; b <= last; b++) {
      const cell = tr.insertCell();
      cell.className = "cell";
      cell.style.background = row[b] ? `rgba(78,121,167,${0.15 + 0.85 * (row[b] / peak)})` : "#fafafa";
      cell.style.color = row[b] / peak > 0.6 ? "#fff" : "#222";
      cell.textContent = row[b] || "";
      cell.title = `${op}: ${row[b]} in [${format(data.edges[b])}, ${format(data.edges[b + 1])})`;
    }
  }
  box.append(heading, table);
}

function statistics(model, box) {
  const hist = model.get("histograms");
  histogram("Message sizes (messages sent, per operation)", hist.sizes, fmtBytes, box);
  histogram("Call durations (calls, per operation)", hist.durations, fmtTime, box);
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
  const path = document.createElement("div");
  path.className = "path";
  path.textContent = model.get("path_text").join("\n");
  box.appendChild(path);
}

const PANELS = [["timeline", "Space-time"], ["matrix", "Matrix"], ["summary", "Per rank"], ["stats", "Statistics"]];

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
    for (const [key, label] of PANELS) {
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
    const open = data.ev.open.reduce((n, v) => n + v, 0);
    info.textContent = `${data.ev.rank.length} MPI calls \u00b7 ${data.msg.source.length} messages \u00b7 `
      + fmtTime(model.get("duration")) + (open ? ` \u00b7 stopped with ${open} calls unfinished` : "")
      + (dropped ? ` \u00b7 ${dropped} calls not recorded (buffer full)` : "");
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
    else if (panel === "stats") statistics(model, box);
    else {
      // The canvas needs the box's width, known once it is in the page.
      requestAnimationFrame(() => { resize = timeline(model, data, box); });
    }
  }
  model.on("change:panel", draw);
  model.on("change:expanded", draw);
  model.on("change:measure", draw);
  const observer = new ResizeObserver(() => { if (resize) resize(); });
  observer.observe(root);
  draw();
  return () => observer.disconnect();
}

export default { render };
