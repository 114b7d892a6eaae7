export {
  fromPgListener,
  fromPostgresListener,
  type PgListenClient,
  type PostgresJsListenSql,
  type PostgresListener,
} from './listener.js';
export {
  type PostgresPermitStore,
  type PostgresPermitStoreOptions,
  postgresPermitStore,
} from './permit-store.js';
export {
  fromPg,
  fromPostgres,
  type PgQueryable,
  type PostgresClient,
  type PostgresJsSql,
} from './postgres-client.js';
export { type PostgresStore, type PostgresStoreOptions, postgresStore } from './postgres-store.js';
