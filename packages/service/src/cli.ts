#!/usr/bin/env node
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ParseArgsConfig, parseArgs } from 'node:util';
import type { HeaderFormat } from 'floodgate/http';
import { AdminConfigError, type AdminOptions } from './admin/auth.js';
import { ConfigError } from './config.js';
import { loadConfigPath } from './config-files.js';
import { HEADER_FORMATS } from './headers.js';
import { compileRules } from './rules.js';
import { ListenError, type Service, startService } from './service.js';
import { DecisionStats } from './stats.js';
import { STORE_URL_FORMS, StoreUrlError } from './store-url.js';
import { TlsError, type TlsOptions } from './tls.js';
import { VERSION } from './version.js';

/** The web page (simulator and live view), built by the web package next to the compiled CLI. */
const PAGE_DIR = fileURLToPath(new URL('./web/', import.meta.url));

/**
 * The config `floodgate serve` runs on when none is named and there is no floodgate.yaml where it runs: the
 * package's example (shipped in `examples/`, one level above both `src/` and `dist/`), so a first run
 * serves something to look at instead of stopping on a missing file.
 */
export const EXAMPLE_CONFIG = fileURLToPath(new URL('../examples/floodgate.yaml', import.meta.url));

/** Exit codes of the `floodgate` command. */
export const EXIT = {
  /** Done, or stopped cleanly by SIGTERM/SIGINT. */
  OK: 0,
  /** An unexpected failure. */
  FAILURE: 1,
  /** Bad command line. */
  USAGE: 2,
  /** The config file is missing or invalid. */
  CONFIG: 3,
  /** The store URL is invalid or the store cannot be opened. */
  STORE: 4,
  /** A port cannot be listened on (in use, no permission). */
  LISTEN: 5,
} as const;

