import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import type { BinnedCounts } from '../sim/bins.js';

/** Colours shared by the charts and the page (readable on light backgrounds, distinct for colour-blind eyes). */
export const COLORS = {
  admitted: '#1a9850',
  denied: '#d73027',
  level: '#2c7bb6',
  ceiling: '#555555',
  instant: '#f28e2b',
  boundary: 'rgba(0, 0, 0, 0.18)',
  blocked: 'rgba(215, 48, 39, 0.12)',
} as const;

/** Tick labels of a time axis in seconds. */
export function secondsTicks(_u: uPlot, values: number[]): string[] {
  return values.map((v) => `${Math.round(v * 1000) / 1000} s`);
}

/**
 * The data a chart plots, kept on its element (`element.plotted`), and the span of its x axis as last drawn
 * (`element.drawn`), so tests read back what is drawn.
 */
export type PlottedElement = HTMLElement & { plotted?: unknown; drawn?: { xMin: number; xMax: number } };

/**
 * A legend value for both states of the cursor: over the chart (`idx` a data index) and off it, where
 * uPlot would print `--`; `idle` says what stands there instead (a total, the latest value, the value at
 * the chosen instant).
 */
export function legendValue(
  hovered: (u: uPlot, idx: number) => string,
  idle: (u: uPlot) => string,
): (u: uPlot, raw: number, seriesIdx: number, idx: number | null) => string {
  return (u, _raw, _seriesIdx, idx) => (idx === null ? idle(u) : hovered(u, idx));
}

/** A number for a legend: at most three decimals, `–` for no value. */
export function legendNumber(value: number | null | undefined): string {
  return value === null || value === undefined || Number.isNaN(value) ? '–' : String(Math.round(value * 1000) / 1000);
}

/** What every chart of the page shares: a size that follows its box, the instant marker, x zoom sync. */
export interface Frame {
  plot: uPlot;
  /** Charts of one group share the cursor and the x zoom. */
  readonly group: string;
  /** Seconds of the chosen instant (drawn as a vertical line), or undefined. */
  instantS: number | undefined;
}

const frames = new Set<Frame>();
let syncing = false;

/** Charts in one group zoom together; `dblclick` resets every chart of the group. */
function syncZoom(self: uPlot, key: string): void {
  if (syncing || key !== 'x') return;
  syncing = true;
  const { min, max } = self.scales.x as { min: number; max: number };
  const group = [...frames].find((f) => f.plot === self)?.group;
  for (const frame of frames) {
    if (frame.plot !== self && frame.group === group) frame.plot.setScale('x', { min, max });
  }
  syncing = false;
}

function drawInstant(frame: Frame, u: uPlot): void {
  if (frame.instantS === undefined) return;
  const x = Math.round(u.valToPos(frame.instantS, 'x', true));
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = COLORS.instant;
  ctx.lineWidth = 2 * devicePixelRatio;
  ctx.beginPath();
  ctx.moveTo(x, u.bbox.top);
  ctx.lineTo(x, u.bbox.top + u.bbox.height);
  ctx.stroke();
  ctx.restore();
}

