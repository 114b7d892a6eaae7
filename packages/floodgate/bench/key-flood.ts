// A flood of fresh keys against keys at their limit, on the memory store: how many more calls do the keys
// at their limit get admitted in the same window once the flood has gone through?
//
//   npm run build && node --import tsx packages/floodgate/bench/key-flood.ts
//
// Defaults are the full-size attack: a store capped at 100,000 keys, 100 victims at the limit of a
// fixed window of 5 per minute, then 2,000,000 fresh keys under a policy that expires later (an hour),
// then 10 calls per victim in the same minute. An exact store admits 0 of those 1,000 calls.
// FLOOD_MAX_KEYS, FLOOD_KEYS, FLOOD_VICTIMS and FLOOD_WHEN_FULL (evict | refuse) change the figures.
import { createLimiter, fixedWindow, memoryStore } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const MAX_KEYS = Number(process.env.FLOOD_MAX_KEYS ?? 100_000);
const FLOOD = Number(process.env.FLOOD_KEYS ?? 2_000_000);
const VICTIMS = Number(process.env.FLOOD_VICTIMS ?? 100);
const WHEN_FULL = process.env.FLOOD_WHEN_FULL ?? 'evict';
const LIMIT = 5;
const CALLS_AFTER = 10;

const clock = manualClock();
const options: Record<string, unknown> = { maxKeys: MAX_KEYS };
if (WHEN_FULL !== 'evict') options.whenFull = WHEN_FULL;
const store = memoryStore(options as { maxKeys: number });
const victims = createLimiter({
  store,
  clock,
  prefix: 'victim',
  policies: [fixedWindow({ limit: LIMIT, windowMs: 60_000 })],
});
const flood = createLimiter({
  store,
  clock,
  prefix: 'flood',
  // Refusals answer per `failure`: 'open' admits them, which is what an attacker would see.
  failure: 'open',
  policies: [fixedWindow({ limit: 10, windowMs: 3_600_000 })],
});

for (let v = 0; v < VICTIMS; v++) {
  for (let i = 0; i < LIMIT; i++) victims.limitSync(`victim-${v}`);
}
const start = performance.now();
for (let i = 0; i < FLOOD; i++) {
  flood.limitSync(`fresh-${i}`);
  if ((i & 1023) === 0) clock.advance(1);
}
const seconds = (performance.now() - start) / 1000;
let admitted = 0;
for (let v = 0; v < VICTIMS; v++) {
  for (let i = 0; i < CALLS_AFTER; i++) if (victims.limitSync(`victim-${v}`).allowed) admitted++;
}
const counters = store as unknown as Record<string, number | undefined>;
console.log(
  `maxKeys ${MAX_KEYS}, ${VICTIMS} victims at ${LIMIT} per minute, ${FLOOD} fresh keys (${WHEN_FULL}): ` +
    `${admitted} more admissions of ${VICTIMS * CALLS_AFTER} calls; ${Math.round(FLOOD / seconds)} flood calls/s; ` +
    `size ${store.size}, forcedEvictions ${store.forcedEvictions}, refusedKeys ${counters.refusedKeys ?? '-'}, ` +
    `sweeps ${store.sweeps}`,
);
