// The state each widget's Python class syncs (its traitlets tagged sync=True), as its ES module
// reads it through anywidget's model. `make lint` type-checks the modules against these
// (tsc --checkJs), and tests/test_layout.py checks that each interface names exactly the
// Python class's synced traits.

/** Colours by name, from mpinb/_colors.py (WIDGET_COLORS): each becomes --mpinb-NAME. */
export type Colors = Record<string, string>;

/** A column of numbers, sent from Python as the bytes of a typed array. */
export type Column = DataView;

/** mpinb.widgets.RankOutput: per-rank output of one run. */
export interface OutputState {
  colors: Colors;
  palette: string[];
  ranks: number[];
  stdout: string[];
  stderr: string[];
  displays: Display[][];
  merged: [number, "stdout" | "stderr", string][];
  state: string[];
  values: string[];
  mode: "tabs" | "merged" | "rank0";
  summary: string;
  notice: string;
}

/** One rich output of a rank (an image, HTML, text). */
export interface Display {
  mime: string;
  data: string;
}

/** mpinb.widgets.ProgressView: one mpinb.progress loop across the ranks. */
export interface ProgressState {
  colors: Colors;
  desc: string;
  total: number | null;
  ranks: number[];
  counts: number[];
  elapsed: number[];
  done: boolean[];
  ended: boolean[];
  lagging: number[];
  line: string;
  over: boolean;
}

/** mpinb.widgets.TraceView: the views of one traced run. */
export interface TraceState {
  colors: Colors;
  kinds: string[];
  wait_kinds: string[];
  words: Record<string, string>;
  ranks: number[];
  lane_names: string[];
  ops: string[];
  files: string[];
  library_lines: Record<string, string>;
  comms: string[];
  events: Record<string, Column>;
  messages: Record<string, Column>;
  flows: Record<string, Column>;
  locks: Record<string, Column>;
  file_lanes: string[];
  io: Record<string, Column>;
  collectives: Record<string, Column>;
  waits: Record<string, Column>;
  path: Record<string, Column>;
  path_text: string[];
  matrix_bytes: number[][];
  matrix_count: number[][];
  matrix_time: number[][];
  measure: "messages" | "bytes" | "time";
  histograms: { sizes: Histogram; durations: Histogram };
  summary: RankSummary[];
  losses: string[];
  duration: number;
  axis_end: number;
  dropped: number;
  expanded: boolean;
  panel: string;
  show_ranks: string;
  show_op: string;
  show_comm: string;
  show_tag: string;
  show_waits: boolean;
  show_path: boolean;
}

/** Counts per operation in bins between edges (Trace.histograms). */
export interface Histogram {
  edges: number[];
  counts: Record<string, number[]>;
}

/** One rank's row of Trace.summary. */
export interface RankSummary {
  rank: number;
  wall: number;
  mpi: number;
  waiting: number;
  messages_sent: number;
  messages_received: number;
  bytes_sent: number;
  bytes_received: number;
}
