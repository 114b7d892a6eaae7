// Runs every algorithm through the same scenarios on a manual clock and prints the tables of
// docs/algorithms.md: a burst and a window boundary, a client that never stops trying, an attacker at the
// top of the hour, the state kept per key, the emission interval, costs, the penalty box and several
// policies at once. Every number in the guide comes from this script.
//
//   npm run build && npx tsx packages/floodgate/examples/compare-algorithms.ts           # print the tables
//   npm run build && npx tsx packages/floodgate/examples/compare-algorithms.ts --write   # also update the guide
import { readFileSync, writeFileSync } from 'node:fs';
import {
  createLimiter,
  type Decision,
  fixedWindow,
  gcra,
  type Limiter,
  leakyBucket,
  memoryStore,
  type Policy,
  slidingLog,
  slidingWindow,
  tokenBucket,
} from 'floodgate';
import { ALGORITHMS, compilePolicy } from 'floodgate/model';
import { type ManualClock, manualClock, modelStore, seededRandom } from 'floodgate/testing';

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
/** 10:00:00.000 UTC on 2030-01-01: every scenario starts at a round hour, so clock windows are easy to see. */
const TEN_O_CLOCK = Date.UTC(2030, 0, 1, 10);

interface Entry {
  label: string;
  policy: Policy;
}

/**
 * The same budget, "`limit` per `windowMs`", written for each algorithm: the buckets hold `limit` and
 * refill it over `windowMs`, so every row admits `limit` at once from an untouched key.
 */
function family(limit: number, windowMs: number): Entry[] {
  const interval = windowMs / limit;
  const leak = (limit * SECOND) / windowMs;
  return [
    { label: 'GCRA', policy: gcra({ limit, periodMs: windowMs }) },
    { label: 'GCRA, burst 1', policy: gcra({ limit, periodMs: windowMs, burst: 1 }) },
    { label: 'GCRA, blockMs = window', policy: gcra({ limit, periodMs: windowMs, blockMs: windowMs }) },
    {
      label: 'token bucket, continuous',
      policy: tokenBucket({ capacity: limit, refillAmount: 1, refillIntervalMs: interval }),
    },
    {
      label: 'token bucket, interval',
      policy: tokenBucket({ capacity: limit, refillAmount: limit, refillIntervalMs: windowMs, refill: 'interval' }),
    },
    { label: 'leaky bucket, meter', policy: leakyBucket({ capacity: limit, leakPerSecond: leak }) },
    { label: 'leaky bucket, queue', policy: leakyBucket({ capacity: limit, leakPerSecond: leak, mode: 'queue' }) },
    { label: 'fixed window, clock', policy: fixedWindow({ limit, windowMs }) },
    { label: 'fixed window, first request', policy: fixedWindow({ limit, windowMs, align: 'first-request' }) },
    { label: 'sliding window', policy: slidingWindow({ limit, windowMs }) },
    { label: 'sliding window, 10 buckets', policy: slidingWindow({ limit, windowMs, precisionMs: windowMs / 10 }) },
    { label: 'sliding log', policy: slidingLog({ limit, windowMs }) },
    { label: 'sliding log, minGap 1 s', policy: slidingLog({ limit, windowMs, minGapMs: SECOND }) },
    { label: 'sliding log, countDenied', policy: slidingLog({ limit, windowMs, countDenied: true }) },
  ];
}

// ---------------------------------------------------------------------------------------------------------
// Small helpers: a limiter per policy on the default memory store, and markdown output.

function limiterFor(policy: Policy, clock: ManualClock): Limiter {
  return createLimiter({ policies: [policy], clock });
}

/** Sends `n` calls at the current instant; returns the decisions. */
function burst(limiter: Limiter, key: string, n: number, cost = 1): Decision[] {
  const decisions: Decision[] = [];
  for (let i = 0; i < n; i++) decisions.push(limiter.limitSync(key, { cost }));
  return decisions;
}

