// Eviction under a flood of keys: do victims partly (or fully) spent get calls back when the flood pushes
// them out of a full memory store, and how many calls of honest clients are denied that an exact store
// would admit?
//
//   node --import tsx packages/floodgate/bench/eviction-flood.ts
//
// Defaults are issue 26's full-size attack, cost-1 calls only: a store of 100,000 keys; 100 victims at
// VICTIM_USED (3) of `fixedWindow({ limit: 5, windowMs: 600_000 })`; then 500,000 flood keys with
// FLOOD_CALLS (4) calls each, under the same policy; then 10 calls per victim in the same window (an exact
// store admits 5 − VICTIM_USED each: 200). Meanwhile 1,000 honest clients make 4 calls each, spread over
// the flood: half made their first call before it (held, like the victims), half are new during it. An
// exact limiter fed the honest calls alone gives the exact answers (a key's decisions depend on its own
// calls only): `false denials` are honest calls it admits and the flooded store denies; `over-admissions`
// the reverse. Environment: FLOOD_MAX_KEYS, FLOOD_KEYS, FLOOD_CALLS, VICTIM_USED, SUMMARY_CELLS.
import { createLimiter, fixedWindow, memoryStore } from '../src/index.js';
import { manualClock } from '../src/testing/index.js';

const MAX_KEYS = Number(process.env.FLOOD_MAX_KEYS ?? 100_000);
const FLOOD = Number(process.env.FLOOD_KEYS ?? 500_000);
const FLOOD_CALLS = Number(process.env.FLOOD_CALLS ?? 4);
const VICTIM_USED = Number(process.env.VICTIM_USED ?? 3);
const SUMMARY_CELLS = process.env.SUMMARY_CELLS === undefined ? undefined : Number(process.env.SUMMARY_CELLS);
const VICTIMS = 100;
const HONEST = 1000;
const HONEST_CALLS = 4;
const LIMIT = 5;
const CALLS_AFTER = 10;
const policy = fixedWindow({ limit: LIMIT, windowMs: 600_000 });

const clock = manualClock();
// Start on a window boundary, so that the whole run (a few simulated seconds) is in one window.
clock.set(Math.ceil(clock.nowMs() / 600_000) * 600_000);
const options: { maxKeys: number; summaryCells?: number } = { maxKeys: MAX_KEYS };
if (SUMMARY_CELLS !== undefined) options.summaryCells = SUMMARY_CELLS;
const store = memoryStore(options);
const limiter = createLimiter({ store, clock, policies: [policy] });
const exact = createLimiter({ store: memoryStore({ maxKeys: 10 * HONEST }), clock, policies: [policy] });

let falseDenials = 0;
let overAdmissions = 0;
let honestCalls = 0;
function honest(key: string): void {
  const got = limiter.limitSync(key).allowed;
  const want = exact.limitSync(key).allowed;
  honestCalls++;
  if (want && !got) falseDenials++;
  if (got && !want) overAdmissions++;
}

for (let v = 0; v < VICTIMS; v++) for (let i = 0; i < VICTIM_USED; i++) limiter.limitSync(`victim-${v}`);
// The established half of the honest clients make their first call before the flood.
for (let h = 0; h < HONEST / 2; h++) honest(`honest-${h}`);
const pending: string[] = [];
for (let h = 0; h < HONEST; h++)
  for (let i = h < HONEST / 2 ? 1 : 0; i < HONEST_CALLS; i++) pending.push(`honest-${h}`);
const every = Math.max(1, Math.floor(FLOOD / pending.length));
const start = performance.now();
let next = 0;
for (let i = 0; i < FLOOD; i++) {
  const key = `flood-${i}`;
  for (let c = 0; c < FLOOD_CALLS; c++) limiter.limitSync(key);
  if (i % every === 0 && next < pending.length) honest(pending[next++] as string);
  if ((i & 1023) === 0) clock.advance(1);
}
while (next < pending.length) honest(pending[next++] as string);
const seconds = (performance.now() - start) / 1000;
let more = 0;
for (let v = 0; v < VICTIMS; v++) {
  for (let i = 0; i < CALLS_AFTER; i++) if (limiter.limitSync(`victim-${v}`).allowed) more++;
}
const counters = store as unknown as Record<string, number | undefined>;
console.log(
  `maxKeys ${MAX_KEYS}, summaryCells ${counters.summaryCells ?? '-'} (${((counters.summaryBytes ?? 0) / 2 ** 20).toFixed(1)} MiB), ` +
    `${VICTIMS} victims at ${VICTIM_USED} of ${LIMIT}, ${FLOOD} flood keys × ${FLOOD_CALLS} calls: ` +
    `victims got ${more} more of ${VICTIMS * CALLS_AFTER} calls (exact: ${VICTIMS * (LIMIT - VICTIM_USED)}); ` +
    `honest calls ${honestCalls}: ${falseDenials} false denials (${((100 * falseDenials) / honestCalls).toFixed(1)}%), ` +
    `${overAdmissions} over-admissions; size ${store.size}, forcedEvictions ${store.forcedEvictions}; ` +
    `${Math.round((FLOOD * FLOOD_CALLS) / seconds)} flood calls/s`,
);
