// Message-flow views of one traced run: space-time diagram (canvas), communication matrix,
// per-rank summary. Event columns arrive as binary typed arrays (see trace.py); colours come
// from mpinb/_colors.py (state) and from the theme (trace.css).

/** @typedef {import("./state").TraceState} TraceState */
/** @typedef {import("@anywidget/types").AnyModel<TraceState>} Model */
/**
 * The columns of one run, as typed arrays.
 * @typedef {{ ev: Events, msg: Messages, flows: Flows, locks: Locks, io: Io, coll: Collectives, waits: Waits,
 *   path: PathSteps, allRanks: number[], fileLanes: string[], laneName: (rank: number) => string }} Run
 * @typedef {{ rank: Int32Array, kind: Int8Array, op: Int16Array, comm: Int16Array, start: Float64Array,
 *   stop: Float64Array, peer: Int32Array, tag: Int32Array, bytes: Float64Array, file: Int16Array,
 *   line: Int32Array, open: Int8Array }} Events
 * @typedef {{ source: Int32Array, dest: Int32Array, start: Float64Array, end: Float64Array,
 *   send: Int32Array, recv: Int32Array }} Messages
 * The other arrows: one-sided transfers, from the RMA call (``call``) to the end of its epoch where
 * the data went, and neighbourhood collectives, from each member's call to each neighbour's.
 * @typedef {{ source: Int32Array, dest: Int32Array, start: Float64Array, end: Float64Array,
 *   call: Int32Array }} Flows
 * Passive-target epochs, drawn on the target's lane: who held its lock, from grant to Unlock.
 * @typedef {{ target: Int32Array, holder: Int32Array, start: Float64Array, end: Float64Array,
 *   exclusive: Int8Array }} Locks
 * Reads and writes between a rank and a file (``file``: its lane below the ranks'), over the call.
 * @typedef {{ rank: Int32Array, file: Int16Array, start: Float64Array, end: Float64Array, write: Int8Array,
 *   call: Int32Array }} Io
 * @typedef {{ low: Int32Array, high: Int32Array, start: Float64Array, end: Float64Array,
 *   op: Int16Array, comm: Int16Array }} Collectives
 * @typedef {{ rank: Int32Array, start: Float64Array, end: Float64Array, peer: Int32Array,
 *   kind: Int8Array }} Waits
 * @typedef {{ rank: Int32Array, start: Float64Array, end: Float64Array }} PathSteps
 * What the filters leave of a run: the ranks shown (a lane each) and their calls.
 * @typedef {{ ranks: number[], lane: Map<number, number>, byLane: Int32Array[], visible: Uint8Array,
 *   op: number, comm: number, badRanks: boolean, badTag: boolean }} Shown
 * The space-time diagram's geometry: which span of time is shown, and where things go.
 * @typedef {{ laneH: number, width: number, height: number, view: { t0: number, t1: number },
 *   xOf: (t: number) => number, tOf: (x: number) => number, yOf: (lane: number) => number }} Frame
 * What the canvas draws with: the data's colours (mpinb/_colors.py) and the theme's (trace.css).
 * @typedef {{ kinds: string[], epoch: string, wait: string, path: string, collective: string, lane: string,
 *   text: string, muted: string }} Paint
 * @typedef {CanvasRenderingContext2D} Context
 */

const LEFT = 56, RIGHT = 10, AXIS = 18;
const LABEL_H = 12; // px a lane label needs
const IO_KIND = 7; // the events' kind of an I/O call (mpinb/common/_events.py)
const PLOT_MAX_H = 540; // px; taller plots (many ranks) scroll

/**
 * mpinb's colours (mpinb/_colors.py) as CSS variables on ``root``, for trace.css.
 * @param {HTMLElement} root
 * @param {Record<string, string>} colors
 */
function setColors(root, colors) {
  for (const [name, value] of Object.entries(colors)) root.style.setProperty(`--mpinb-${name}`, value);
}

/**
 * What the canvas draws with, read once the root is in the page (its CSS resolves the theme's).
 * @param {Model} model
 * @param {Element} root
 * @returns {Paint}
 */
function paintOf(model, root) {
  const style = getComputedStyle(root), colors = model.get("colors");
  const css = (/** @type {string} */ name) => style.getPropertyValue(name).trim() || "gray";
  return {
    kinds: model.get("kinds").map((kind) => colors[`kind-${kind}`] || "gray"), epoch: colors["kind-epoch"] || "gray",
    wait: colors.wait, path: colors.path, collective: colors["collective-frame"],
    lane: css("--mpinb-lane"), text: css("--mpinb-text"), muted: css("--mpinb-muted"),
  };
}

/**
 * What a view says, in the notebook's language: the words trace.py's VIEW_WORDS sent for the
 * English template, else the template itself, its ``{fields}`` filled in.
 * @param {Model} model
 * @returns {(english: string, fields?: Record<string, string | number>) => string}
 */
function sayer(model) {
  const words = model.get("words") || {};
  return (english, fields = {}) => (words[english] ?? english).replace(/\{(\w+)\}/g, (_, key) => String(fields[key]));
}