/** The most events whose sorted times (ms) fall in one half-open span `[at, at + span)`, and the first such `at`. */
function densestAt(times: readonly number[], span: number): { count: number; at: number } {
  let best = { count: 0, at: Number.NaN };
  let first = 0;
  for (let last = 0; last < times.length; last++) {
    while ((times[last] as number) - (times[first] as number) >= span) first++;
    if (last - first + 1 > best.count) best = { count: last - first + 1, at: times[first] as number };
  }
  return best;
}

function densest(times: readonly number[], span: number): number {
  return densestAt(times, span).count;
}

function clockTime(ms: number): string {
  return new Date(ms).toISOString().slice(11, 23);
}

function formatNumber(n: number): string {
  if (n === Number.POSITIVE_INFINITY) return 'Infinity';
  if (n > 0 && n < 1 && Number.isInteger(1 / n)) return `1 / ${1 / n}`;
  // Digits grouped as in source code (60_000), so the tables read like the policies.
  return Number.isInteger(n) && Math.abs(n) >= 10_000 ? String(n).replace(/\B(?=(\d{3})+$)/g, '_') : String(n);
}

/** The policy as the factory call that builds it, options at their defaults left out. */
function source(policy: Policy): string {
  const defaults: Record<string, unknown> = { blockMs: 0, refill: 'continuous', mode: 'meter', align: 'clock' };
  if (policy.algorithm === 'gcra') defaults.burst = policy.limit;
  if (policy.algorithm === 'sliding-log') Object.assign(defaults, { minGapMs: 0, countDenied: false });
  if (policy.algorithm === 'fixed-window') defaults.countDenied = false;
  const factory = ALGORITHMS[policy.algorithm].factory;
  const { blockMs, ...rest } = policy;
  const fields = Object.entries({ ...rest, blockMs })
    .filter(([field, value]) => field !== 'algorithm' && field !== 'name' && defaults[field] !== value)
    .map(([field, value]) => {
      const text = typeof value === 'number' ? formatNumber(value) : typeof value === 'string' ? `'${value}'` : value;
      return `${field}: ${text}`;
    });
  return `${factory}({ ${fields.join(', ')} })`;
}

const sections: { id: string; lines: string[] }[] = [];

/** Adds a markdown table, laid out as the formatter lays it out (padded columns, numbers right-aligned). */
function table(id: string, header: string[], rows: (string | number)[][]): void {
  const cells = [header, ...rows.map((row) => row.map((v) => (typeof v === 'number' ? formatNumber(v) : v)))];
  const length = (text: string) => [...text].length;
  const widths = header.map((_, i) => Math.max(3, ...cells.map((row) => length(row[i] ?? ''))));
  const pad = (text: string, i: number) => {
    const fill = ' '.repeat((widths[i] as number) - length(text));
    return i === 0 ? text + fill : fill + text;
  };
  const line = (row: string[]) => `| ${row.map(pad).join(' | ')} |`;
  const rule = widths.map((w, i) => (i === 0 ? '-'.repeat(w) : `${'-'.repeat(w - 1)}:`));
  const lines = [
    `<!-- compare-algorithms:${id} -->`,
    line(cells[0] as string[]),
    `| ${rule.join(' | ')} |`,
    ...cells.slice(1).map(line),
    `<!-- /compare-algorithms:${id} -->`,
  ];
  sections.push({ id, lines });
}

// ---------------------------------------------------------------------------------------------------------
// 1. The policies, and what each compiles to.

const perMinute = family(10, MINUTE);
table(
  'policies',
  ['label', 'policy (10 per minute)', 'kind', 'limit', 'a', 'b', 'c'],
  perMinute.map(({ label, policy }) => {
    const c = compilePolicy(policy);
    return [label, `\`${source(policy)}\``, c.kind, c.limit, c.a, c.b, c.c];
  }),
);

// ---------------------------------------------------------------------------------------------------------
// 2. A burst, then the next burst at a window boundary. 15 calls at 10:00:30 on an untouched key, 15 more
// at 10:01:00, when every clock-aligned minute window starts afresh.