const HELP = `floodgate ${VERSION}: rate limiting as a service (HTTP JSON API, Envoy gRPC, Prometheus metrics)

Usage:
  floodgate serve [options]          start the service
  floodgate check-config [--merge-domain-config] <file or directory>
                                     validate a config and exit
  floodgate --help | --version

Options of serve (environment variable in brackets):
  -c, --config <path>      YAML config: a file of floodgate's format or envoyproxy/ratelimit's, or a
                           directory of them (*.yaml, *.yml; envoyproxy/ratelimit's layout)
                           [FLOODGATE_CONFIG] (default: floodgate.yaml, or
                           $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY when RUNTIME_ROOT is set;
                           without either, the bundled example config, said so on stderr)
      --merge-domain-config  merge a domain that several files of envoyproxy/ratelimit's format define
                           [FLOODGATE_MERGE_DOMAIN_CONFIG, MERGE_DOMAIN_CONFIG] (default: refuse it)
      --stop-cache-key-increment-when-overlimit  in domains of envoyproxy/ratelimit's format, a request
                           with a descriptor that goes over its limit charges none of its other
                           descriptors [FLOODGATE_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
                           STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT] (default: off)
      --shadow-mode        answer every gRPC call OK overall, deciding and counting as usual (its
                           statuses still say OVER_LIMIT) [FLOODGATE_SHADOW_MODE, SHADOW_MODE]
  -s, --store <url>        where counters live [FLOODGATE_STORE] (default: memory)
      --host <address>     address to listen on [FLOODGATE_HOST] (default: 127.0.0.1)
  -p, --port <n>           HTTP port, 0 for any free one [FLOODGATE_PORT] (default: 8080)
      --grpc-port <n>      gRPC port (Envoy rate limit API) [FLOODGATE_GRPC_PORT] (default: 8081)
      --no-http            do not serve HTTP
      --no-grpc            do not serve gRPC
      --no-watch           do not reload the config or TLS files when they change (SIGHUP still does)
      --drain-timeout-ms <n>  how long shutdown waits for in-flight calls (default: 10000)
      --store-timeout-ms <n>  longest wait for the store on one call, 0 for none (default: 1000)
      --max-permit-wait-ms <n>  longest timeoutMs of a waiting permit acquire (default: 30000)
      --grpc-read-timeout-ms <n>  longest wait for a gRPC call's request message (default: 10000)
      --grpc-max-connections <n>  gRPC connections open at once; a new one past it ends the oldest
                           connection with no call open, or is refused (default: 4096)
      --grpc-max-connections-per-address <n>  the same, from one client address (default: 1024)
      --grpc-max-streams <n>  gRPC streams open at once, all connections together (default: 16384)
      --grpc-max-buffered-bytes <n>  bytes all gRPC connections buffer together (default: 33554432)
      --grpc-frame-timeout-ms <n>  longest wait for a frame or header block begun, or for the peer
                           to read its answers; then the connection ends (default: 10000)
      --grpc-no-stream-timeout-ms <n>  a gRPC connection that opens no call this long is closed
                           (default: 30000)
      --grpc-idle-timeout-ms <n>  a gRPC connection with no call open that sends nothing (PINGs
                           count) this long is closed (default: 300000)
      --failure <mode>     when the store fails or times out: throw (answer UNAVAILABLE / 503, so
                           Envoy applies its failure mode), open (admit) or closed (deny)
                           [FLOODGATE_FAILURE] (default: throw)
      --headers <format>   rate-limit headers sent with decisions: ietf (RateLimit-Policy and RateLimit
                           of the IETF draft), draft-7, draft-6, legacy (X-RateLimit-*) or none
                           [FLOODGATE_HEADERS] (default: ietf)
      --static-dir <dir>   serve the files of <dir> at / instead of the floodgate page (the simulator
                           and the live view, built into dist/web)
      --log-level <level>  fatal, error, warn, info, debug, trace or silent [FLOODGATE_LOG_LEVEL] (default: info)

TLS (PEM files, reloaded on SIGHUP and when they change; a bad file keeps the old ones serving):
      --grpc-tls-cert <file>       serve gRPC over TLS with this certificate chain [FLOODGATE_GRPC_TLS_CERT]
      --grpc-tls-key <file>        and its private key [FLOODGATE_GRPC_TLS_KEY]
      --grpc-tls-client-ca <file>  require client certificates from these CAs (mutual TLS)
                                   [FLOODGATE_GRPC_TLS_CLIENT_CA]
      --grpc-tls-client-san <name> and with this subject alternative name (DNS, URI, IP or email)
                                   [FLOODGATE_GRPC_TLS_CLIENT_SAN]
      --http-tls-cert <file>, --http-tls-key <file>, --http-tls-client-ca <file>, --http-tls-client-san <name>
                                   the same for the HTTP API (HTTPS) [FLOODGATE_HTTP_TLS_CERT, …]
Admin API (/v1/admin/…: stored overrides, a key's state; off unless one of these is given):
      --admin-token-file <file>    admin bearer tokens, one a line: "<id> <token>" [FLOODGATE_ADMIN_TOKEN_FILE];
                                   or one token in FLOODGATE_ADMIN_TOKEN (never on the command line)
      --admin-cert-subject <cn>    admit HTTPS client certificates with this common name as admins
                                   [FLOODGATE_ADMIN_CERT_SUBJECT]
      --admin-refresh-ms <n>       how often stored overrides are re-read, ms [FLOODGATE_ADMIN_REFRESH_MS] (default: 500)
Settling (/v1/settle):
      --settle-secret-file <file>  the secret settlements are signed with, 32 to 1024 characters, the same
                                   in every process sharing the store [FLOODGATE_SETTLE_SECRET_FILE]; or the
                                   secret in FLOODGATE_SETTLE_SECRET (never on the command line). Unset: a
                                   random one per process, so a call settles only on the process that decided it
  envoyproxy/ratelimit's variables are read too when FLOODGATE_GRPC_TLS_* are unset: GRPC_SERVER_USE_TLS=true
  with GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN.

Store URLs:
  ${STORE_URL_FORMS.join('\n  ')}

Signals: SIGHUP reloads the config and the TLS files (bad ones are rejected, the old ones keep serving);
SIGTERM and SIGINT drain in-flight calls and stop.

Exit codes: 0 ok, 1 unexpected failure, 2 bad command line, 3 invalid config or TLS file, 4 store unusable,
5 cannot listen.
`;

