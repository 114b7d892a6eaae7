export { EXIT, main } from './cli.js';
export {
  ConfigError,
  type ConfigIssue,
  type DescriptorConfig,
  type DomainConfig,
  type EnvoyLimitConfig,
  loadConfigFile,
  MAX_DESCRIPTOR_DEPTH,
  parseConfig,
  type ServiceConfig,
} from './config.js';
export {
  type ConfigLoadOptions,
  type LoadedConfig,
  loadConfigPath,
  MAX_CONFIG_FILES,
  MAX_DIRECTORY_BYTES,
  parseConfigText,
} from './config-files.js';
export {
  type DecisionRequest,
  type DescriptorOutcome,
  type DescriptorRequest,
  Engine,
  type LimitOverride,
  MAX_DESCRIPTORS,
  MAX_ENTRIES,
  MAX_ENTRY_LENGTH,
  MAX_GRPC_DESCRIPTORS,
  type Mode,
  RequestError,
} from './engine.js';
export { GrpcStatus, MAX_GRPC_MESSAGE_BYTES, RATE_LIMIT_SERVICE } from './grpc/server.js';
export { HEADER_FORMATS, type Header, RateLimitHeaders } from './headers.js';
export { MAX_BODY_BYTES } from './http-api.js';
export { openApiDocument } from './openapi.js';
export type { DescriptorEntry, EnvoyLimit } from './rules.js';
export { ListenError, type ReloadResult, Service, type ServiceOptions, startService } from './service.js';
export { type OpenedStore, openStore, STORE_URL_FORMS, StoreUrlError } from './store-url.js';
export {
  DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS,
  DEFAULT_TLS_MAX_HANDSHAKES,
  TlsError,
  type TlsErrorCode,
  type TlsOptions,
  type TlsReloadResult,
} from './tls.js';
export { VERSION } from './version.js';
