import { fixedWindow, gcra, leakyBucket, slidingLog, tokenBucket } from '../../model/policy.js';
import type { Scenario } from '../scenarios.js';
import { deny } from './steps.js';

/**
 * The tables that hold across algorithms: penalty boxes, several policies at once (all-or-nothing),
 * reservations and their cancellation, and keys as data. Every store reproduces them exactly.
 */
export const combinedTables: Scenario[] = [
  {
    name: 'penalty box: once denied, blocked for blockMs',
    policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 5000, name: 'login' })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, expect: deny(5000, { remaining: 0, resetAfterMs: 5000, policy: 'login' }) },
      { at: 1000, expect: { allowed: false, reason: 'blocked', retryAfterMs: 4000, remaining: 0 } },
      { at: 1000, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 4000 } },
      { at: 1000, op: 'status', expect: { allowed: false, reason: 'blocked', remaining: 0, resetAfterMs: 4000 } },
      { at: 4999, expect: { allowed: false, reason: 'blocked', retryAfterMs: 1 } },
      { at: 5000, expect: { allowed: true, remaining: 1 } },
      { at: 5000, op: 'reset' },
      { at: 5000, op: 'status', expect: { allowed: true, remaining: 2, resetAfterMs: 0 } },
    ],
  },
  {
    // retryAfter is a promise: the later of the block's end and the policy's own wait for the same call.
    // A retry the policy itself still denies would start a new block: a client that honours Retry-After
    // is never punished again, one that comes back early is.
    name: 'penalty box shorter than the wait: retryAfter is the policy own wait (gcra 1 per minute, block 5 s)',
    policies: [gcra({ limit: 1, periodMs: 60_000, blockMs: 5000, name: 'slow' })],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0, resetAfterMs: 60_000 } },
      { at: 0, expect: deny(60_000, { remaining: 0, resetAfterMs: 60_000, policy: 'slow' }) },
      { at: 1000, expect: { allowed: false, reason: 'blocked', retryAfterMs: 59_000, resetAfterMs: 59_000 } },
      { at: 1000, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 59_000 } },
      // A status is a cost-0 call: only the block stands in its way.
      { at: 1000, op: 'status', expect: { allowed: false, reason: 'blocked', remaining: 0, resetAfterMs: 59_000 } },
      { at: 4999, expect: { allowed: false, reason: 'blocked', retryAfterMs: 55_001 } },
      { at: 5000, op: 'check', expect: deny(55_000) },
      // Back early, after the block: denied on the limit, and blocked again until 10 s.
      { at: 5000, expect: deny(55_000, { resetAfterMs: 55_000 }) },
      { at: 9999, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 50_001 } },
      { at: 59_999.999, op: 'check', expect: deny(1) },
      { at: 60_000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'penalty box shorter than the wait: while blocked, the wait is for the same cost',
    policies: [fixedWindow({ limit: 3, windowMs: 1000, blockMs: 300, name: 'fw' })],
    steps: [
      { at: 0, cost: 2, expect: { allowed: true, remaining: 1 } },
      { at: 100, cost: 2, expect: deny(900, { remaining: 0, resetAfterMs: 900 }) },
      // Blocked until 400: cost 1 fits the window then, cost 2 only in the next window.
      { at: 200, cost: 1, expect: { allowed: false, reason: 'blocked', retryAfterMs: 200, resetAfterMs: 800 } },
      { at: 200, cost: 2, expect: { allowed: false, reason: 'blocked', retryAfterMs: 800, resetAfterMs: 800 } },
      { at: 399.999, cost: 1, op: 'check', expect: { allowed: false, reason: 'blocked', retryAfterMs: 1 } },
      { at: 400, cost: 1, expect: { allowed: true, remaining: 0 } },
      { at: 400, cost: 1, expect: deny(600) },
      { at: 1000, cost: 2, expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    // The logged attempt counts in the wait: the events of 0 ms must leave the window.
    name: 'penalty box shorter than the wait, denied attempts counted: the retry passes the log too',
    policies: [slidingLog({ limit: 2, windowMs: 1000, countDenied: true, blockMs: 100, name: 'log' })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 100, expect: deny(900, { remaining: 0, resetAfterMs: 1000 }) },
      { at: 150, expect: { allowed: false, reason: 'blocked', retryAfterMs: 850 } },
      { at: 999.999, op: 'check', expect: deny(1) },
      { at: 1000, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    // Several policies: the decision waits for the longest of them, blocks included.
    name: 'penalty box shorter than the wait under two policies: retryAfter is the longest wait',
    policies: [
      gcra({ limit: 2, periodMs: 1000, blockMs: 100, name: 'g' }),
      fixedWindow({ limit: 3, windowMs: 1000, name: 'fw' }),
    ],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, expect: deny(500, { policy: 'g', remaining: 0, resetAfterMs: 1000 }) },
      { at: 50, expect: { allowed: false, reason: 'blocked', retryAfterMs: 450, policy: 'g' } },
      { at: 500, expect: { allowed: true, remaining: 0 } },
      { at: 600, expect: deny(400, { policy: 'g' }) },
      { at: 650, expect: { allowed: false, reason: 'blocked', retryAfterMs: 350, policy: 'g' } },
      { at: 1000, expect: { allowed: true } },
    ],
  },
  {
    // Cost 0 is a check: even on a key that owes more than its burst (a reservation), it starts no penalty.
    name: 'penalty box: a cost-0 call never starts a block',
    policies: [gcra({ limit: 2, periodMs: 1000, blockMs: 60_000 })],
    steps: [
      { at: 0, repeat: 2, expect: { allowed: true } },
      { at: 0, maxDelayMs: 500, expect: { allowed: true, delayMs: 500 } },
      { at: 0, cost: 0, expect: { allowed: false, reason: 'limit', retryAfterMs: 500 } },
      { at: 1000, op: 'status', expect: { allowed: true, remaining: 1 } },
    ],
  },
  {
    name: 'two policies, all-or-nothing: a denial consumes nothing from either',
    policies: [
      gcra({ limit: 10, periodMs: 1000, name: 'per-second' }),
      fixedWindow({ limit: 15, windowMs: 60_000, name: 'per-minute' }),
    ],
    steps: [
      { at: 0, repeat: 10, expect: { allowed: true } },
      { at: 0, expect: deny(100, { policy: 'per-second', remaining: 0 }) },
      { at: 1000, op: 'status', expect: { remaining: 5, policy: 'per-minute' } },
      { at: 1000, repeat: 5, expect: { allowed: true } },
      { at: 1000, expect: deny(59_000, { policy: 'per-minute' }) },
      { at: 1000, op: 'check', cost: 0, expect: { allowed: true, remaining: 0 } },
      { at: 60_000, expect: { allowed: true, remaining: 9, policy: 'per-second' } },
    ],
  },
  {
    // DESIGN §4: a cost some policy can never admit changes nothing, under any policy.
    name: 'exceeds-capacity under one policy starts no penalty under another',
    policies: [
      fixedWindow({ limit: 5, windowMs: 1000, blockMs: 60_000, name: 'fw' }),
      gcra({ limit: 2, periodMs: 1000, name: 'a' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true } },
      // `fw` alone would deny this on its limit (1 + 5 > 5) and start its 60 s block.
      { at: 0, cost: 5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, op: 'status', expect: { allowed: true, remaining: 1 } },
      { at: 1500, expect: { allowed: true } },
    ],
  },
  {
    name: 'exceeds-capacity under one policy logs no attempt under a countDenied log',
    policies: [
      gcra({ limit: 2, periodMs: 1000, name: 'a' }),
      slidingLog({ limit: 6, windowMs: 60_000, countDenied: true, name: 'log' }),
    ],
    steps: [
      { at: 0, op: 'status', expect: { remaining: 2 } },
      { at: 0, cost: 5, expect: { allowed: false, reason: 'exceeds-capacity', retryAfterMs: Infinity } },
      { at: 0, op: 'status', expect: { remaining: 2 } },
      { at: 0, cost: 2, expect: { allowed: true, remaining: 0 } },
      // A denial on a limit is still logged: 2 + 2 counted, 4 of 6.
      { at: 0, cost: 2, expect: deny(1000, { policy: 'a' }) },
      { at: 1000, cost: 2, expect: { allowed: true, remaining: 0 } },
      { at: 1000, cost: 1, expect: { allowed: false, reason: 'limit' } },
    ],
  },
  {
    // retryAfter is a promise under several policies too: when another policy denies, a countDenied log
    // that would have admitted the call still logs the attempt, and its own wait for the same call, after
    // that, is part of the decision's retryAfter (it used to promise 1 ms, and the log denied then).
    name: 'countDenied log beside a policy that denies: retryAfter covers the attempt the log counted',
    policies: [
      slidingLog({ limit: 4.5, windowMs: 1194, countDenied: true, name: 'log' }),
      fixedWindow({ limit: 1, windowMs: 1, name: 'fw' }),
    ],
    steps: [
      { at: 0, expect: { allowed: true, remaining: 0 } },
      // Denied by the window; the log counts the attempts: 2, then 3 of 4.5, room for one more.
      { at: 0, repeat: 2, expect: deny(1, { policy: 'fw' }) },
      // Counted: 4 of 4.5, so the same call fits the log only once the events of 0 ms have left it.
      { at: 0, expect: deny(1194, { policy: 'fw' }) },
      { at: 1, op: 'check', expect: deny(1193, { policy: 'log' }) },
      { at: 1193.999, op: 'check', expect: deny(1, { policy: 'log' }) },
      { at: 1194, expect: { allowed: true, remaining: 0 } },
    ],
  },
  {
    name: 'reservations: maxDelayMs books capacity ahead and says when to proceed',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: null } },
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: 100, remaining: 0 } },
      { at: 0, maxDelayMs: 250, expect: { allowed: true, delayMs: 200 } },
      { at: 0, maxDelayMs: 250, expect: deny(50) },
      { at: 0, expect: deny(300) },
      { at: 300, expect: { allowed: true, delayMs: null } },
    ],
  },
  {
    name: 'cancelling a reservation gives its slot back while nothing was booked behind it',
    policies: [gcra({ limit: 10, periodMs: 1000, burst: 1 })],
    steps: [
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: null } },
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: 100 } },
      { at: 0, maxDelayMs: 1000, expect: { allowed: true, delayMs: 200, resetAfterMs: 300 } },
      // Step 3 was booked behind step 2: giving step 2's slot back would let a caller run beside step 3.
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 250 } },
      { at: 50, op: 'cancel', cancels: 3, expect: { cancelled: true } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 150 } },
      // In reverse order everything comes back.
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: true } },
      { at: 50, op: 'status', expect: { remaining: 0, resetAfterMs: 50 } },
      { at: 50, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 50, maxDelayMs: 1000, expect: { allowed: true, delayMs: 50, resetAfterMs: 150 } },
      // Admitted at once: nothing was booked ahead, nothing to give back.
      { at: 50, op: 'cancel', cancels: 1, expect: { cancelled: false } },
    ],
  },
  {
    name: 'cancelling a reservation that has come due gives nothing back',
    policies: [tokenBucket({ capacity: 1, refillAmount: 10, refillIntervalMs: 1000 })],
    steps: [
      { at: 0, expect: { allowed: true } },
      { at: 0, maxDelayMs: 500, expect: { allowed: true, delayMs: 100 } },
      { at: 99.999, op: 'cancel', cancels: 2, expect: { cancelled: true } },
      { at: 99.999, maxDelayMs: 500, expect: { allowed: true, delayMs: 1 } },
      { at: 100, op: 'cancel', cancels: 4, expect: { cancelled: false } },
      { at: 100, op: 'status', expect: { remaining: 0, resetAfterMs: 100 } },
    ],
  },
  {
    name: 'cancelling a queued call of a leaky bucket in queue mode frees its place in the queue',
    policies: [leakyBucket({ capacity: 3, leakPerSecond: 1, mode: 'queue' })],
    steps: [
      { at: 0, repeat: 3, expectEach: [null, 1000, 2000].map((delayMs) => ({ allowed: true, delayMs })) },
      { at: 0, expect: deny(1000) },
      { at: 500, op: 'cancel', cancels: 3, expect: { cancelled: true } },
      { at: 500, expect: { allowed: true, delayMs: 1500 } },
      { at: 500, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 1000, op: 'cancel', cancels: 6, expect: { cancelled: true } },
      { at: 1000, op: 'cancel', cancels: 2, expect: { cancelled: false } },
      { at: 1000, expect: { allowed: true, delayMs: 1000 } },
    ],
  },
  {
    name: 'keys are data: similar-looking keys never share state',
    policies: [fixedWindow({ limit: 1, windowMs: 1000 })],
    steps: [
      ...[
        'a',
        'a:b',
        'a}:b',
        '{a}',
        '%7B',
        '#',
        '#a',
        '\u0000',
        '\ud800',
        '\udc00',
        'ключ 🔑',
        'a'.repeat(201),
        'a'.repeat(202),
      ].map((key) => ({ at: 0, key, expect: { allowed: true } })),
      { at: 0, key: 'a}:b', expect: deny(1000) },
      { at: 0, key: '\ud800', expect: deny(1000) },
      { at: 0, key: 'a'.repeat(202), expect: deny(1000) },
    ],
  },
];