/** Where the command writes; the process's streams by default. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
}

const processIo: CliIo = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  env: process.env,
};

class UsageError extends Error {}

/**
 * Runs the `floodgate` command; resolves to its exit code (for `serve`, once the service has stopped).
 *
 * @example
 * ```ts
 * process.exitCode = await main(['check-config', 'floodgate.yaml']);
 * ```
 */
export async function main(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  try {
    const [command, ...rest] = argv;
    if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
      io.out(HELP);
      return command === undefined ? EXIT.USAGE : EXIT.OK;
    }
    if (command === '--version' || command === '-v' || command === 'version') {
      io.out(`${VERSION}\n`);
      return EXIT.OK;
    }
    if (command === 'check-config') return checkConfig(rest, io);
    if (command === 'serve') return await serve(rest, io);
    throw new UsageError(`unknown command ${JSON.stringify(command)}`);
  } catch (error) {
    if (
      error instanceof UsageError ||
      (error instanceof TypeError && 'code' in error && String(error.code).startsWith('ERR_PARSE_ARGS'))
    ) {
      io.err(`floodgate: ${error.message}\nRun \`floodgate --help\` for usage.\n`);
      return EXIT.USAGE;
    }
    throw error;
  }
}

function checkConfig(args: readonly string[], io: CliIo): number {
  const { positionals, values } = parseCommandArgs('check-config', args, {
    'merge-domain-config': { type: 'boolean' },
  });
  if (positionals.length !== 1) throw new UsageError('check-config takes one file or directory');
  const file = positionals[0] as string;
  try {
    const { config } = loadConfigPath(file, {
      mergeDomains: values['merge-domain-config'] ?? envFlag(io.env, 'MERGE_DOMAIN_CONFIG'),
    });
    const rules = [...compileRules(config, new DecisionStats()).values()].reduce((n, d) => n + d.rules.length, 0);
    io.out(
      `${file}: ok (${config.domains.length} domain${config.domains.length === 1 ? '' : 's'}, ${rules} rule${rules === 1 ? '' : 's'})\n`,
    );
    return EXIT.OK;
  } catch (error) {
    if (error instanceof ConfigError) {
      io.err(`${error.message}\n`);
      return EXIT.CONFIG;
    }
    throw error;
  }
}

/**
 * A switch from `FLOODGATE_<NAME>`, else from envoyproxy/ratelimit's own variable `<NAME>`, so its
 * deployments can move over unchanged: true for `true` or `1` (any case), as Go's strconv reads it.
 */
function envFlag(env: Record<string, string | undefined>, name: string): boolean {
  const value = env[`FLOODGATE_${name}`] ?? env[name];
  return value !== undefined && ['true', '1', 't'].includes(value.trim().toLowerCase());
}

/** The config path envoyproxy/ratelimit's variables name: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY. */
function runtimeDirectory(env: Record<string, string | undefined>): string | undefined {
  const root = env.RUNTIME_ROOT;
  if (root === undefined || root === '') return undefined;
  return join(root, env.RUNTIME_SUBDIRECTORY ?? '', env.RUNTIME_APPDIRECTORY ?? 'config');
}

type ParseArgsOptionsConfig = NonNullable<ParseArgsConfig['options']>;

