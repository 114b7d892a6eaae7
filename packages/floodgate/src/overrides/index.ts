export { compareIds, type OverrideBackend } from './backend.js';
export { memoryOverrides } from './memory-overrides.js';
export { mergePolicies } from './merge.js';
export {
  type OverriddenCallOptions,
  OverriddenLimiter,
  type OverrideTargets,
  type WithOverridesOptions,
  withOverrides,
} from './overridden-limiter.js';
export {
  createOverrides,
  type ListOverridesOptions,
  type OverrideLookup,
  Overrides,
  type OverridesCacheStats,
  type OverridesOptions,
  type OverridesPage,
} from './overrides.js';
export {
  type PostgresOverrides,
  type PostgresOverridesOptions,
  postgresOverrides,
} from './postgres-overrides.js';
export {
  MAX_OVERRIDE_ID_LENGTH,
  MAX_OVERRIDE_NOTE_LENGTH,
  MAX_OVERRIDE_PAGE,
  MAX_OVERRIDE_POLICIES,
  OVERRIDE_SCOPES,
  type OverrideInput,
  type OverrideScope,
  type OverrideTarget,
  type StoredOverride,
} from './record.js';
export { type RedisOverridesOptions, redisOverrides, redisOverridesChannel } from './redis-overrides.js';
export { type SqliteOverrides, type SqliteOverridesOptions, sqliteOverrides } from './sqlite-overrides.js';
