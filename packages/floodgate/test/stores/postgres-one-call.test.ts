import { afterAll, beforeAll, describe } from 'vitest';
import type { PostgresClient } from '../../src/stores/postgres/index.js';
import { type PostgresStore, postgresPermitStore, postgresStore } from '../../src/stores/postgres/index.js';
import { runOneCallSuite } from '../permits/one-call-kit.js';
import { type Connection, connect, DRIVERS, requirePostgres, uniqueSchema } from './sql/postgres-env.js';

// The one-call path (a limit and its permit in one statement) on PostgreSQL, through both drivers: the
// client is the real one, wrapped only to count its statements (each one round trip).

const postgresUp = await requirePostgres();

for (const driver of DRIVERS) {
  describe.skipIf(!postgresUp)(`the one-call path on PostgreSQL, ${driver}`, () => {
    const schema = uniqueSchema('onecall');
    const held: { connection?: Connection; own?: PostgresStore; separate?: PostgresStore; calls: number } = {
      calls: 0,
    };
    beforeAll(async () => {
      const connection = connect(driver);
      held.connection = connection;
      const counted: PostgresClient = {
        query: (text, params, name) => {
          held.calls++;
          return connection.client.query(text, params, name);
        },
      };
      held.own = postgresStore({ client: counted, schema });
      await held.own.migrate();
      await held.own.permits.migrate();
      held.separate = postgresStore({ client: connection.client, schema, table: 'rates', permitsTable: 'leases' });
      await held.separate.migrate();
      await postgresPermitStore({ client: connection.client, schema, table: 'leases' }).migrate();
    });
    afterAll(async () => {
      await held.own?.close();
      await held.separate?.close();
      await held.connection?.sql(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await held.connection?.close();
    });
    runOneCallSuite({
      name: `postgres ${driver}`,
      own: () => held.own as PostgresStore,
      separate: () => {
        const permits = postgresPermitStore({
          client: (held.connection as Connection).client,
          schema,
          table: 'leases',
        });
        return { store: held.separate as PostgresStore, permits };
      },
      calls: () => held.calls,
    });
  });
}
