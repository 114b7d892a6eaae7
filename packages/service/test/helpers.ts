import { fileURLToPath } from 'node:url';
import { credentials, loadPackageDefinition, type ServiceError } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import type { Store } from 'floodgate';
import { type Service, startService } from '../src/service.js';

/** The service's .proto files: the tests' gRPC client is generated from them. */
export const PROTO_DIR = fileURLToPath(new URL('../proto', import.meta.url));

/** A config used by most service tests: long periods, so the wall clock never changes an outcome. */
export const TEST_CONFIG = `
policies:
  per-ip:
    algorithm: fixed-window
    limit: 3
    windowMs: 3600000
domains:
  - domain: api
    descriptors:
      - key: remote_address
        policies: [per-ip]
      - key: path
        value: /login
        descriptors:
          - key: remote_address
            policies:
              - { algorithm: sliding-log, name: login, limit: 2, windowMs: 3600000 }
      - key: path
        value: /search*
        shared: true
        policies:
          - { algorithm: gcra, name: search, limit: 2, periodMs: 3600000 }
      - key: plan
        value: shadowed
        shadow: true
        policies:
          - { algorithm: fixed-window, name: shadowed, limit: 1, windowMs: 3600000 }
      - key: api_key
        value: trusted
        unlimited: true
      - key: api_key
        policies:
          - { algorithm: token-bucket, name: keys, capacity: 2, refillAmount: 1, refillIntervalMs: 3600000 }
`;

/** Starts a service on free ports with a silent logger. */
export function startTestService(
  config: string = TEST_CONFIG,
  options: { store?: string | Store; configFile?: string } = {},
): Promise<Service> {
  return startService({
    ...(options.configFile === undefined ? { config } : { configFile: options.configFile }),
    store: options.store ?? 'memory',
    httpPort: 0,
    grpcPort: 0,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 2000,
  });
}

/** POSTs JSON to the service; returns the status and the parsed body. */
export async function post(
  service: Service,
  path: string,
  body: unknown,
): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as Record<string, unknown>,
    headers: response.headers,
  };
}

/** GETs from the service. */
export async function get(service: Service, path: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`http://127.0.0.1:${service.httpPort}${path}`);
  return { status: response.status, text: await response.text() };
}

/** A descriptor from key/value pairs. */
export function descriptor(...pairs: [string, string][]): { entries: { key: string; value: string }[] } {
  return { entries: pairs.map(([key, value]) => ({ key, value })) };
}

/** A real gRPC client of Envoy's rate limit service, generated from the service's own protos. */
export interface RateLimitClient {
  shouldRateLimit(request: unknown): Promise<Record<string, unknown>>;
  check(service?: string): Promise<Record<string, unknown>>;
  close(): void;
}

/** The @grpc/grpc-js client classes of Envoy's rate limit service and the health service, from the service's own protos. */
export function loadServiceProtos<C>(): {
  RateLimitService: new (address: string, credentials: unknown, options?: unknown) => C;
  Health: new (address: string, credentials: unknown, options?: unknown) => C;
} {
  const definition = loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], {
    includeDirs: [PROTO_DIR],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
  });
  type Ctor = new (address: string, credentials: unknown, options?: unknown) => C;
  const loaded = loadPackageDefinition(definition) as unknown as {
    envoy: { service: { ratelimit: { v3: { RateLimitService: Ctor } } } };
    grpc: { health: { v1: { Health: Ctor } } };
  };
  return { RateLimitService: loaded.envoy.service.ratelimit.v3.RateLimitService, Health: loaded.grpc.health.v1.Health };
}

export function grpcClient(port: number): RateLimitClient {
  const loaded = loadServiceProtos<GenericClient>();
  const address = `127.0.0.1:${port}`;
  const rls = new loaded.RateLimitService(address, credentials.createInsecure());
  const health = new loaded.Health(address, credentials.createInsecure());
  const unary =
    (client: GenericClient, method: string) =>
    (request: unknown): Promise<Record<string, unknown>> =>
      new Promise((resolve, reject) => {
        client[method]?.(request, (error: ServiceError | null, response: Record<string, unknown>) =>
          error === null ? resolve(response) : reject(error),
        );
      });
  return {
    shouldRateLimit: unary(rls, 'ShouldRateLimit'),
    check: (service = '') => unary(health, 'Check')({ service }),
    close: () => {
      rls.close();
      health.close();
    },
  };
}

type GenericClient = {
  [method: string]:
    | ((request: unknown, callback: (error: ServiceError | null, response: never) => void) => void)
    | undefined;
} & { close(): void };

/** Polls until `predicate` holds (for events such as a file watch), failing after `timeoutMs`. */
export async function waitFor(predicate: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
