export {
  type SqliteDatabase,
  type SqliteStatement,
  type SqliteStore,
  type SqliteStoreOptions,
  sqliteStore,
} from './sqlite-store.js';
