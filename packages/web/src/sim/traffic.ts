import { seededRandom } from 'floodgate/testing';

/**
 * Traffic patterns of the simulator: each turns into a sorted list of arrival times, in whole
 * microseconds after the start of the run, the unit the model works in (no float drift between the
 * page, the tests and the library).
 */
export type TrafficPattern =
  /** One request every `1 / ratePerSecond` seconds. */
  | { kind: 'steady'; ratePerSecond: number }
  /** `size` requests at once, every `everyMs`, starting at 0. */
  | { kind: 'bursts'; size: number; everyMs: number }
  /** An attacker: `ratePerSecond` for `onMs`, then silent for `offMs`, over and over. */
  | { kind: 'on-off'; ratePerSecond: number; onMs: number; offMs: number }
  /**
   * A stampede at each clock boundary of `windowMs` (every client's window resets at the top of the
   * minute): `size` requests spread over the `spreadMs` before the boundary and `size` over the
   * `spreadMs` after it. The first boundary is the first one after the start.
   */
  | { kind: 'stampede'; size: number; windowMs: number; spreadMs: number }
  /** Arrivals of a Poisson process of mean `ratePerSecond`, reproducible from `seed`. */
  | { kind: 'random'; ratePerSecond: number; seed: number };

export type TrafficKind = TrafficPattern['kind'];

/** Traffic over a run: a pattern, how long it lasts and what each request costs. */
export interface Traffic {
  readonly pattern: TrafficPattern;
  /** Length of the run, ms. */
  readonly durationMs: number;
  /** Cost of every request. @default 1 */
  readonly cost?: number;
}

/** Most arrivals a run may have: keeps a slider drag responsive and the page's memory small. */
export const MAX_ARRIVALS = 50_000;

/** The arrival times of a run, µs after its start, sorted; `startUs` (epoch µs) places clock boundaries. */
export function arrivals(traffic: Traffic, startUs: number): number[] {
  const durationUs = Math.round(traffic.durationMs * 1000);
  const pattern = traffic.pattern;
  const out: number[] = [];
  const push = (atUs: number) => {
    if (atUs >= 0 && atUs < durationUs) out.push(atUs);
  };
  switch (pattern.kind) {
    case 'steady': {
      const gapUs = Math.max(1, Math.round(1e6 / pattern.ratePerSecond));
      for (let t = 0; t < durationUs && out.length < MAX_ARRIVALS; t += gapUs) push(t);
      break;
    }
    case 'bursts': {
      const everyUs = Math.max(1, Math.round(pattern.everyMs * 1000));
      for (let t = 0; t < durationUs && out.length < MAX_ARRIVALS; t += everyUs) {
        for (let i = 0; i < pattern.size; i++) push(t);
      }
      break;
    }
    case 'on-off': {
      const gapUs = Math.max(1, Math.round(1e6 / pattern.ratePerSecond));
      const onUs = Math.round(pattern.onMs * 1000);
      const cycleUs = onUs + Math.round(pattern.offMs * 1000);
      for (let start = 0; start < durationUs && out.length < MAX_ARRIVALS; start += Math.max(1, cycleUs)) {
        for (let t = start; t < start + onUs && out.length < MAX_ARRIVALS; t += gapUs) push(t);
      }
      break;
    }
    case 'stampede': {
      const windowUs = Math.max(1, Math.round(pattern.windowMs * 1000));
      const spreadUs = Math.max(0, Math.round(pattern.spreadMs * 1000));
      // The first clock boundary after the start, as the model's clock-aligned windows see it.
      let boundary = startUs - (startUs % windowUs) + windowUs - startUs;
      for (; boundary - spreadUs < durationUs && out.length < MAX_ARRIVALS; boundary += windowUs) {
        for (let i = 0; i < pattern.size; i++) push(boundary - spreadUs + spread(i, pattern.size, spreadUs));
        for (let i = 0; i < pattern.size; i++) push(boundary + spread(i, pattern.size, spreadUs));
      }
      break;
    }
    case 'random': {
      const random = seededRandom(pattern.seed);
      const meanGapUs = 1e6 / pattern.ratePerSecond;
      for (let t = 0; out.length < MAX_ARRIVALS; ) {
        // Exponential gaps: a Poisson process; 1 − u keeps the logarithm finite.
        t += Math.max(1, Math.round(-Math.log(1 - random()) * meanGapUs));
        if (t >= durationUs) break;
        push(t);
      }
      break;
    }
  }
  return out.sort((a, b) => a - b);
}

/** The offset of the `i`-th of `n` requests spread evenly over `spreadUs` (all at 0 when it is 0). */
function spread(i: number, n: number, spreadUs: number): number {
  return n <= 1 ? 0 : Math.floor((i * spreadUs) / n);
}
