// A spend budget: at most 1000.00 per 30 days, with fractional amounts. A leaky bucket in meter mode holds
// what was spent and leaks it back at 1000.00 per 30 days, continuously: no monthly reset for an
// account to wait for, and no cliff at the start of a month. A manual clock stands in for time.
//
//   npm run build && npx tsx packages/floodgate/examples/spend-budget.ts
import { createLimiter, type Decision, leakyBucket } from 'floodgate';
import { manualClock } from 'floodgate/testing';

const DAY = 24 * 60 * 60 * 1000;
const start = Date.UTC(2030, 0, 1);
const clock = manualClock({ startMs: start });
const budget = createLimiter({
  prefix: 'spend',
  clock,
  // 1000 per 30 days = 1000 / 2 592 000 per second: one unit leaks back every 2592 s.
  policies: leakyBucket({ name: 'monthly-budget', capacity: 1000, leakPerSecond: 1000 / (30 * 24 * 60 * 60) }),
});

function when(decision: Decision): string {
  if (decision.retryAfterMs === Number.POSITIVE_INFINITY) return 'never: larger than the whole budget';
  const minutes = decision.retryAfterMs / 60_000;
  return minutes < 60 ? `in ${minutes.toFixed(1)} min` : `in ${(minutes / 60).toFixed(1)} h`;
}

function day(): string {
  return `day ${((clock.nowMs() - start) / DAY).toFixed(0).padStart(2)}`;
}

/** Asks first (`check` changes nothing), e.g. to show a quote; then spends with `limit`. */
function spend(account: string, amount: number, what: string): void {
  const quote = budget.checkSync(account, { cost: amount });
  if (!quote.allowed) {
    console.log(`${day()} ${what} ${amount.toFixed(2)}: refused (${quote.reason}), possible ${when(quote)}`);
    return;
  }
  // `limit` decides again, atomically: another request may have spent the money since the check.
  // A refused `limit` changes nothing, so the budget is never charged for a payment that did not happen.
  const paid = budget.limitSync(account, { cost: amount });
  console.log(
    `${day()} ${what} ${amount.toFixed(2)}: ${paid.allowed ? 'paid' : `refused (${paid.reason})`}, ` +
      `about ${paid.remaining} whole units left`,
  );
}

spend('acct-42', 30, 'groceries');
spend('acct-42', 990, 'a laptop');
spend('acct-42', 250.5, 'rent share');
spend('acct-42', 719.5, 'a phone');
spend('acct-42', 0.25, 'a sticker');

// Three days later, 3/30 of the budget has leaked back: 100.00.
clock.advance(3 * DAY);
console.log(`${day()} status: about ${budget.statusSync('acct-42').remaining} whole units available`);
spend('acct-42', 99.75, 'dinner');
spend('acct-42', 1200, 'a car');

// Other accounts have their own budget.
spend('acct-7', 1000, 'everything at once');

// After 30 quiet days the account is back to untouched.
clock.advance(30 * DAY);
const rested = budget.statusSync('acct-42');
console.log(`${day()} status: about ${rested.remaining} whole units available, resetAfterMs ${rested.resetAfterMs}`);
