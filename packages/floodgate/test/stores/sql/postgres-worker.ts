// A separate process with its own pool: `<driver> <schema> <table> <key> <calls>` makes all calls at once
// on one key and prints how many were admitted.
import { createLimiter, gcra, slidingLog } from '../../../src/index.js';
import { postgresStore } from '../../../src/stores/postgres/index.js';
import { connect, type Driver } from './postgres-env.js';

const [driver, schema, table, key, calls] = process.argv.slice(2) as [Driver, string, string, string, string];
const connection = connect(driver, 4);
const store = postgresStore({ client: connection.client, schema, table });
const limiter = createLimiter({
  store,
  prefix: 'shared',
  policies: [
    gcra({ limit: 100, periodMs: 86_400_000, name: 'day' }),
    slidingLog({ limit: 150, windowMs: 86_400_000, name: 'log', countDenied: true }),
  ],
});
const decisions = await Promise.all(Array.from({ length: Number(calls) }, () => limiter.limit(key)));
process.stdout.write(String(decisions.filter((d) => d.allowed).length));
await store.close();
await connection.close();