{
  const rows: (string | number)[][] = [];
  for (const { label, policy } of perMinute) {
    const clock = manualClock({ startMs: TEN_O_CLOCK + 30 * SECOND });
    const limiter = limiterFor(policy, clock);
    const first = burst(limiter, 'client', 15);
    const admitted = first.filter((d) => d.allowed);
    const lastAdmitted = admitted.at(-1) as Decision;
    const denied = first.find((d) => !d.allowed) as Decision;
    clock.set(TEN_O_CLOCK + MINUTE);
    const second = burst(limiter, 'client', 15).filter((d) => d.allowed).length;
    rows.push([
      label,
      admitted.length,
      lastAdmitted.remaining,
      lastAdmitted.resetAfterMs,
      lastAdmitted.delayMs ?? 0,
      denied.retryAfterMs,
      denied.resetAfterMs,
      denied.reason ?? '',
      second,
    ]);
  }
  table(
    'burst',
    [
      'label',
      'admitted of 15 at 10:00:30',
      'last admitted: remaining',
      'resetAfterMs',
      'delayMs',
      'first denied: retryAfterMs',
      'resetAfterMs',
      'reason',
      'admitted of 15 at 10:01:00',
    ],
    rows,
  );
}

// ---------------------------------------------------------------------------------------------------------
// 3. A client that never stops: one call every 100 ms for 10 minutes from 10:00:30. Spans are measured on
// the time each admitted call may proceed (now + delayMs), which is what the protected service sees.

{
  const rows: (string | number)[][] = [];
  for (const { label, policy } of perMinute) {
    const clock = manualClock({ startMs: TEN_O_CLOCK + 30 * SECOND });
    const limiter = limiterFor(policy, clock);
    const proceeds: number[] = [];
    for (let attempt = 0; attempt < 6000; attempt++) {
      const d = limiter.limitSync('client');
      if (d.allowed) proceeds.push(clock.nowMs() + (d.delayMs ?? 0));
      clock.advance(100);
    }
    proceeds.sort((x, y) => x - y);
    rows.push([label, proceeds.length, densest(proceeds, MINUTE), densest(proceeds, SECOND)]);
  }
  table('greedy', ['label', 'admitted of 6000 in 10 min', 'most in any 60 s', 'most in any 1 s'], rows);
}

// ---------------------------------------------------------------------------------------------------------
// 4. The top of the hour, with "100 per hour". One attacker: 150 calls at 10:59:59.000 on an untouched key,
// 150 more at 11:00:00.000. A fleet: 1,000 well-behaved clients, each starting at a random moment between
// 10:00 and 11:00, calling as fast as they are admitted and, when denied, coming back exactly when told
// (`retryAfterMs`), until 12:00. Each client has its own clock; they share one store.

{
  const perHour = family(100, HOUR);
  const random = seededRandom(2030);
  const starts = Array.from({ length: 1000 }, () => TEN_O_CLOCK + Math.floor(random() * HOUR));
  const rows: (string | number)[][] = [];
  for (const { label, policy } of perHour) {
    const clock = manualClock({ startMs: TEN_O_CLOCK + HOUR - SECOND });
    const limiter = limiterFor(policy, clock);
    const before = burst(limiter, 'attacker', 150);
    const told = (before.find((d) => !d.allowed) as Decision).retryAfterMs;
    clock.set(TEN_O_CLOCK + HOUR);
    const after = burst(limiter, 'attacker', 150).filter((d) => d.allowed).length;

    const store = memoryStore();
    const proceeds: number[] = [];
    starts.forEach((start, client) => {
      const own = manualClock({ startMs: start });
      const fleet = createLimiter({ store, policies: [policy], clock: own });
      while (own.nowMs() < TEN_O_CLOCK + 2 * HOUR) {
        const d = fleet.limitSync(`client-${client}`);
        if (d.allowed) proceeds.push(own.nowMs() + (d.delayMs ?? 0));
        else own.advance(Math.max(1, d.retryAfterMs));
      }
    });
    proceeds.sort((x, y) => x - y);
    const topSecond = proceeds.filter((t) => t >= TEN_O_CLOCK + HOUR && t < TEN_O_CLOCK + HOUR + SECOND).length;
    const busiest = densestAt(proceeds, SECOND);
    rows.push([
      label,
      before.filter((d) => d.allowed).length,
      told,
      after,
      busiest.count,
      clockTime(busiest.at),
      topSecond,
    ]);
  }
  table(
    'top-of-hour',
    [
      'label (100 per hour)',
      'attacker: admitted at 10:59:59',
      'retryAfterMs told',
      'admitted at 11:00:00',
      'fleet: busiest second',
      'from',
      'fleet: in 11:00:00–11:00:01',
    ],
    rows,
  );
}

