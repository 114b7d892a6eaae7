// A separate process with its own pool: `<driver> <schema> <table> <key> <calls> [mode]` prints how many
// calls were admitted. Without a mode it makes all calls at once on one key, under a GCRA and a sliding log
// (batched statements of the decide function). `hot-key` makes them one at a time on one key, under one
// GCRA policy of 100 a day; `new-keys` makes one call on each of `<calls>` keys in order, one at a time,
// under one GCRA policy of 1 a day: lone single-meter calls, which go through the meter statements.
// `window-hot` and `window-new` do the same under one fixed window of a day (the fixed-window statements).
import { createLimiter, fixedWindow, gcra, slidingLog } from '../../../src/index.js';
import { postgresStore } from '../../../src/stores/postgres/index.js';
import { connect, type Driver } from './postgres-env.js';

const [driver, schema, table, key, calls, mode] = process.argv.slice(2) as [
  Driver,
  string,
  string,
  string,
  string,
  string | undefined,
];
const connection = connect(driver, 4);
const store = postgresStore({ client: connection.client, schema, table });
// What these runs count is admissions, not latency: on a loaded machine a call that waits for other
// processes' rows may take longer than the default 1000 ms, which would end the run.
const timeoutMs = 60_000;
let admitted = 0;
if (mode === undefined) {
  const limiter = createLimiter({
    store,
    timeoutMs,
    prefix: 'shared',
    policies: [
      gcra({ limit: 100, periodMs: 86_400_000, name: 'day' }),
      slidingLog({ limit: 150, windowMs: 86_400_000, name: 'log', countDenied: true }),
    ],
  });
  const decisions = await Promise.all(Array.from({ length: Number(calls) }, () => limiter.limit(key)));
  admitted = decisions.filter((d) => d.allowed).length;
} else {
  const hot = mode === 'hot-key' || mode === 'window-hot';
  const limit = hot ? 100 : 1;
  const name = hot ? 'hot' : 'new';
  const limiter = createLimiter({
    store,
    timeoutMs,
    prefix: 'shared',
    policies: [
      mode.startsWith('window')
        ? fixedWindow({ limit, windowMs: 86_400_000, align: 'first-request', name })
        : gcra({ limit, periodMs: 86_400_000, name }),
    ],
  });
  for (let i = 0; i < Number(calls); i++) {
    if ((await limiter.limit(hot ? `${key}-hot` : `${key}-${i}`)).allowed) admitted++;
  }
}
process.stdout.write(String(admitted));
await store.close();
await connection.close();