/** Draws dashed vertical lines at window boundaries (seconds), clipped to the plot. */
function drawBoundaries(u: uPlot, boundariesS: readonly number[]): void {
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = COLORS.boundary;
  ctx.setLineDash([4 * devicePixelRatio, 4 * devicePixelRatio]);
  ctx.lineWidth = devicePixelRatio;
  const { min, max } = u.scales.x as { min: number; max: number };
  for (const s of boundariesS) {
    if (s < min || s > max) continue;
    const x = Math.round(u.valToPos(s, 'x', true));
    ctx.beginPath();
    ctx.moveTo(x, u.bbox.top);
    ctx.lineTo(x, u.bbox.top + u.bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

/** Shades the spans where the key sits in the penalty box. */
function drawBlocked(u: uPlot, xs: readonly number[], blocked: readonly number[]): void {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = COLORS.blocked;
  let from: number | undefined;
  for (let i = 0; i <= xs.length; i++) {
    const on = i < xs.length && blocked[i] === 1;
    if (on && from === undefined) from = xs[i];
    if (!on && from !== undefined) {
      const to = xs[Math.min(i, xs.length - 1)] as number;
      const left = u.valToPos(from, 'x', true);
      const right = u.valToPos(to, 'x', true);
      ctx.fillRect(left, u.bbox.top, Math.max(1, right - left), u.bbox.height);
      from = undefined;
    }
  }
  ctx.restore();
}

export function frameOf(
  group: string,
  element: PlottedElement,
  options: Omit<uPlot.Options, 'width' | 'height'>,
  height: number,
  extraDraw: (u: uPlot) => void,
  onPick?: (x: number) => void,
): Frame {
  const frame: Frame = { plot: undefined as unknown as uPlot, group, instantS: undefined };
  const width = Math.max(320, element.clientWidth);
  frame.plot = new uPlot(
    {
      ...options,
      width,
      height,
      cursor: { drag: { x: true, y: false }, sync: { key: group } },
      hooks: {
        setScale: [(u, key) => syncZoom(u, key)],
        // New data: the legend's values off the cursor (totals, latest values) follow it.
        setData: [(u) => u.setLegend({})],
        drawClear: [(u) => extraDraw(u)],
        draw: [
          (u) => {
            drawInstant(frame, u);
            const { min, max } = u.scales.x as { min: number; max: number };
            element.drawn = { xMin: min, xMax: max };
          },
        ],
      },
    },
    undefined,
    element,
  );
  frames.add(frame);
  if (onPick !== undefined) {
    // A click picks the instant under the cursor; a drag (a zoom) does not.
    let downX = 0;
    frame.plot.over.addEventListener('mousedown', (event) => {
      downX = event.clientX;
    });
    frame.plot.over.addEventListener('click', (event) => {
      const left = frame.plot.cursor.left;
      if (Math.abs(event.clientX - downX) > 3 || left === undefined || left < 0) return;
      onPick(frame.plot.posToVal(left, 'x'));
    });
  }
  new ResizeObserver(() => {
    const w = Math.max(320, element.clientWidth);
    if (w !== frame.plot.width) frame.plot.setSize({ width: w, height });
  }).observe(element);
  return frame;
}

/** A chart of admitted (green) and denied (red, stacked on top) requests per bin. */
export class CountsChart {
  private readonly frame: Frame;
  private boundariesS: readonly number[] = [];
  private totals = { admitted: 0, denied: 0 };

  constructor(
    private readonly element: PlottedElement,
    onPick?: (s: number) => void,
  ) {
    const bars = uPlot.paths.bars?.({ size: [0.92, 60], align: 1 });
    this.frame = frameOf(
      'simulator',
      element,
      {
        scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
        axes: [
          { values: secondsTicks, size: 30 },
          { label: 'requests per bin', size: 52 },
        ],
        legend: { live: true },
        series: [
          {
            label: 't (s)',
            value: legendValue(
              (u, i) => `${legendNumber(u.data[0][i])} s`,
              () => 'whole run',
            ),
          },
          {
            label: 'denied',
            fill: COLORS.denied,
            stroke: COLORS.denied,
            width: 0,
            ...(bars === undefined ? {} : { paths: bars }),
            points: { show: false },
            // Drawn as the total so that the admitted bars on top leave the denied part showing.
            value: legendValue(
              (u, i) => String(this.deniedAt(u, i)),
              () => String(this.totals.denied),
            ),
          },
          {
            label: 'admitted',
            fill: COLORS.admitted,
            stroke: COLORS.admitted,
            width: 0,
            ...(bars === undefined ? {} : { paths: bars }),
            points: { show: false },
            value: legendValue(
              (u, i) => String(u.data[2]?.[i] ?? 0),
              () => String(this.totals.admitted),
            ),
          },
        ],
      },
      190,
      (u) => drawBoundaries(u, this.boundariesS),
      onPick,
    );
  }

  private deniedAt(u: uPlot, i: number): number {
    return (u.data[1]?.[i] ?? 0) - (u.data[2]?.[i] ?? 0);
  }

  update(counts: BinnedCounts, boundariesS: readonly number[]): void {
    this.boundariesS = boundariesS;
    const total: (number | null)[] = counts.admitted.map((a, i) => a + (counts.denied[i] as number));
    const sum = (list: number[]) => list.reduce((a, b) => a + b, 0);
    this.totals = { admitted: sum(counts.admitted), denied: sum(counts.denied) };
    this.element.plotted = counts;
    // A bar is drawn from its bin's start; the x axis reaches the end of the last bin (one more x, with no
    // bar), or the last bin's requests would fall outside the plot.
    const endS = counts.startS.length * counts.binS;
    this.frame.plot.setData([
      [...counts.startS, endS],
      [...total, null],
      [...counts.admitted, null],
    ]);
  }

  set instant(s: number | undefined) {
    this.frame.instantS = s;
    this.frame.plot.redraw(false);
  }
}

/** What the state chart plots. */
export interface LevelData {
  /** Axis label. */
  readonly label: string;
  readonly ceiling: number;
  readonly ceilingLabel: string;
  readonly atS: number[];
  readonly level: number[];
  /** The level at denied calls, null elsewhere: red dots. */
  readonly denied: (number | null)[];
  readonly blocked: number[];
  readonly boundariesS: readonly number[];
}

/** A chart of one policy's state over time (bucket level, TAT, window counts) against its ceiling. */
export class LevelChart {
  private readonly frame: Frame;
  private data: LevelData | undefined;
  /** The chosen instant, kept here too: uPlot asks for legend values while the frame is being built. */
  private instantS: number | undefined;

  constructor(
    private readonly element: PlottedElement,
    onPick?: (s: number) => void,
  ) {
    this.frame = frameOf(
      'simulator',
      element,
      {
        scales: {
          x: { time: false },
          y: { range: (_u, min, max) => [Math.min(0, min), Math.max(this.data?.ceiling ?? 1, max) * 1.12 || 1] },
        },
        axes: [
          { values: secondsTicks, size: 30 },
          { label: 'state', size: 52 },
        ],
        series: [
          {
            label: 't (s)',
            value: legendValue(
              (u, i) => `${legendNumber(u.data[0][i])} s`,
              (u) => `${legendNumber(u.data[0][this.idleIndex(u)])} s`,
            ),
          },
          {
            label: 'level',
            stroke: COLORS.level,
            width: 2,
            points: { show: false },
            value: legendValue(
              (u, i) => legendNumber(u.data[1]?.[i]),
              (u) => legendNumber(u.data[1]?.[this.idleIndex(u)]),
            ),
          },
          {
            label: 'ceiling',
            stroke: COLORS.ceiling,
            width: 1,
            dash: [6, 4],
            points: { show: false },
            value: legendValue(
              (u, i) => legendNumber(u.data[2]?.[i]),
              () => legendNumber(this.data?.ceiling),
            ),
          },
          {
            label: 'denied',
            stroke: COLORS.denied,
            width: 0,
            paths: () => null,
            points: { show: true, size: 6, fill: COLORS.denied, stroke: COLORS.denied },
            // A red dot marks a denied call; off the cursor, how many the run has.
            value: legendValue(
              (u, i) => legendNumber(u.data[3]?.[i]),
              () => `${this.data?.denied.filter((d) => d !== null).length ?? 0} in all`,
            ),
          },
        ],
      },
      190,
      (u) => {
        if (this.data === undefined) return;
        drawBlocked(u, this.data.atS, this.data.blocked);
        drawBoundaries(u, this.data.boundariesS);
      },
      onPick,
    );
  }

  /** The point the legend shows off the cursor: the last at or before the chosen instant, else the last. */
  private idleIndex(u: uPlot): number {
    const xs = u.data[0];
    const instant = this.instantS;
    if (instant === undefined) return xs.length - 1;
    let i = xs.length - 1;
    while (i > 0 && (xs[i] as number) > instant) i--;
    return i;
  }

  update(data: LevelData): void {
    this.data = data;
    this.element.plotted = data;
    const plot = this.frame.plot;
    const axis = plot.axes[1];
    if (axis !== undefined) axis.label = data.label;
    const ceiling = plot.series[2];
    if (ceiling !== undefined) ceiling.label = data.ceilingLabel;
    const ceilingLine = data.atS.map(() => data.ceiling);
    plot.setData([data.atS, data.level, ceilingLine, data.denied]);
    // Labels changed: rebuild the legend's text and the axes.
    const labels = plot.root.querySelectorAll('.u-legend .u-series .u-label');
    if (labels[2] !== undefined) labels[2].textContent = data.ceilingLabel;
    plot.redraw(true, true);
  }

  set instant(s: number | undefined) {
    this.instantS = s;
    this.frame.instantS = s;
    this.frame.plot.redraw(false);
    this.frame.plot.setLegend({});
  }
}
