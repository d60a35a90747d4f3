// Per-rank output of one %%mpi cell: a merged view (rank-coloured prefixes), a view that groups
// ranks with the same output, and a tab per rank (beyond MANY ranks: tabs for failed ranks only,
// and a box to jump to any rank).
// State comes from mpinb/widgets/output.py; this module only draws it. While a run goes on, the
// widget sends only what is new ("news" messages), which is appended to what is drawn; the whole
// output arrives as state at the end (and when a view opens late, it asks for it).

/** @typedef {import("./state").OutputState} OutputState */
/** @typedef {import("./state").Display} Display */
/** @typedef {import("@anywidget/types").AnyModel<OutputState>} Model */
/** @typedef {"stdout" | "stderr"} Stream */
/**
 * This view's copy of the output: the state, plus the news since.
 * @typedef {{ ranks: number[], palette: string[], stdout: string[], stderr: string[], displays: Display[][],
 *   merged: [number, Stream, string][] }} Output
 * The merged view's elements that news is appended to (lines still open, by rank and stream).
 * @typedef {{ pre: HTMLPreElement, note: HTMLDivElement, count: number, displays: HTMLDivElement,
 *   partial: Map<string, { element: HTMLSpanElement, text: string }> }} MergedShown
 * One rank's view's elements that news is appended to.
 * @typedef {{ index: number, stdout: HTMLPreElement, stderr: HTMLPreElement, displays: HTMLDivElement,
 *   note: HTMLDivElement }} RankShown
 * @typedef {["text", number, Stream, string] | ["display", number, Display] | ["reset", number, Stream, string]} News
 */

const MAX_MERGED_LINES = 5000;
const MANY = 16; // more ranks than this: no tab per rank
const FAILED_TABS = 8;
/** @type {Record<string, string>} */
const MARK = { running: "\u25cc", ok: "\u2713", error: "\u2717", interrupted: "\u25a0", idle: "" };

/**
 * mpinb's colours (mpinb/_colors.py) as CSS variables on ``root``, for output.css.
 * @param {HTMLElement} root
 * @param {Record<string, string>} colors
 */
function setColors(root, colors) {
  for (const [name, value] of Object.entries(colors)) root.style.setProperty(`--mpinb-${name}`, value);
}

/**
 * A rank's colour as text: its colour in mpinb's palette, mixed with the theme's text colour so
 * that it reads on a light page and on a dark one.
 * @param {string[]} palette
 * @param {number} rank
 */
function color(palette, rank) {
  return `color-mix(in srgb, ${palette[rank % palette.length]} 50%, var(--mpinb-text))`;
}

/** @param {number[]} ranks sorted */
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

/**
 * @param {string[]} palette
 * @param {number} rank
 * @param {boolean} isErr
 */
function prefix(palette, rank, isErr) {
  const span = document.createElement("span");
  span.className = "prefix";
  span.style.color = color(palette, rank);
  span.textContent = isErr ? `[${rank}:err] ` : `[${rank}] `;
  return span;
}

/**
 * Chunks arrive in any size; split them into whole lines per (rank, stream).
 * @param {Output} out
 * @returns {[number, boolean, string][]} rank, whether stderr, text
 */
