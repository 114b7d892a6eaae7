import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { freePorts } from '../free-ports.js';
import { describePostgresProblem, PG_CONFIG, requirePostgres } from './sql/postgres-env.js';

// The message a newcomer reads when the PostgreSQL tests cannot run says what is actually wrong, from
// the real server's and the real socket's answers.
const available = await requirePostgres();

async function problemOf(config: typeof PG_CONFIG | { host: string; port: number; user: string; database: string }) {
  const client = new pg.Client({ ...config, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.end();
    return 'connected';
  } catch (error) {
    await client.end().catch(() => {});
    return describePostgresProblem(error, config);
  }
}

describe('what the PostgreSQL tests say when they cannot run', () => {
  it('a port with no server: connection refused, and how to start one', async () => {
    const [port] = await freePorts(1);
    const problem = await problemOf({ ...PG_CONFIG, port: port as number });
    expect(problem).toContain(`PostgreSQL at 127.0.0.1:${port} refuses connections: no server is running there`);
    expect(problem).toContain('scripts/setup-debian.sh');
  });

  it.runIf(available)('a server without the database: the database does not exist, and how to create it', async () => {
    const database = `fg_missing_${process.pid}`;
    const problem = await problemOf({ ...PG_CONFIG, database });
    expect(problem).toBe(
      `PostgreSQL at 127.0.0.1:5432 answers, but its database "${database}" does not exist (create it: createdb -h 127.0.0.1 -U postgres ${database}; scripts/setup-debian.sh sets it all up)`,
    );
  });

  it.runIf(available)('the test database itself is usable', async () => {
    expect(await problemOf(PG_CONFIG)).toBe('connected');
  });
});
