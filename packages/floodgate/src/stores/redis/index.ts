export {
  fromIoredis,
  fromNodeRedis,
  type IoredisClient,
  isNoScriptError,
  type NodeRedisClient,
  type RedisScriptClient,
} from './clients.js';
export { type RedisPermitStore, type RedisPermitStoreOptions, redisPermitStore } from './permit-store.js';
export { PERMIT_SCRIPTS } from './permits-lua.js';
export { type RedisStore, type RedisStoreOptions, redisStore } from './redis-store.js';
export {
  DECIDE_SCRIPT,
  DECIDE_SCRIPT_SHA,
  MAX_BAKED_METER_SCRIPTS,
  METER_SCRIPT,
  METER_SCRIPT_SHA,
  meterScriptFor,
  singleCallScriptFor,
} from './script.js';
export { hashSlot } from './slot.js';
export {
  fromIoredisSubscriber,
  fromNodeRedisSubscriber,
  type IoredisSubscriberClient,
  type NodeRedisSubscriberClient,
  type RedisSubscriber,
  type RedisSubscriberOptions,
} from './subscriber.js';