/** The options of `floodgate serve`. */
const SERVE_OPTIONS = {
  config: { type: 'string', short: 'c' },
  store: { type: 'string', short: 's' },
  host: { type: 'string' },
  port: { type: 'string', short: 'p' },
  'grpc-port': { type: 'string' },
  'no-http': { type: 'boolean' },
  'no-grpc': { type: 'boolean' },
  'no-watch': { type: 'boolean' },
  'drain-timeout-ms': { type: 'string' },
  'static-dir': { type: 'string' },
  'log-level': { type: 'string' },
  'store-timeout-ms': { type: 'string' },
  'max-permit-wait-ms': { type: 'string' },
  'grpc-read-timeout-ms': { type: 'string' },
  'grpc-max-connections': { type: 'string' },
  'grpc-max-connections-per-address': { type: 'string' },
  'grpc-max-streams': { type: 'string' },
  'grpc-max-buffered-bytes': { type: 'string' },
  'grpc-frame-timeout-ms': { type: 'string' },
  'grpc-no-stream-timeout-ms': { type: 'string' },
  'grpc-idle-timeout-ms': { type: 'string' },
  failure: { type: 'string' },
  headers: { type: 'string' },
  'grpc-tls-cert': { type: 'string' },
  'grpc-tls-key': { type: 'string' },
  'grpc-tls-client-ca': { type: 'string' },
  'grpc-tls-client-san': { type: 'string' },
  'http-tls-cert': { type: 'string' },
  'http-tls-key': { type: 'string' },
  'http-tls-client-ca': { type: 'string' },
  'http-tls-client-san': { type: 'string' },
  'merge-domain-config': { type: 'boolean' },
  'stop-cache-key-increment-when-overlimit': { type: 'boolean' },
  'shadow-mode': { type: 'boolean' },
  'admin-token-file': { type: 'string' },
  'admin-cert-subject': { type: 'string' },
  'admin-refresh-ms': { type: 'string' },
  'settle-secret-file': { type: 'string' },
} as const satisfies ParseArgsOptionsConfig;

/**
 * Parses a command's arguments. An unknown option is refused in our words, naming it and the command
 * (Node's own message quotes it unbalanced), with the nearest option when one is a typo away.
 */
function parseCommandArgs<const T extends ParseArgsOptionsConfig>(
  command: string,
  args: readonly string[],
  options: T,
) {
  const { tokens } = parseArgs({ args: [...args], options, strict: false, allowPositionals: true, tokens: true });
  for (const token of tokens) {
    if (token.kind !== 'option' || Object.hasOwn(options, token.name)) continue;
    const near = Object.keys(options).find((name) => editDistance(name, token.name) <= 2);
    throw new UsageError(
      `${command} has no option ${token.rawName}${near === undefined ? '' : ` (did you mean --${near}?)`}`,
    );
  }
  return parseArgs({ args: [...args], options, allowPositionals: true });
}

/** Levenshtein distance, for suggesting an option after a typo. */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (row[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1);
      next[j] = Math.min((row[j] as number) + 1, (next[j - 1] as number) + 1, substitution);
    }
    row = next;
  }
  return row[b.length] as number;
}

function port(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535 || value.trim() === '') {
    throw new UsageError(`${name} must be a port number from 0 to 65535, got ${JSON.stringify(value)}`);
  }
  return n;
}