function mergedLines(out) {
  const ranks = out.ranks;
  /** @type {Map<string, string>} */
  const partial = new Map();
  /** @type {[number, boolean, string][]} */
  const lines = [];
  for (const [index, stream, text] of out.merged) {
    const key = `${index}:${stream}`;
    const pieces = ((partial.get(key) || "") + text).split("\n");
    partial.set(key, pieces.pop() || "");
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

/**
 * @param {Output} out
 * @param {number} rank
 * @param {boolean} isErr
 * @param {string} text
 */
function mergedLine(out, rank, isErr, text) {
  const line = document.createElement("span");
  line.appendChild(prefix(out.palette, rank, isErr));
  const body = document.createElement("span");
  if (isErr) body.className = "err";
  body.textContent = text + "\n";
  line.appendChild(body);
  return line;
}

/**
 * @param {Output} out
 * @param {HTMLElement} box
 * @returns {MergedShown}
 */
function drawMerged(out, box) {
  const lines = mergedLines(out);
  const note = document.createElement("div");
  note.className = "note";
  box.appendChild(note);
  const pre = document.createElement("pre");
  box.appendChild(pre);
  for (const [rank, isErr, text] of lines.slice(-MAX_MERGED_LINES)) pre.appendChild(mergedLine(out, rank, isErr, text));
  /** @type {MergedShown} */
  const shown = { pre, note, count: lines.length, partial: new Map(), displays: document.createElement("div") };
  capMerged(shown);
  out.displays.forEach((items, index) => {
    for (const item of items || []) addMergedDisplay(out, shown, out.ranks[index], item);
  });
  box.appendChild(shown.displays);
  return shown;
}

/**
 * Keep the last MAX_MERGED_LINES lines in the page; each rank's tab has all of its own.
 * @param {MergedShown} shown
 */
function capMerged(shown) {
  while (shown.pre.childElementCount > MAX_MERGED_LINES) shown.pre.firstElementChild?.remove();
  shown.note.textContent = shown.count > MAX_MERGED_LINES
    ? `showing the last ${MAX_MERGED_LINES} of ${shown.count} lines; each rank's tab has all of its own` : "";
}

/**
 * A line that is still open (no newline yet) is drawn where it began and grows in place.
 * @param {Output} out
 * @param {MergedShown} shown
 * @param {number} rank
 * @param {number} index
 * @param {Stream} stream
 * @param {string} text
 */
function addMergedText(out, shown, rank, index, stream, text) {
  const key = `${index}:${stream}`;
  const open = shown.partial.get(key);
  const pieces = ((open ? open.text : "") + text).split("\n");
  const rest = pieces.pop() || "";
  if (open) {
    const body = /** @type {HTMLSpanElement} */ (open.element.lastChild);
    if (!pieces.length) { // still no newline: the open line grows
      open.text = rest;
      body.textContent = rest + "\n";
      return;
    }
    body.textContent = pieces.shift() + "\n";
    shown.partial.delete(key);
  }
  for (const line of pieces) {
    shown.pre.appendChild(mergedLine(out, rank, stream === "stderr", line));
    shown.count++;
  }
  if (rest) {
    const element = mergedLine(out, rank, stream === "stderr", rest);
    shown.pre.appendChild(element);
    shown.count++;
    shown.partial.set(key, { element, text: rest });
  }
  capMerged(shown);
}

/**
 * @param {Output} out
 * @param {MergedShown} shown
 * @param {number} rank
 * @param {Display} item
 */
function addMergedDisplay(out, shown, rank, item) {
  const label = document.createElement("div");
  label.appendChild(prefix(out.palette, rank, false));
  shown.displays.appendChild(label);
  shown.displays.appendChild(drawDisplay(item));
}

/** @param {Display} item */
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

/**
 * Ranks with exactly the same text and displays share one block, in order of their first rank.
 * @param {Output} out
 */
function groupedOutput(out) {
  /** @type {Map<string, { index: number, ranks: number[] }>} */
  const groups = new Map();
  /** @type {number[]} */
  const silent = [];
  out.ranks.forEach((rank, index) => {
    const displays = out.displays[index] || [];
    if (!out.stdout[index] && !out.stderr[index] && !displays.length) { silent.push(rank); return; }
    const key = JSON.stringify([out.stdout[index], out.stderr[index], displays]);
    let group = groups.get(key);
    if (!group) groups.set(key, group = { index, ranks: [] });
    group.ranks.push(rank);
  });
  return { groups: [...groups.values()], silent };
}

/**
 * @param {Output} out
 * @param {HTMLElement} box
 * @param {(index: number) => void} select shows one rank alone
 */
function drawGrouped(out, box, select) {
  const { groups, silent } = groupedOutput(out);
  for (const group of groups) {
    const head = document.createElement("div");
    head.className = "group-head";
    head.style.color = color(out.palette, group.ranks[0]);
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

/**
 * @param {Output} out
 * @param {number} index
 * @param {HTMLElement} box
 * @returns {RankShown}
 */
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

/** @param {RankShown} shown */
function markEmpty(shown) {
  shown.stdout.hidden = !shown.stdout.textContent;
  shown.stderr.hidden = !shown.stderr.textContent;
  const empty = shown.stdout.hidden && shown.stderr.hidden && !shown.displays.childElementCount;
  shown.note.textContent = empty ? "no output" : "";
}

/**
 * The ranks' last values, ranks with the same value in one row.
 * @param {Model} model
 * @param {HTMLElement} box
 * @param {number | null} only the index of the one rank shown, if one
 */
function drawValues(model, box, only) {
  const ranks = model.get("ranks");
  /** @type {Map<string, number[]>} */
  const groups = new Map();
  model.get("values").forEach((text, index) => {
    if (!text || (only !== null && index !== only)) return;
    let group = groups.get(text);
    if (!group) groups.set(text, group = []);
    group.push(ranks[index]);
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

/** @type {import("@anywidget/types").Render<OutputState>} */
function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "mpinb-out";
  setColors(root, model.get("colors"));
  el.appendChild(root);
  /** @type {"merged" | "grouped" | number} the view shown: merged, grouped, or a rank's (by index) */
  let selected = "merged";
  /** @type {Output} */
  let out;
  /** @type {MergedShown | RankShown | null} the elements that news is appended to */
  let shown = null;
  /** @type {"merged" | "rank" | "grouped"} what ``shown`` belongs to */
  let view = "merged";

  function fromState() {
    out = {
      ranks: model.get("ranks"),
      palette: model.get("palette"),
      stdout: [...model.get("stdout")],
      stderr: [...model.get("stderr")],
      displays: model.get("displays").map((items) => [...items]),
      merged: model.get("merged").map((chunk) => /** @type {[number, Stream, string]} */ ([...chunk])),
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
    /** @type {("merged" | "grouped" | number)[]} */
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
        tab.style.color = color(out.palette, ranks[key]);
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

  /** @param {number[]} ranks */
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
      if (again instanceof HTMLInputElement) { again.focus(); again.value = String(ranks[index]); }
    });
    input.addEventListener("keydown", (event) => event.stopPropagation()); // keys are not the notebook's
    label.appendChild(input);
    return label;
  }

  /** @param {News[]} items */
  function applyNews(items) {
    let redrawAll = false;
    for (const item of items) {
      if (item[0] === "text") {
        const [, index, stream, text] = item;
        out[stream][index] += text;
        out.merged.push([index, stream, text]);
        if (view === "merged" && shown && "pre" in shown) addMergedText(out, shown, out.ranks[index], index, stream, text);
        else if (shown && "index" in shown && shown.index === index) { shown[stream].textContent += text; markEmpty(shown); }
      } else if (item[0] === "display") {
        const [, index, display] = item;
        out.displays[index].push(display);
        if (view === "merged" && shown && "pre" in shown) addMergedDisplay(out, shown, out.ranks[index], display);
        else if (shown && "index" in shown && shown.index === index) {
          shown.displays.appendChild(drawDisplay(display));
          markEmpty(shown);
        }
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