/**
 * A column sent as bytes, as the typed array it holds (copied only if misaligned).
 * @template {Int8ArrayConstructor | Int16ArrayConstructor | Int32ArrayConstructor | Float64ArrayConstructor} T
 * @param {DataView | undefined} view
 * @param {T} Type
 * @returns {InstanceType<T>}
 */
function column(view, Type) {
  if (!view) return /** @type {InstanceType<T>} */ (new Type(0));
  const size = Type.BYTES_PER_ELEMENT, buffer = /** @type {ArrayBuffer} */ (view.buffer);
  if (view.byteOffset % size === 0) {
    return /** @type {InstanceType<T>} */ (new Type(buffer, view.byteOffset, view.byteLength / size));
  }
  return /** @type {InstanceType<T>} */ (new Type(buffer.slice(view.byteOffset, view.byteOffset + view.byteLength)));
}

/**
 * @param {Model} model
 * @returns {Run}
 */
function load(model) {
  const e = model.get("events"), m = model.get("messages"), c = model.get("collectives"), r = model.get("flows"), l = model.get("locks");
  const w = model.get("waits"), p = model.get("path"), f = model.get("io");
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
  const flows = {
    source: column(r.source, Int32Array), dest: column(r.dest, Int32Array),
    start: column(r.start, Float64Array), end: column(r.end, Float64Array),
    call: column(r.call, Int32Array),
  };
  const locks = {
    target: column(l.target, Int32Array), holder: column(l.holder, Int32Array),
    start: column(l.start, Float64Array), end: column(l.end, Float64Array), exclusive: column(l.exclusive, Int8Array),
  };
  const io = {
    rank: column(f.rank, Int32Array), file: column(f.file, Int16Array), start: column(f.start, Float64Array),
    end: column(f.end, Float64Array), write: column(f.write, Int8Array), call: column(f.call, Int32Array),
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
  return { ev, msg, flows, locks, io, coll, waits, path, allRanks: model.get("ranks"), fileLanes: model.get("file_lanes"),
    laneName: laneNamer(model) };
}

/**
 * A lane's label: "rank 2", or "child 1" for a process spawned in the run (trace.py names them).
 * @param {Model} model
 * @returns {(rank: number) => string}
 */
function laneNamer(model) {
  const ranks = model.get("ranks"), names = model.get("lane_names") || [];
  return (rank) => names[ranks.indexOf(rank)] ?? `rank ${rank}`;
}

/**
 * "0-3,6" -> the ranges it names, as [first, last] pairs ("", "all" and "*": every rank); null when
 * it does not parse (ASCII digits, spaces ignored) or a range runs backwards ("3-1"): the rule of
 * mpinb.common._ranges.parse_ranks, tested equal in tests/test_browser.py. Ranges are never expanded.
 * @param {string} text
 * @returns {[number, number][] | null}
 */
export function parseRanks(text) {
  if (["", "all", "*"].includes(text.trim())) return [[0, Infinity]];
  /** @type {[number, number][]} */
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

/**
 * Which ranks (lanes) and which calls the filters leave.
 * @param {Model} model
 * @param {Run} run
 * @returns {Shown}
 */
function applyFilters(model, run) {
  const ops = model.get("ops"), comms = model.get("comms");
  const rankText = model.get("show_ranks").trim(), tagText = model.get("show_tag").trim();
  const chosen = rankText ? parseRanks(rankText) : null;
  const op = ops.indexOf(model.get("show_op")), comm = comms.indexOf(model.get("show_comm"));
  const tag = /^-?\d+$/.test(tagText) ? +tagText : null;
  let ranks = chosen ? run.allRanks.filter((r) => chosen.some(([first, last]) => first <= r && r <= last))
    : run.allRanks.slice();
  if (!ranks.length) ranks = run.allRanks.slice();
  const lane = new Map(ranks.map((r, i) => [r, i]));
  const { ev } = run, n = ev.rank.length;
  const visible = new Uint8Array(n);
  /** @type {number[][]} */
  const byLane = ranks.map(() => []);
  for (let i = 0; i < n; i++) {  // sorted by start
    const laneIndex = lane.get(ev.rank[i]);
    if (laneIndex === undefined) continue;
    if (op >= 0 && ev.op[i] !== op) continue;
    if (comm >= 0 && ev.comm[i] !== comm) continue;
    if (tag !== null && ev.tag[i] !== tag) continue;
    visible[i] = 1;
    byLane[laneIndex].push(i);
  }
  return {
    ranks, lane, visible, op, comm, byLane: byLane.map((a) => Int32Array.from(a)),
    badRanks: Boolean(rankText) && !chosen, badTag: Boolean(tagText) && tag === null,
  };
}

/** @param {number} s seconds */
function fmtTime(s) {
  if (s >= 1) return `${s.toFixed(2)} s`;
  if (s >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
  return `${(s * 1e6).toFixed(1)} \u00b5s`;
}

/** @param {number} n bytes */
function fmtBytes(n) {
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MB`;
  if (n >= 1024) return `${(n / 1024).toFixed(1)} kB`;
  return `${n} B`;
}

/**
 * @param {number} laneCount
 * @param {number} laneH
 * @param {number} duration
 * @returns {Frame}
 */
function makeFrame(laneCount, laneH, duration) {
  /** @type {Frame} */
  const frame = {
    laneH, width: 0, height: AXIS + laneH * laneCount + 4, view: { t0: 0, t1: duration },
    xOf: (t) => LEFT + ((t - frame.view.t0) / (frame.view.t1 - frame.view.t0)) * (frame.width - LEFT - RIGHT),
    tOf: (x) => frame.view.t0 + ((x - LEFT) / (frame.width - LEFT - RIGHT)) * (frame.view.t1 - frame.view.t0),
    yOf: (laneIndex) => AXIS + laneIndex * laneH,
  };
  return frame;
}

/**
 * @param {Context} g
 * @param {Frame} frame
 * @param {number[]} ranks
 * @param {string[]} files the names of the files' lanes, below the ranks'
 * @param {Paint} paint
 * @param {(rank: number) => string} laneName
 */
function drawLanes(g, frame, ranks, files, paint, laneName) {
  g.font = "11px sans-serif";
  g.textBaseline = "middle";
  // Lanes thinner than a label: label every few (the tooltip names the rank of any call).
  const every = Math.ceil(LABEL_H / frame.laneH);
  const laneAt = (/** @type {number} */ i) => {
    g.fillStyle = paint.lane;
    g.fillRect(LEFT, frame.yOf(i) + Math.min(1, frame.laneH / 4), frame.width - LEFT - RIGHT,
               Math.max(frame.laneH - 2, 1));
  };
  ranks.forEach((r, i) => {
    laneAt(i);
    if (i % every) return;
    g.fillStyle = paint.text;
    g.fillText(laneName(r), 4, frame.yOf(i) + Math.max(frame.laneH, LABEL_H) / 2);
  });
  // A file's lane below the ranks', in the colour of I/O, labelled with its name (cut to fit).
  files.forEach((name, k) => {
    const i = ranks.length + k;
    laneAt(i);
    g.fillStyle = paint.kinds[IO_KIND];
    g.fillRect(LEFT, frame.yOf(i) + frame.laneH / 2 - 1, frame.width - LEFT - RIGHT, 2);
    g.fillText(name.length > 8 ? `${name.slice(0, 7)}\u2026` : name, 4, frame.yOf(i) + Math.max(frame.laneH, LABEL_H) / 2);
  });
  g.fillStyle = paint.muted;
  const { t0, t1 } = frame.view;
  for (let k = 0; k <= 4; k++) {
    const t = t0 + (k / 4) * (t1 - t0);
    g.fillText(fmtTime(t), Math.min(frame.xOf(t), frame.width - 50), AXIS / 2);
  }
}

/**
 * A box per call; anything narrower than a pixel is merged into that pixel. Returns the boxes drawn.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawCalls(g, frame, run, shown, paint) {
  const { ev } = run;
  let boxes = 0;
  shown.byLane.forEach((indices, laneIndex) => {
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
      g.fillStyle = paint.kinds[ev.kind[i]];
      g.fillRect(x0, y, Math.max(x1 - x0, 1), h);
      boxes++;
    }
  });
  return boxes;
}

/**
 * One frame across the lanes of the ranks that took part in a collective (of those shown).
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawCollectives(g, frame, run, shown, paint) {
  const { coll } = run, { ranks } = shown;
  g.strokeStyle = paint.collective;
  for (let k = 0; k < coll.low.length; k++) {
    if ((shown.op >= 0 && coll.op[k] !== shown.op) || (shown.comm >= 0 && coll.comm[k] !== shown.comm)) continue;
    const x0 = frame.xOf(coll.start[k]), x1 = frame.xOf(coll.end[k]);
    if (x1 < LEFT || x0 > frame.width) continue;
    const first = firstLane(ranks, coll.low[k]), last = firstLane(ranks, coll.high[k] + 1) - 1;  // shown members
    if (first > last) continue;
    const y0 = frame.yOf(first) + 1, y1 = frame.yOf(last) + frame.laneH - 1;
    g.strokeRect(x0, y0, Math.max(x1 - x0, 1), y1 - y0);
  }
}

/**
 * The first lane (index into the sorted shown ranks) whose rank is at least ``rank``.
 * @param {number[]} ranks
 * @param {number} rank
 */
function firstLane(ranks, rank) {
  let lo = 0, hi = ranks.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (ranks[mid] < rank) lo = mid + 1; else hi = mid; }
  return lo;
}

/**
 * @param {Context} g
 * @param {number} x0
 * @param {number} y0
 * @param {number} x1
 * @param {number} y1
 * @param {boolean} filled
 */
function arrowHead(g, x0, y0, x1, y1, filled) {
  const angle = Math.atan2(y1 - y0, x1 - x0);
  g.beginPath();
  g.moveTo(x1 - 6 * Math.cos(angle - 0.4), y1 - 6 * Math.sin(angle - 0.4));
  g.lineTo(x1, y1);
  g.lineTo(x1 - 6 * Math.cos(angle + 0.4), y1 - 6 * Math.sin(angle + 0.4));
  if (filled) g.fill(); else g.stroke();
}

/**
 * One arrow from lane ``from`` at time ``t0`` to lane ``to`` at ``t1``, in the context's style;
 * false (nothing drawn) when a lane is not shown or the arrow is outside the visible span.
 * @param {Context} g
 * @param {Frame} frame
 * @param {number} t0
 * @param {number | undefined} from
 * @param {number} t1
 * @param {number | undefined} to
 */
function arrow(g, frame, t0, from, t1, to) {
  if (from === undefined || to === undefined) return false;
  const x0 = frame.xOf(t0), x1 = frame.xOf(t1);
  if (Math.max(x0, x1) < LEFT || Math.min(x0, x1) > frame.width) return false;
  const y0 = frame.yOf(from) + frame.laneH / 2, y1 = frame.yOf(to) + frame.laneH / 2;
  g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke();
  arrowHead(g, x0, y0, x1, y1, true);
  return true;
}

/**
 * An arrow from each send to the end of its receive (both halves shown). Returns the arrows drawn.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawMessages(g, frame, run, shown, paint) {
  const { msg } = run, { lane, visible } = shown;
  let arrows = 0;
  g.save();
  g.strokeStyle = g.fillStyle = paint.text;
  g.globalAlpha = 0.6;
  g.lineWidth = 1;
  for (let k = 0; k < msg.source.length; k++) {
    if (!visible[msg.send[k]] || !visible[msg.recv[k]]) continue;
    if (arrow(g, frame, msg.start[k], lane.get(msg.source[k]), msg.end[k], lane.get(msg.dest[k]))) arrows++;
  }
  g.restore();
  return arrows;
}

/**
 * A dashed arrow, in the colour of its call, for each flow whose call is shown: a one-sided
 * transfer from the RMA call on the origin to the end of its epoch where the bytes went (a
 * ``Get``'s arrow points back to its origin), a neighbourhood collective's data from a member's
 * call to its neighbour's. Returns the arrows drawn.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawFlows(g, frame, run, shown, paint) {
  const { flows, ev } = run, { lane, visible } = shown;
  let arrows = 0;
  g.save();
  g.globalAlpha = 0.9;
  g.lineWidth = 1.5;
  g.setLineDash([4, 3]);
  for (let k = 0; k < flows.source.length; k++) {
    const call = flows.call[k];
    if (!visible[call]) continue;
    g.strokeStyle = g.fillStyle = paint.kinds[ev.kind[call]];
    if (arrow(g, frame, flows.start[k], lane.get(flows.source[k]), flows.end[k], lane.get(flows.dest[k]))) arrows++;
  }
  g.restore();
  return arrows;
}

/**
 * A dashed arrow in the I/O colour for each read or write whose call is shown, between the rank's
 * lane and its file's (below the ranks'): a write from the call's start to the file at its end, a
 * read from the file at the call's start to the rank at its end. Returns the arrows drawn.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawIo(g, frame, run, shown, paint) {
  const { io } = run, { lane, visible, ranks } = shown;
  let arrows = 0;
  g.save();
  g.globalAlpha = 0.9;
  g.lineWidth = 1.5;
  g.setLineDash([2, 2]);
  g.strokeStyle = g.fillStyle = paint.kinds[IO_KIND];
  for (let k = 0; k < io.rank.length; k++) {
    if (!visible[io.call[k]]) continue;
    const rankLane = lane.get(io.rank[k]), fileLane = ranks.length + io.file[k];
    const [from, to] = io.write[k] ? [rankLane, fileLane] : [fileLane, rankLane];
    if (arrow(g, frame, io.start[k], from, io.end[k], to)) arrows++;
  }
  g.restore();
  return arrows;
}

/**
 * Each passive-target epoch as a bracket along the top of the target's lane, in the epoch
 * colour (solid: an exclusive lock; dashed: a shared one), labelled with its holder when wide
 * enough: the target takes no part in the epoch, so its lane shows who held it. Returns the
 * brackets drawn.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawLocks(g, frame, run, shown, paint) {
  const { locks } = run, { lane } = shown;
  let drawn = 0;
  g.save();
  g.strokeStyle = g.fillStyle = paint.epoch;
  g.lineWidth = 3;
  g.font = "9px sans-serif";
  g.textBaseline = "top";
  for (let k = 0; k < locks.target.length; k++) {
    const laneIndex = lane.get(locks.target[k]);
    if (laneIndex === undefined) continue;
    const x0 = frame.xOf(locks.start[k]), x1 = Math.max(frame.xOf(locks.end[k]), x0 + 1);
    if (x1 < LEFT || x0 > frame.width) continue;
    const y = frame.yOf(laneIndex) + 2;
    g.setLineDash(locks.exclusive[k] ? [] : [3, 2]);
    g.beginPath(); g.moveTo(x0, y + 3); g.lineTo(x0, y); g.lineTo(x1, y); g.lineTo(x1, y + 3); g.stroke();
    if (x1 - x0 > 40 && frame.laneH >= 16) g.fillText(`\u{1F512} ${locks.holder[k]}`, x0 + 2, y + 2);
    drawn++;
  }
  g.restore();
  return drawn;
}

/**
 * The waiting part of each call that waited: a band along the bottom of its box.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawWaits(g, frame, run, shown, paint) {
  const { waits } = run, { lane } = shown;
  let drawn = 0;
  g.fillStyle = paint.wait;
  for (let k = 0; k < waits.rank.length; k++) {
    const laneIndex = lane.get(waits.rank[k]);
    if (laneIndex === undefined) continue;
    const x0 = frame.xOf(waits.start[k]), x1 = frame.xOf(waits.end[k]);
    if (x1 < LEFT || x0 > frame.width) continue;
    const y = frame.yOf(laneIndex);
    const band = Math.max(2, Math.floor(frame.laneH / 4));
    g.fillRect(x0, y + frame.laneH - 2 - band, Math.max(x1 - x0, 1), band);
    drawn++;
  }
  return drawn;
}

/**
 * Calls that a stopped run broke off: an open box to where the rank stopped, and a dashed arrow
 * towards the rank it waited for, so that a deadlock's cycle shows as crossing arrows.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawOpen(g, frame, run, shown, paint) {
  const { ev } = run, { lane } = shown;
  let drawn = 0;
  g.save();
  g.setLineDash([4, 3]);
  g.lineWidth = 1.5;
  for (let i = 0; i < ev.rank.length; i++) {
    if (!ev.open[i] || !shown.visible[i]) continue;
    const x0 = frame.xOf(ev.start[i]), x1 = frame.xOf(ev.stop[i]);
    const y = frame.yOf(/** @type {number} */ (lane.get(ev.rank[i])));
    g.strokeStyle = paint.kinds[ev.kind[i]];
    g.strokeRect(x0, y + 2, Math.max(x1 - x0, 2), frame.laneH - 4);
    const peerLane = lane.get(ev.peer[i]);
    if (ev.peer[i] >= 0 && peerLane !== undefined && ev.peer[i] !== ev.rank[i]) {
      const y0 = y + frame.laneH / 2, y1 = frame.yOf(peerLane) + frame.laneH / 2;
      g.strokeStyle = paint.wait;
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

/**
 * The critical path: a red line through the lanes, jumping where a message or an arrival set the time.
 * @param {Context} g
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {Paint} paint
 */
function drawPath(g, frame, run, shown, paint) {
  const { path } = run, { lane } = shown;
  let steps = 0;
  /** @type {{ x: number, y: number } | null} */
  let last = null;
  g.save();
  g.strokeStyle = paint.path;
  g.lineWidth = 2.5;
  g.beginPath();
  for (let k = 0; k < path.rank.length; k++) {
    const laneIndex = lane.get(path.rank[k]);
    if (laneIndex === undefined) { last = null; continue; }
    const y = frame.yOf(laneIndex) + frame.laneH / 2;
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

/**
 * The call under the cursor (index into the event columns), or -1.
 * @param {Frame} frame
 * @param {Run} run
 * @param {Shown} shown
 * @param {number} x
 * @param {number} y
 */
function callAt(frame, run, shown, x, y) {
  const laneIndex = Math.floor((y - AXIS) / frame.laneH);
  if (laneIndex < 0 || laneIndex >= shown.ranks.length || x < LEFT) return -1;
  const t = frame.tOf(x), slack = (2 / (frame.width - LEFT - RIGHT)) * (frame.view.t1 - frame.view.t0);
  const indices = shown.byLane[laneIndex], { ev } = run;
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

/**
 * What the tooltip says of call ``i``.
 * @param {Model} model
 * @param {Run} run
 * @param {number} i
 */
function callText(model, run, i) {
  const { ev, waits } = run;
  const ops = model.get("ops"), files = model.get("files"), kinds = model.get("kinds");
  const waitKinds = model.get("wait_kinds"), say = sayer(model);
  const peer = ev.peer[i] >= 0 ? `  ${say("peer")} ${ev.peer[i]}` : "";
  const kind = kinds[ev.kind[i]];
  const tagLabel = say({ rma: "displacement", io: "offset" }[kind] || "tag");
  const tag = ev.tag[i] >= 0 && kind !== "epoch" ? `  ${tagLabel} ${ev.tag[i]}` : "";
  let text = `rank ${ev.rank[i]}: ${ops[ev.op[i]]} (${say(kind)})${peer}${tag}\n`
    + `${fmtBytes(ev.bytes[i])}  ${fmtTime(ev.stop[i] - ev.start[i])} ${say("at")} ${fmtTime(ev.start[i])}\n`
    + `${files[ev.file[i]]}, ${say("line {line}", { line: ev.line[i] })}`;
  const behind = model.get("library_lines")[`${ev.rank[i]} ${ev.file[i]} ${ev.line[i]}`];
  if (behind) text += `\n${say("made in library code: {where}", { where: behind })}`;
  if (ev.open[i]) text += `\n${say("unfinished: still waiting when the run stopped")}`;
  for (let k = 0; k < waits.rank.length; k++) {
    if (waits.rank[k] === ev.rank[i] && waits.start[k] >= ev.start[i] - 1e-9 && waits.end[k] <= ev.stop[i] + 1e-9) {
      text += `\n${say("{kind}: waited {time} for rank {peer}", { kind: say(waitKinds[waits.kind[k]]),
        time: fmtTime(waits.end[k] - waits.start[k]), peer: waits.peer[k] })}`;
    }
  }
  return text;
}

/** @typedef {"show_ranks" | "show_tag"} TextFilter */
/** @typedef {"show_op" | "show_comm"} ChoiceFilter */
/** @typedef {"show_waits" | "show_path"} CheckFilter */

/**
 * Ranks, operation, communicator, tag; and whether waits and the critical path are drawn.
 * @param {Model} model
 * @param {() => Shown} onChange redraws, and says what the filters leave
 * @returns {[HTMLDivElement, (shown: Shown) => void]} the bar, and what marks bad input in it
 */
function filterBar(model, onChange) {
  const say = sayer(model);
  const bar = document.createElement("div");
  bar.className = "filters";
  /** @type {(key: TextFilter, label: string, hint: string) => [HTMLLabelElement, HTMLInputElement]} */
  const text = (key, label, hint) => {
    const input = document.createElement("input");
    input.type = "text"; input.value = model.get(key); input.placeholder = say(hint); input.dataset.filter = key;
    // Applied as one types (JupyterLab's command mode may take the Enter key for itself).
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let pause;
    input.addEventListener("input", () => {
      clearTimeout(pause);
      pause = setTimeout(() => { model.set(key, input.value); model.save_changes(); mark(onChange()); }, 250);
    });
    const wrap = document.createElement("label");
    wrap.append(`${say(label)} `, input);
    return [wrap, input];
  };
  /** @type {(key: ChoiceFilter, label: string, values: string[]) => HTMLLabelElement} */
  const choice = (key, label, values) => {
    const select = document.createElement("select");
    select.dataset.filter = key;
    for (const value of ["", ...values]) select.add(new Option(value || say("all"), value, false, value === model.get(key)));
    select.addEventListener("change", () => { model.set(key, select.value); model.save_changes(); mark(onChange()); });
    const wrap = document.createElement("label");
    wrap.append(`${say(label)} `, select);
    return wrap;
  };
  /** @type {(key: CheckFilter, label: string) => HTMLLabelElement} */
  const check = (key, label) => {
    const box = document.createElement("input");
    box.type = "checkbox"; box.checked = model.get(key); box.dataset.filter = key;
    box.addEventListener("change", () => { model.set(key, box.checked); model.save_changes(); mark(onChange()); });
    const wrap = document.createElement("label");
    wrap.append(box, ` ${say(label)}`);
    return wrap;
  };
  const [ranksLabel, ranksInput] = text("show_ranks", "ranks", "all");
  const [tagLabel, tagInput] = text("show_tag", "tag", "all");
  bar.append(ranksLabel, choice("show_op", "op", model.get("ops")), choice("show_comm", "comm", model.get("comms")),
             tagLabel, check("show_waits", "waits"), check("show_path", "critical path"));
  /** @param {Shown} shown */
  function mark(shown) {
    ranksInput.classList.toggle("bad", shown.badRanks);
    tagInput.classList.toggle("bad", shown.badTag);
  }
  return [bar, mark];
}

/**
 * The legend under the diagram: the kinds of calls and what the marks mean.
 * @param {string[]} kinds
 * @param {Set<number>} present the kinds of the run's calls
 * @param {ReturnType<typeof sayer>} say
 */
function legendOf(kinds, present, say) {
  const legend = document.createElement("div");
  legend.className = "legend";
  /** @param {string} className @param {string} label @param {string} [background] */
  const key = (className, label, background) => {
    const swatch = document.createElement("span");
    swatch.className = `key ${className}`;
    if (background) swatch.style.background = background;
    legend.append(swatch, say(label));
  };
  kinds.forEach((kind, k) => {  // probes look like receives; one-sided kinds only where the run has them
    if (k < 4 || (kind !== "probe" && present.has(k))) key(`kind-${kind}`, kind, `var(--mpinb-kind-${kind})`);
  });
  key("computing", "computing");
  key("waiting", "waiting");
  key("critical", "critical path");
  key("unfinished", "unfinished");
  legend.append(` \u00b7 ${say("wheel: zoom, drag: pan, double-click: reset")}`);
  return legend;
}

/**
 * The space-time diagram with its filters and legend; returns what redraws it at a new width.
 * @param {Model} model
 * @param {Run} run
 * @param {HTMLElement} box
 * @param {HTMLElement} root
 */
function timeline(model, run, box, root) {
  const expanded = model.get("expanded");
  const plot = document.createElement("div");
  plot.className = "plot";
  plot.style.maxHeight = `${PLOT_MAX_H}px`;
  const canvas = document.createElement("canvas");
  const tip = document.createElement("div");
  tip.className = "tip";
  plot.append(canvas, tip);

  const duration = Math.max(model.get("duration"), model.get("axis_end"), 1e-9);
  const dpr = window.devicePixelRatio || 1;
  const paint = paintOf(model, root);
  /** @type {Shown} */
  let shown;
  /** @type {Frame} */
  let frame;

  function layout() {
    shown = applyFilters(model, run);
    // Up to a few dozen ranks fit as they are; beyond, lanes thin out and the plot scrolls.
    const thinnest = shown.ranks.length > 128 ? 3 : 8;
    const laneH = expanded ? 26 : Math.max(thinnest, Math.min(16, Math.floor(120 / shown.ranks.length)));
    const view = frame ? frame.view : { t0: 0, t1: duration };
    frame = makeFrame(shown.ranks.length + run.fileLanes.length, laneH, duration);
    frame.view = view;
    size();
    return shown;
  }

  function size() {
    frame.width = Math.max(box.clientWidth || 800, 300);
    canvas.width = frame.width * dpr; canvas.height = frame.height * dpr;
    canvas.style.width = `${frame.width}px`; canvas.style.height = `${frame.height}px`;
  }

  function draw() {
    const g = canvas.getContext("2d");
    if (!g) return;
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, frame.width, frame.height);
    drawLanes(g, frame, shown.ranks, run.fileLanes, paint, run.laneName);
    g.save();
    g.beginPath(); g.rect(LEFT, 0, frame.width - LEFT - RIGHT, frame.height); g.clip();
    const boxes = drawCalls(g, frame, run, shown, paint);
    const waits = model.get("show_waits") ? drawWaits(g, frame, run, shown, paint) : 0;
    drawCollectives(g, frame, run, shown, paint);
    const arrows = drawMessages(g, frame, run, shown, paint);
    const flows = drawFlows(g, frame, run, shown, paint);
    const locks = drawLocks(g, frame, run, shown, paint);
    const io = drawIo(g, frame, run, shown, paint);
    const open = drawOpen(g, frame, run, shown, paint);
    const path = model.get("show_path") ? drawPath(g, frame, run, shown, paint) : 0;
    g.restore();
    // What was drawn, for tests and for anyone inspecting the page.
    Object.assign(canvas.dataset, { lanes: shown.ranks.length, fileLanes: run.fileLanes.length, boxes, arrows,
                                    flows, locks, io, waits, open, path, axisEnd: duration });
  }

  const [filters, markBad] = filterBar(model, () => { const left = layout(); draw(); return left; });
  const present = new Set(run.ev.kind);
  if (run.fileLanes.length) present.add(IO_KIND);  // (a collective write is drawn in I/O's colour too)
  box.append(filters, plot, legendOf(model.get("kinds"), present, sayer(model)));
  // The biggest loss and what set the time, in words under the picture (the rest: Per rank).
  const [loss] = model.get("losses"), [pathText] = model.get("path_text");
  for (const [text, className] of [[loss, "loss"], [pathText, "path"]]) {
    if (!text) continue;
    const line = document.createElement("div");
    line.className = className;
    line.textContent = text;
    box.appendChild(line);
  }

  /** @type {{ x: number } | null} */
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
    const i = callAt(frame, run, shown, x, y);
    if (i < 0) { tip.style.display = "none"; return; }
    tip.textContent = callText(model, run, i);
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
  markBad(layout());
  draw();
  return () => { size(); draw(); };
}

/** @type {Record<TraceState["measure"], "matrix_count" | "matrix_bytes" | "matrix_time">} */
const MEASURES = { messages: "matrix_count", bytes: "matrix_bytes", time: "matrix_time" };

/**
 * A cell of a heat map: shaded by ``level`` (0 to 1) in the first colour of mpinb's palette,
 * over the theme's own background, so that the theme's text colour reads on it at any level.
 * @param {HTMLTableCellElement} cell
 * @param {number} level
 */
function shade(cell, level) {
  cell.className = "cell";
  if (level > 0) cell.style.background = `color-mix(in srgb, var(--mpinb-kind-send) ${(15 + 70 * level).toFixed(0)}%, transparent)`;
}

/**
 * @param {Model} model
 * @param {HTMLElement} box
 */
function matrix(model, box) {
  const say = sayer(model);
  const measure = model.get("measure");
  const values = model.get(MEASURES[measure]);
  const bytes = model.get("matrix_bytes"), counts = model.get("matrix_count"), times = model.get("matrix_time");
  const peak = Math.max(1e-12, ...values.flat());
  const laneName = laneNamer(model);
  const switcher = document.createElement("div");
  switcher.className = "filters";
  const select = document.createElement("select");
  select.dataset.filter = "measure";
  for (const key of Object.keys(MEASURES)) select.add(new Option(say(key), key, false, key === measure));
  select.addEventListener("change", () => {
    model.set("measure", /** @type {TraceState["measure"]} */ (select.value));
    model.save_changes();
  });
  switcher.append(`${say("show")} `, select);
  const table = document.createElement("table");
  table.className = "heat";
  const head = table.insertRow();
  head.insertCell().textContent = say("from \\ to");
  values.forEach((_, j) => { head.insertCell().textContent = String(j); });
  /** @type {Record<TraceState["measure"], (v: number) => string>} */
  const show = { messages: (v) => (v ? String(v) : ""), bytes: (v) => (v ? fmtBytes(v) : ""), time: (v) => (v ? fmtTime(v) : "") };
  values.forEach((row, i) => {
    const tr = table.insertRow();
    tr.insertCell().textContent = laneName(i);
    row.forEach((value, j) => {
      const cell = tr.insertCell();
      shade(cell, value / peak);
      cell.textContent = show[measure](value);
      cell.title = `${laneName(i)} \u2192 ${laneName(j)}: ${say("{count} messages, {bytes}, {time}",
        { count: counts[i][j], bytes: fmtBytes(bytes[i][j]), time: fmtTime(times[i][j]) })}`;
    });
  });
  const note = document.createElement("div");
  note.className = "legend";
  note.textContent = say({
    messages: "point-to-point messages and one-sided transfers from each rank to each rank",
    bytes: "bytes sent point to point or one-sided from each rank to each rank",
    time: "seconds from each send's start to its receive's end, summed (a late sender's wait included)",
  }[measure]);
  box.append(switcher, table, note);
}

/**
 * Operations down, bins across; each cell's shade is its share of the operation's calls.
 * @param {string} title
 * @param {import("./state").Histogram} data
 * @param {(value: number) => string} format
 * @param {HTMLElement} box
 */
function histogram(title, data, format, box) {
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
      shade(cell, row[b] / peak);
      cell.textContent = row[b] ? String(row[b]) : "";
      cell.title = `${op}: ${row[b]} in [${format(data.edges[b])}, ${format(data.edges[b + 1])})`;
    }
  }
  box.append(heading, table);
}

/**
 * @param {Model} model
 * @param {HTMLElement} box
 */
function statistics(model, box) {
  const hist = model.get("histograms"), say = sayer(model);
  histogram(say("Message sizes (messages sent, per operation)"), hist.sizes, fmtBytes, box);
  histogram(say("Call durations (calls, per operation)"), hist.durations, fmtTime, box);
}

/**
 * @param {Model} model
 * @param {HTMLElement} box
 */
function summary(model, box) {
  const rows = model.get("summary"), say = sayer(model);
  const table = document.createElement("table");
  const head = table.insertRow();
  for (const label of ["rank", "time in MPI vs computing", "wall", "in MPI", "waiting", "msgs out", "msgs in",
                       "bytes out", "bytes in"]) {
    const th = document.createElement("th");
    th.textContent = say(label);
    if (label === "time in MPI vs computing") th.style.textAlign = "left";
    head.appendChild(th);
  }
  for (const row of rows) {
    const tr = table.insertRow();
    const share = row.wall > 0 ? row.mpi / row.wall : 0;
    tr.insertCell().textContent = String(row.rank);
    const stack = document.createElement("div");
    stack.className = "stack";
    const inMpi = document.createElement("div");
    inMpi.style.width = `${(100 * share).toFixed(1)}%`;
    stack.appendChild(inMpi);
    const cell = tr.insertCell();
    cell.style.textAlign = "left";
    cell.appendChild(stack);
    for (const text of [fmtTime(row.wall), `${(100 * share).toFixed(0)}%`, fmtTime(row.waiting || 0),
                        String(row.messages_sent), String(row.messages_received), fmtBytes(row.bytes_sent),
                        fmtBytes(row.bytes_received)]) {
      tr.insertCell().textContent = text;
    }
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

/** @type {import("@anywidget/types").Render<TraceState>} */
function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mpinb-trace";
  setColors(root, model.get("colors"));
  el.append(root);
  const run = load(model);
  /** @type {(() => void) | null} */
  let resize = null;

  function draw() {
    root.replaceChildren();
    const bar = document.createElement("div");
    bar.className = "bar";
    const say = sayer(model);
    for (const [key, label] of PANELS) {
      const tab = document.createElement("span");
      tab.className = "tab" + (model.get("panel") === key ? " active" : "");
      tab.dataset.panel = key;
      tab.textContent = say(label);
      tab.addEventListener("click", () => { model.set("panel", key); model.save_changes(); });
      bar.appendChild(tab);
    }
    const info = document.createElement("span");
    info.className = "info";
    const dropped = model.get("dropped");
    const open = run.ev.open.reduce((n, v) => n + v, 0);
    const count = run.flows.source.length;
    const flows = count ? `${say("{count} one-sided or neighbourhood flows", { count })} \u00b7 ` : "";
    info.textContent = `${say("{count} MPI calls", { count: run.ev.rank.length })} \u00b7 `
      + `${say("{count} messages", { count: run.msg.source.length })} \u00b7 ${flows}${fmtTime(model.get("duration"))}`
      + (open ? ` \u00b7 ${say("stopped with {count} calls unfinished", { count: open })}` : "")
      + (dropped ? ` \u00b7 ${say("{count} calls not recorded (buffer full)", { count: dropped })}` : "");
    const toggle = document.createElement("span");
    toggle.className = "toggle";
    toggle.textContent = model.get("expanded") ? `\u25b4 ${say("compact")}` : `\u25be ${say("expand")}`;
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
      // The canvas needs the box's width, and the theme's colours, known once it is in the page.
      requestAnimationFrame(() => { resize = timeline(model, run, box, root); });
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