async function serve(args: readonly string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCommandArgs('serve', args, SERVE_OPTIONS);
  if (positionals.length > 0) throw new UsageError(`serve takes no arguments, got ${JSON.stringify(positionals[0])}`);
  const env = io.env;
  const levels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];
  const logLevel = values['log-level'] ?? env.FLOODGATE_LOG_LEVEL ?? 'info';
  if (!levels.includes(logLevel)) throw new UsageError(`--log-level must be one of ${levels.join(', ')}`);
  let drainTimeoutMs: number | undefined;
  if (values['drain-timeout-ms'] !== undefined) {
    drainTimeoutMs = Number(values['drain-timeout-ms']);
    if (!Number.isInteger(drainTimeoutMs) || drainTimeoutMs < 0) {
      throw new UsageError('--drain-timeout-ms must be a whole number of milliseconds');
    }
  }
  let storeTimeoutMs: number | undefined;
  if (values['store-timeout-ms'] !== undefined) {
    storeTimeoutMs = Number(values['store-timeout-ms']);
    if (!Number.isInteger(storeTimeoutMs) || storeTimeoutMs < 0) {
      throw new UsageError('--store-timeout-ms must be a whole number of milliseconds (0: no limit)');
    }
  }
  let maxPermitWaitMs: number | undefined;
  if (values['max-permit-wait-ms'] !== undefined) {
    maxPermitWaitMs = Number(values['max-permit-wait-ms']);
    if (!Number.isInteger(maxPermitWaitMs) || maxPermitWaitMs < 0 || maxPermitWaitMs > 2 ** 31 - 1) {
      throw new UsageError('--max-permit-wait-ms must be a whole number of milliseconds (0: acquires never wait)');
    }
  }
  let grpcReadTimeoutMs: number | undefined;
  if (values['grpc-read-timeout-ms'] !== undefined) {
    grpcReadTimeoutMs = Number(values['grpc-read-timeout-ms']);
    if (!Number.isInteger(grpcReadTimeoutMs) || grpcReadTimeoutMs < 1) {
      throw new UsageError('--grpc-read-timeout-ms must be a whole number of milliseconds, at least 1');
    }
  }
  const grpcLimits: Record<string, number> = {};
  for (const [flag, key] of [
    ['grpc-max-connections', 'maxConnections'],
    ['grpc-max-connections-per-address', 'maxConnectionsPerAddress'],
    ['grpc-max-streams', 'maxStreams'],
    ['grpc-max-buffered-bytes', 'maxBufferedBytes'],
    ['grpc-frame-timeout-ms', 'frameTimeoutMs'],
    ['grpc-no-stream-timeout-ms', 'noStreamTimeoutMs'],
    ['grpc-idle-timeout-ms', 'idleTimeoutMs'],
  ] as const) {
    const value = values[flag];
    if (value === undefined) continue;
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new UsageError(`--${flag} must be a whole number, at least 1`);
    grpcLimits[key] = n;
  }
  const failure = values.failure ?? env.FLOODGATE_FAILURE ?? 'throw';
  if (failure !== 'throw' && failure !== 'open' && failure !== 'closed') {
    throw new UsageError('--failure must be throw, open or closed');
  }
  const headers = values.headers ?? env.FLOODGATE_HEADERS ?? 'ietf';
  if (!(HEADER_FORMATS as readonly string[]).includes(headers)) {
    throw new UsageError(`--headers must be one of ${HEADER_FORMATS.join(', ')}`);
  }
  const named = values.config ?? env.FLOODGATE_CONFIG ?? runtimeDirectory(env);
  // A first run names no config: serve the bundled example rather than stop on a missing floodgate.yaml.
  const builtIn = named === undefined && !existsSync('floodgate.yaml');
  const configFile = named ?? (builtIn ? EXAMPLE_CONFIG : 'floodgate.yaml');
  const httpPort = values['no-http'] ? false : (port(values.port ?? env.FLOODGATE_PORT, '--port') ?? 8080);
  const grpcPort = values['no-grpc']
    ? false
    : (port(values['grpc-port'] ?? env.FLOODGATE_GRPC_PORT, '--grpc-port') ?? 8081);
  const staticDir = values['static-dir'] ?? (existsSync(PAGE_DIR) ? PAGE_DIR : undefined);
  const host = values.host ?? env.FLOODGATE_HOST ?? '127.0.0.1';
  const grpcTls = tlsOptions('grpc', values, env);
  const httpTls = tlsOptions('http', values, env);
  let service: Service;
  try {
    service = await startService({
      configFile,
      mergeDomains: values['merge-domain-config'] ?? envFlag(env, 'MERGE_DOMAIN_CONFIG'),
      stopIncrementWhenOverLimit:
        values['stop-cache-key-increment-when-overlimit'] ?? envFlag(env, 'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT'),
      shadowMode: values['shadow-mode'] ?? envFlag(env, 'SHADOW_MODE'),
      store: values.store ?? env.FLOODGATE_STORE ?? 'memory',
      host,
      httpPort,
      grpcPort,
      watch: !values['no-watch'],
      logger: logLevel,
      ...(drainTimeoutMs === undefined ? {} : { drainTimeoutMs }),
      ...(storeTimeoutMs === undefined ? {} : { storeTimeoutMs }),
      ...(maxPermitWaitMs === undefined ? {} : { maxPermitWaitMs }),
      ...(grpcReadTimeoutMs === undefined ? {} : { grpcReadTimeoutMs }),
      grpcLimits,
      failure,
      headers: headers as HeaderFormat,
      ...(staticDir === undefined ? {} : { staticDir }),
      ...(grpcTls === undefined ? {} : { grpcTls }),
      ...(httpTls === undefined ? {} : { httpTls }),
      ...adminOptions(values, env),
      ...settleSecretOption(values['settle-secret-file'] ?? env.FLOODGATE_SETTLE_SECRET_FILE, env),
    });
  } catch (error) {
    if (error instanceof AdminConfigError) {
      io.err(`floodgate: ${error.message}\n`);
      return EXIT.CONFIG;
    }
    if (error instanceof ConfigError) {
      io.err(`floodgate: ${error.message}\n`);
      return EXIT.CONFIG;
    }
    if (error instanceof TlsError) {
      // Named as the command line names it: `grpcTls.certFile` is `--grpc-tls-cert` here.
      const [api, field] = error.option.split('.') as [string, string];
      const flag = `--${api.slice(0, -3)}-tls-${TLS_FLAGS[field as keyof typeof TLS_FLAGS] ?? field}`;
      io.err(`floodgate: ${flag} ${JSON.stringify(error.file)}: ${error.reason}\n`);
      return EXIT.CONFIG;
    }
    if (error instanceof StoreUrlError) {
      io.err(`floodgate: ${error.message}\n`);
      return EXIT.STORE;
    }
    if (error instanceof ListenError) {
      io.err(`floodgate: ${error.message}\n`);
      return EXIT.LISTEN;
    }
    throw error;
  }
  if (builtIn) {
    io.err(
      `floodgate: no --config and no floodgate.yaml here: serving the built-in example config (${configFile}) ` +
        `on the ${service.storeName} store. Copy it to floodgate.yaml and edit it, or pass --config <file>.\n`,
    );
  }
  if (service.httpPort !== 0) {
    io.err(
      `floodgate: ${staticDir === undefined ? 'HTTP API' : 'web page'} at ${pageUrl(host, service.httpPort, httpTls)}\n`,
    );
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        service.logger.warn({ signal }, 'second signal: exiting now');
        process.exit(EXIT.FAILURE);
      }
      stopping = true;
      service.logger.info({ signal }, 'stopping: draining in-flight calls');
      service.close().then(
        () => {
          process.off('SIGHUP', onHup);
          process.off('SIGTERM', onTerm);
          process.off('SIGINT', onInt);
          resolve(EXIT.OK);
        },
        (error: unknown) => {
          service.logger.error({ err: error }, 'error while stopping');
          resolve(EXIT.FAILURE);
        },
      );
    };
    const onHup = () => {
      service.logger.info('SIGHUP: reloading the config and the TLS files');
      service.reload();
      service.reloadTls();
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    process.on('SIGHUP', onHup);
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
  });
}