// ---------------------------------------------------------------------------------------------------------
// 5. State per key, read from the reference store (the model's own state, which every store keeps): after
// 10 calls one second apart, and the largest state seen while a client calls every 100 ms for 3 minutes.

{
  const rows: (string | number)[][] = [];
  for (const { label, policy } of perMinute) {
    const store = modelStore();
    const clock = manualClock({ startMs: TEN_O_CLOCK });
    const limiter = createLimiter({ store, policies: [policy], clock });
    const size = () => Math.max(0, ...[...store.states.values()].map((s) => s.length));
    for (let i = 0; i < 10; i++) {
      await limiter.limit('client');
      clock.advance(SECOND);
    }
    const afterTen = size();
    let largest = afterTen;
    for (let attempt = 0; attempt < 1800; attempt++) {
      await limiter.limit('client');
      largest = Math.max(largest, size());
      clock.advance(100);
    }
    rows.push([label, afterTen, afterTen * 8, largest, largest * 8]);
  }
  table('state', ['label', 'numbers after 10 calls', 'bytes', 'largest, calling every 100 ms', 'bytes'], rows);
}

// ---------------------------------------------------------------------------------------------------------
// 6. The emission interval in whole microseconds, and what rounding it up costs: a client calling every
// millisecond for one minute from an untouched key, against exact arithmetic (burst + 60 s × rate).

{
  const rows: (string | number)[][] = [];
  const meters = [
    gcra({ limit: 10, periodMs: MINUTE }),
    gcra({ limit: 3, periodMs: SECOND }),
    gcra({ limit: 7, periodMs: SECOND, burst: 1 }),
    tokenBucket({ capacity: 5, refillAmount: 3, refillIntervalMs: SECOND }),
    leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }),
  ];
  for (const policy of meters) {
    const c = compilePolicy(policy);
    const clock = manualClock({ startMs: TEN_O_CLOCK });
    const limiter = limiterFor(policy, clock);
    let admitted = 0;
    if (c.a <= MINUTE * 1000) {
      for (let ms = 0; ms <= MINUTE; ms++) {
        if (limiter.limitSync('client').allowed) admitted++;
        clock.advance(1);
      }
    }
    // Exact arithmetic: the burst at once, then one more every period / limit, up to and including 60 s.
    const p = c.policy;
    const exact =
      p.algorithm === 'gcra'
        ? p.burst + Math.floor((MINUTE * p.limit) / p.periodMs)
        : p.algorithm === 'token-bucket'
          ? p.capacity + Math.floor((MINUTE * p.refillAmount) / p.refillIntervalMs)
          : '—';
    rows.push([`\`${source(policy)}\``, c.a, c.b, c.a <= MINUTE * 1000 ? admitted : '—', exact]);
  }
  table(
    'interval',
    ['policy', 'T (a), µs', 'τ (b), µs', 'admitted, calling every ms from 0 to 60 s', 'burst + 60 s × rate'],
    rows,
  );
}

// ---------------------------------------------------------------------------------------------------------
// 7. GCRA, the continuous token bucket and the drip-free leaky bucket are one machine: the same random
// calls (costs 0 to 3, fractions included, gaps of 0 to 8 s) through all three give the same decisions.

{
  const policies = [
    gcra({ limit: 10, periodMs: MINUTE }),
    tokenBucket({ capacity: 10, refillAmount: 1, refillIntervalMs: 6 * SECOND }),
    leakyBucket({ capacity: 10, leakPerSecond: 1 / 6 }),
  ];
  const clock = manualClock({ startMs: TEN_O_CLOCK });
  const limiters = policies.map((p) => limiterFor(p, clock));
  const random = seededRandom(7);
  const costs = [0, 0.5, 1, 1, 1, 2, 2.5, 3];
  let same = 0;
  let admitted = 0;
  const calls = 10_000;
  for (let i = 0; i < calls; i++) {
    clock.advance(Math.floor(random() * 8000));
    const cost = costs[Math.floor(random() * costs.length)] as number;
    const [a, ...others] = limiters.map((l) => l.limitSync('client', { cost }));
    const strip = (d: Decision | undefined) => JSON.stringify({ ...d, policy: '', policies: [] });
    if (others.every((d) => strip(d) === strip(a))) same++;
    if (a?.allowed) admitted++;
  }
  table(
    'one-machine',
    ['policies', 'random calls', 'admitted', 'identical decisions'],
    [[policies.map((p) => `\`${source(p)}\``).join('<br>'), calls, admitted, same]],
  );
}

