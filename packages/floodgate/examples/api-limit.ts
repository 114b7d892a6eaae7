// A per-client API limit: 100 requests per minute, and never more than 10 at once (refilled at 10 per
// second). Two GCRA policies on one limiter, enforced all-or-nothing: a request denied by one policy
// consumes nothing from the other. A manual clock stands in for time; a service leaves `clock` out.
//
//   npm run build && npx tsx packages/floodgate/examples/api-limit.ts
import { createLimiter, type Decision, gcra } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const clock = manualClock({ startMs: Date.UTC(2030, 0, 1, 12) });
const limiter = createLimiter({
  prefix: 'api',
  clock,
  policies: [
    gcra({ name: 'per-minute', limit: 100, periodMs: 60_000 }),
    gcra({ name: 'per-second', limit: 10, periodMs: 1_000 }),
  ],
});

/** What an HTTP handler would send back: the status and the rate-limit headers. */
function respond(decision: Decision): { status: number; headers: Record<string, string> } {
  const headers: Record<string, string> = {
    'RateLimit-Policy': decision.policy,
    'RateLimit-Limit': String(decision.limit),
    'RateLimit-Remaining': String(decision.remaining),
    'RateLimit-Reset': String(Math.ceil(decision.resetAfterMs / 1000)),
  };
  // Retry-After is in whole seconds: round up, or the client comes back too early. A cost that can never
  // fit is denied with retryAfterMs Infinity ('exceeds-capacity'): waiting cannot help, so no Retry-After.
  if (!decision.allowed && Number.isFinite(decision.retryAfterMs)) {
    headers['Retry-After'] = String(Math.ceil(decision.retryAfterMs / 1000));
  }
  return { status: decision.allowed ? 200 : 429, headers };
}

function elapsed(): string {
  return `t=${((clock.nowMs() - Date.UTC(2030, 0, 1, 12)) / 1000).toFixed(1).padStart(4)}s`;
}

// 1. A client opens with 25 requests at once: the burst cap admits 10.
let admitted = 0;
let firstDenied: Decision | undefined;
for (let i = 0; i < 25; i++) {
  // limitSync is the memory store's fast path; `await limiter.limit(key)` works with every store.
  const decision = limiter.limitSync('client-acme');
  if (decision.allowed) admitted++;
  else firstDenied ??= decision;
}
console.log(`${elapsed()} acme sends 25 at once: ${admitted} admitted, ${25 - admitted} denied`);
if (firstDenied !== undefined) {
  console.log(`        first denial: policy ${firstDenied.policy}, retry in ${firstDenied.retryAfterMs} ms`);
  console.log(`        response: ${JSON.stringify(respond(firstDenied))}`);
}
// The 15 denied calls took nothing from the per-minute budget.
const status = limiter.statusSync('client-acme');
console.log(`        status: ${status.policies.map((p) => `${p.policy} remaining ${p.remaining}`).join(', ')}`);

// 2. Then 20 requests per second (one every 50 ms) for 12 seconds: the per-second cap binds first,
// and once the per-minute budget is spent, the per-minute policy does.
for (let second = 0; second < 12; second++) {
  const tally = { admitted: 0, denied: new Map<string, number>() };
  for (let i = 0; i < 20; i++) {
    clock.advance(50);
    const decision = limiter.limitSync('client-acme');
    if (decision.allowed) tally.admitted++;
    else tally.denied.set(decision.policy, (tally.denied.get(decision.policy) ?? 0) + 1);
  }
  const denied = [...tally.denied].map(([policy, n]) => `${n} by ${policy}`).join(', ') || 'none denied';
  console.log(`${elapsed()} acme, 20 in the last second: ${tally.admitted} admitted; ${denied}`);
}

// 3. Keys are per client: another client is not affected by acme's traffic.
const other = limiter.limitSync('client-globex');
console.log(`${elapsed()} globex sends 1: ${other.allowed ? 'admitted' : 'denied'}, remaining ${other.remaining}`);

// 4. acme pauses for a minute: both budgets refill completely.
clock.advance(60_000);
const back = limiter.statusSync('client-acme');
console.log(
  `${elapsed()} acme after a minute of quiet: remaining ${back.remaining}, resetAfterMs ${back.resetAfterMs}`,
);
