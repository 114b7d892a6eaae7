export { type SqlitePermitStore, type SqlitePermitStoreOptions, sqlitePermitStore } from './permit-store.js';
export {
  type SqliteDatabase,
  type SqliteStatement,
  type SqliteStore,
  type SqliteStoreOptions,
  sqliteStore,
} from './sqlite-store.js';