// ---------------------------------------------------------------------------------------------------------
// 8. Costs on a leaky bucket of 10 that leaks 1 per second: a check, fractions, a cost that can never fit.

{
  const clock = manualClock({ startMs: TEN_O_CLOCK });
  const limiter = limiterFor(leakyBucket({ capacity: 10, leakPerSecond: 1 }), clock);
  const rows: (string | number)[][] = [];
  const step = (what: string, call: () => Decision) => {
    const d = call();
    const after = limiter.statusSync('client');
    rows.push([what, String(d.allowed), d.reason ?? '', d.remaining, d.retryAfterMs, after.resetAfterMs]);
  };
  step('limit, cost 2.5', () => limiter.limitSync('client', { cost: 2.5 }));
  step('limit, cost 0 (a check)', () => limiter.limitSync('client', { cost: 0 }));
  step('check, cost 7.5', () => limiter.checkSync('client', { cost: 7.5 }));
  step('limit, cost 7.5', () => limiter.limitSync('client', { cost: 7.5 }));
  step('limit, cost 0.25', () => limiter.limitSync('client', { cost: 0.25 }));
  step('limit, cost 11', () => limiter.limitSync('client', { cost: 11 }));
  clock.advance(250);
  step('250 ms later: limit, cost 0.25', () => limiter.limitSync('client', { cost: 0.25 }));
  table(
    'costs',
    ['call (leakyBucket capacity 10, leak 1/s)', 'allowed', 'reason', 'remaining', 'retryAfterMs', 'then resetAfterMs'],
    rows,
  );
}

// ---------------------------------------------------------------------------------------------------------
// 8b. Decimal amounts that add up to exactly the limit, spent one after the other on an untouched key. The
// meters charge whole µs and fit them exactly; the windows add doubles, whose running total may land a hair
// above the limit; whole units (cents) are exact everywhere.

{
  const THIRTY_DAYS = 30 * 24 * HOUR;
  const a = [184.58, 207.21, 226.7, 322, 59.51];
  const b = [52.61, 91.68, 58.74, 186.38, 301, 272.39, 37.2];
  const cases: [Policy, number[]][] = [
    [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }), a],
    [leakyBucket({ capacity: 1000, leakPerSecond: 1000 / 2_592_000 }), b],
    [leakyBucket({ capacity: 100_000, leakPerSecond: 100_000 / 2_592_000 }), a.map((x) => Math.round(x * 100))],
    [fixedWindow({ limit: 1000, windowMs: THIRTY_DAYS, align: 'first-request' }), b],
    [slidingLog({ limit: 1000, windowMs: THIRTY_DAYS }), b],
    [fixedWindow({ limit: 100_000, windowMs: THIRTY_DAYS, align: 'first-request' }), b.map((x) => Math.round(x * 100))],
  ];
  const rows: (string | number)[][] = [];
  for (const [policy, amounts] of cases) {
    const clock = manualClock({ startMs: TEN_O_CLOCK });
    const limiter = limiterFor(policy, clock);
    const decisions = amounts.map((cost) => limiter.limitSync('account', { cost }));
    const last = decisions.at(-1) as Decision;
    rows.push([
      `\`${source(policy)}\``,
      amounts.join(' + '),
      decisions.filter((d) => d.allowed).length,
      String(last.allowed),
      last.retryAfterMs,
    ]);
  }
  table('decimal-costs', ['policy', 'costs, in order', 'admitted', 'last admitted', 'last: retryAfterMs'], rows);
}