/**
 * The URL a person opens for the page: a wildcard listen address is reached through localhost, and an IPv6
 * address goes in brackets.
 */
function pageUrl(host: string, port: number, tls: TlsOptions | undefined): string {
  const reachable = host === '0.0.0.0' || host === '::' || host === '' ? 'localhost' : host;
  const bracketed = reachable.includes(':') ? `[${reachable}]` : reachable;
  return `${tls === undefined ? 'http' : 'https'}://${bracketed}:${port}/`;
}

/** The command line's name of each TLS option. */
const TLS_FLAGS = { certFile: 'cert', keyFile: 'key', clientCaFile: 'client-ca', clientSan: 'client-san' } as const;

/**
 * The TLS options of one API from `--<api>-tls-*` or `FLOODGATE_<API>_TLS_*`; for gRPC, else from
 * envoyproxy/ratelimit's variables, so its deployments can move over unchanged.
 */
function tlsOptions(
  api: 'grpc' | 'http',
  values: Record<string, string | boolean | undefined>,
  env: Record<string, string | undefined>,
): TlsOptions | undefined {
  const prefix = `FLOODGATE_${api.toUpperCase()}_TLS_`;
  const pick = (field: keyof typeof TLS_FLAGS, envoyName?: string): string | undefined => {
    const flag = values[`${api}-tls-${TLS_FLAGS[field]}`];
    if (typeof flag === 'string') return flag;
    const own = env[`${prefix}${TLS_FLAGS[field].replace('-', '_').toUpperCase()}`];
    if (own !== undefined && own !== '') return own;
    if (envoyName !== undefined && api === 'grpc' && env.GRPC_SERVER_USE_TLS?.toLowerCase() === 'true') {
      const value = env[envoyName];
      if (value !== undefined && value !== '') return value;
    }
    return undefined;
  };
  const certFile = pick('certFile', 'GRPC_SERVER_TLS_CERT');
  const keyFile = pick('keyFile', 'GRPC_SERVER_TLS_KEY');
  const clientCaFile = pick('clientCaFile', 'GRPC_CLIENT_TLS_CACERT');
  const clientSan = pick('clientSan', 'GRPC_CLIENT_TLS_SAN');
  if (certFile === undefined && keyFile === undefined) {
    if (clientCaFile !== undefined || clientSan !== undefined) {
      throw new UsageError(
        `--${api}-tls-client-ca and --${api}-tls-client-san need --${api}-tls-cert and --${api}-tls-key`,
      );
    }
    if (api === 'grpc' && env.GRPC_SERVER_USE_TLS?.toLowerCase() === 'true') {
      throw new UsageError('GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY');
    }
    return undefined;
  }
  if (certFile === undefined || keyFile === undefined) {
    throw new UsageError(`--${api}-tls-cert and --${api}-tls-key go together`);
  }
  if (clientSan !== undefined && clientCaFile === undefined) {
    throw new UsageError(`--${api}-tls-client-san checks client certificates: it needs --${api}-tls-client-ca`);
  }
  return {
    certFile,
    keyFile,
    ...(clientCaFile === undefined ? {} : { clientCaFile }),
    ...(clientSan === undefined ? {} : { clientSan }),
  };
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

/**
 * Runs the command line of this process and exits with its code: what the `floodgate` executable does.
 *
 * @example
 * ```ts
 * run(process.argv.slice(2));
 * ```
 */
export function run(argv: readonly string[]): void {
  main(argv).then(
    // Exit explicitly: a store client or a timer left by a library must not keep a stopped service alive.
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(
        `floodgate: unexpected failure: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
      );
      process.exitCode = EXIT.FAILURE;
    },
  );
}

if (isEntryPoint()) run(process.argv.slice(2));

/** The admin API's options from `--admin-*` or `FLOODGATE_ADMIN_*`; none when no credential is given. */
/**
 * The settle secret: the file's text (without its final line break), or `FLOODGATE_SETTLE_SECRET`;
 * 32 to 1024 characters. Never taken from the command line, where other users of the machine see it.
 */
function settleSecretOption(file: string | undefined, env: NodeJS.ProcessEnv): { settleSecret?: string } {
  let secret = env.FLOODGATE_SETTLE_SECRET;
  if (file !== undefined) {
    try {
      secret = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (error) {
      throw new UsageError(`--settle-secret-file cannot be read: ${(error as Error).message}`);
    }
  }
  if (secret === undefined) return {};
  if (secret.length < 32 || secret.length > 1024) {
    throw new UsageError(
      `the settle secret must be 32 to 1024 characters (random; the same in every process), got ${secret.length}`,
    );
  }
  return { settleSecret: secret };
}

function adminOptions(
  values: { 'admin-token-file'?: string; 'admin-cert-subject'?: string; 'admin-refresh-ms'?: string },
  env: NodeJS.ProcessEnv,
): { admin?: AdminOptions } {
  const token = env.FLOODGATE_ADMIN_TOKEN;
  const tokenFile = values['admin-token-file'] ?? env.FLOODGATE_ADMIN_TOKEN_FILE;
  const subject = values['admin-cert-subject'] ?? env.FLOODGATE_ADMIN_CERT_SUBJECT;
  if (token === undefined && tokenFile === undefined && subject === undefined) return {};
  const admin: AdminOptions = {};
  if (token !== undefined) admin.token = token;
  if (tokenFile !== undefined) admin.tokenFile = tokenFile;
  if (subject !== undefined) admin.certSubjects = [subject];
  const refresh = values['admin-refresh-ms'] ?? env.FLOODGATE_ADMIN_REFRESH_MS;
  if (refresh !== undefined) {
    const n = Number(refresh);
    if (!Number.isInteger(n) || n < 0 || n > 3_600_000 || refresh.trim() === '') {
      throw new UsageError('--admin-refresh-ms must be a whole number of milliseconds from 0 to 3600000');
    }
    admin.refreshMs = n;
  }
  return { admin };
}