// ---------------------------------------------------------------------------------------------------------
// 9. The penalty box: 5 per minute, a client calling every 10 s, with and without `blockMs` and `countDenied`.

{
  const variants: Entry[] = [
    { label: 'sliding log', policy: slidingLog({ limit: 5, windowMs: MINUTE }) },
    { label: 'sliding log, countDenied', policy: slidingLog({ limit: 5, windowMs: MINUTE, countDenied: true }) },
    { label: 'sliding log, blockMs 5 min', policy: slidingLog({ limit: 5, windowMs: MINUTE, blockMs: 5 * MINUTE }) },
    { label: 'GCRA, blockMs 5 min', policy: gcra({ limit: 5, periodMs: MINUTE, blockMs: 5 * MINUTE }) },
  ];
  const header = ['label'];
  const rows: (string | number)[][] = [];
  for (const { label, policy } of variants) {
    const clock = manualClock({ startMs: TEN_O_CLOCK });
    const limiter = limiterFor(policy, clock);
    const marks: string[] = [];
    for (let t = 0; t <= 8 * MINUTE; t += 10 * SECOND) {
      if (rows.length === 0 && t % MINUTE === 0) header.push(`${t / MINUTE} min`);
      clock.set(TEN_O_CLOCK + t);
      const d = limiter.limitSync('client');
      marks.push(d.allowed ? '✓' : d.reason === 'blocked' ? 'B' : '✗');
    }
    // One cell per minute: what its six calls got.
    const perMinuteMarks: string[] = [];
    for (let m = 0; m < marks.length; m += 6) perMinuteMarks.push(marks.slice(m, m + 6).join(''));
    rows.push([label, ...perMinuteMarks, marks.filter((m) => m === '✓').length]);
  }
  header.push('admitted');
  table('penalty', header, rows);
}

// ---------------------------------------------------------------------------------------------------------
// 10. Several policies, all-or-nothing: 100 per minute and 10 per second on one key, 25 calls at once, then
// one call per 50 ms for a minute. A call denied by one policy consumes nothing from the other.

{
  const clock = manualClock({ startMs: TEN_O_CLOCK });
  const limiter = createLimiter({
    policies: [
      gcra({ name: 'per-minute', limit: 100, periodMs: MINUTE }),
      gcra({ name: 'per-second', limit: 10, periodMs: SECOND }),
    ],
    clock,
  });
  const rows: (string | number)[][] = [];
  const report = (what: string, decisions: Decision[]) => {
    const status = limiter.statusSync('client');
    const denied = decisions.filter((d) => !d.allowed);
    const binding = [...new Set(denied.map((d) => d.policy))].join(', ');
    const left = status.policies.map((p) => `${p.policy} ${p.remaining}`).join(', ');
    rows.push([what, decisions.length - denied.length, denied.length, binding, left]);
  };
  report('25 calls at 10:00:00.000', burst(limiter, 'client', 25));
  const every50ms = (ms: number) => {
    const decisions: Decision[] = [];
    for (let i = 0; i < ms / 50; i++) {
      clock.advance(50);
      decisions.push(limiter.limitSync('client'));
    }
    return decisions;
  };
  report('then 1 call per 50 ms for 10 s', every50ms(10 * SECOND));
  report('then 1 call per 50 ms for 50 s more', every50ms(50 * SECOND));
  table('multi', ['calls', 'admitted', 'denied', 'denied by', 'remaining after (status)'], rows);
}

// ---------------------------------------------------------------------------------------------------------

const output = sections.map((s) => s.lines.join('\n')).join('\n\n');
console.log(output);

if (process.argv.includes('--write')) {
  const guide = new URL('../../../docs/algorithms.md', import.meta.url);
  let text = readFileSync(guide, 'utf8');
  for (const { id, lines } of sections) {
    const begin = text.indexOf(lines[0] as string);
    const end = text.indexOf(lines.at(-1) as string);
    if (begin < 0 || end < begin) throw new Error(`docs/algorithms.md has no ${id} table to replace`);
    text = text.slice(0, begin) + lines.join('\n') + text.slice(end + (lines.at(-1) as string).length);
  }
  writeFileSync(guide, text);
  console.error(`updated ${guide.pathname}`);
}
