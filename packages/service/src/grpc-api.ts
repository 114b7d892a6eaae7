import { fileURLToPath } from 'node:url';
import {
  Server,
  type ServerUnaryCall,
  type ServiceDefinition,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import type { Policy } from 'floodgate';
import type { ServiceContext } from './context.js';
import type { DecisionRequest, DescriptorOutcome, DescriptorRequest } from './engine.js';
import { classify, type FailureKind } from './failures.js';
import { rateLimitHeaders, windowSeconds } from './headers.js';

/** Folder of the `.proto` files the service answers (Envoy's rate limit API, gRPC health). */
export const PROTO_DIR = fileURLToPath(new URL('../proto', import.meta.url));
/** The Envoy rate limit service's full name. */
export const RATE_LIMIT_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
/** Largest gRPC message accepted, in bytes. */
export const MAX_GRPC_MESSAGE_BYTES = 1024 * 1024;

/** The message shapes of Envoy's rate limit API, as the loader decodes them (snake_case, enums as names). */
export interface RateLimitRequestMessage {
  domain: string;
  descriptors: {
    entries: { key: string; value: string }[];
    limit: { requests_per_unit: number; unit: string } | null;
    hits_addend: { value: number } | null;
  }[];
  hits_addend: number;
}

interface RateLimitMessage {
  name: string;
  requests_per_unit: number;
  unit: string;
}

interface DescriptorStatusMessage {
  code: 'OK' | 'OVER_LIMIT';
  current_limit?: RateLimitMessage;
  limit_remaining?: number;
  duration_until_reset?: { seconds: number; nanos: number };
}

const GRPC_STATUS: Record<FailureKind, status> = {
  invalid: status.INVALID_ARGUMENT,
  unavailable: status.UNAVAILABLE,
  timeout: status.DEADLINE_EXCEEDED,
  internal: status.INTERNAL,
};

let definitions: { rateLimit: ServiceDefinition; health: ServiceDefinition } | undefined;

/** Loads the service definitions once. */
export function grpcDefinitions(): { rateLimit: ServiceDefinition; health: ServiceDefinition } {
  if (definitions === undefined) {
    const loaded = loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], {
      includeDirs: [PROTO_DIR],
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
    });
    definitions = {
      rateLimit: loaded[RATE_LIMIT_SERVICE] as unknown as ServiceDefinition,
      health: loaded['grpc.health.v1.Health'] as unknown as ServiceDefinition,
    };
  }
  return definitions;
}

/**
 * The gRPC server: Envoy's `RateLimitService/ShouldRateLimit` and the standard health check. A failure
 * is always a proper status (INVALID_ARGUMENT, UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL), never UNKNOWN.
 */
export function createGrpcApi(context: () => ServiceContext): Server {
  const server = new Server({
    'grpc.max_receive_message_length': MAX_GRPC_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_GRPC_MESSAGE_BYTES,
  });
  const { rateLimit, health } = grpcDefinitions();
  const rateLimitImpl: UntypedServiceImplementation = {
    ShouldRateLimit: (
      call: ServerUnaryCall<RateLimitRequestMessage, unknown>,
      callback: sendUnaryData<unknown>,
    ): void => shouldRateLimit(context(), call.request, callback),
  };
  server.addService(rateLimit, rateLimitImpl);
  const healthImpl: UntypedServiceImplementation = {
    Check: (call: ServerUnaryCall<{ service: string }, unknown>, callback: sendUnaryData<unknown>): void => {
      const ctx = context();
      const name = call.request.service;
      if (name !== '' && name !== RATE_LIMIT_SERVICE) {
        callback({ code: status.NOT_FOUND, details: `unknown service ${JSON.stringify(name)}` });
        return;
      }
      if (ctx.draining) {
        callback(null, { status: 'NOT_SERVING' });
        return;
      }
      ctx.probeStore().then(
        (up) => callback(null, { status: up ? 'SERVING' : 'NOT_SERVING' }),
        () => callback(null, { status: 'NOT_SERVING' }),
      );
    },
  };
  server.addService(health, healthImpl);
  return server;
}

function shouldRateLimit(
  ctx: ServiceContext,
  message: RateLimitRequestMessage,
  callback: sendUnaryData<unknown>,
): void {
  const metrics = ctx.metrics;
  if (ctx.draining) {
    metrics.error('grpc', 'ShouldRateLimit', 'UNAVAILABLE');
    callback({ code: status.UNAVAILABLE, details: 'the service is shutting down' });
    return;
  }
  const start = performance.now();
  metrics.inFlight.grpc++;
  const done = (error: unknown, outcomes: DescriptorOutcome[] | undefined) => {
    metrics.inFlight.grpc--;
    metrics.timer('grpc', 'ShouldRateLimit').observe((performance.now() - start) / 1000);
    if (outcomes !== undefined) {
      callback(null, toResponse(outcomes));
      return;
    }
    const failure = classify(error);
    if (failure.store) ctx.storeFailed(error);
    else if (failure.kind === 'internal') ctx.logger.error({ err: error }, 'internal error answering ShouldRateLimit');
    const code = GRPC_STATUS[failure.kind];
    metrics.error('grpc', 'ShouldRateLimit', status[code]);
    callback({ code, details: failure.message });
  };
  let request: DecisionRequest;
  try {
    request = toRequest(message);
  } catch (error) {
    done(error, undefined);
    return;
  }
  const engine = ctx.engine;
  if (engine.sync) {
    let outcomes: DescriptorOutcome[];
    try {
      outcomes = engine.decideSync(request, 'limit');
    } catch (error) {
      done(error, undefined);
      return;
    }
    done(undefined, outcomes);
    return;
  }
  engine.decide(request, 'limit').then(
    (outcomes) => done(undefined, outcomes),
    (error: unknown) => done(error, undefined),
  );
}

/** Envoy's request as the engine's: `hits_addend` 0 means 1; a descriptor's own `hits_addend` wins. */
export function toRequest(message: RateLimitRequestMessage): DecisionRequest {
  const list = message.descriptors;
  const descriptors = new Array<DescriptorRequest>(list.length);
  for (let i = 0; i < list.length; i++) {
    const d = list[i] as RateLimitRequestMessage['descriptors'][number];
    const limit =
      d.limit !== null && d.limit.requests_per_unit > 0
        ? { requestsPerUnit: d.limit.requests_per_unit, unit: d.limit.unit.toLowerCase() }
        : undefined;
    descriptors[i] = { entries: d.entries, cost: d.hits_addend === null ? undefined : d.hits_addend.value, limit };
  }
  return { domain: message.domain, descriptors, cost: message.hits_addend === 0 ? 1 : message.hits_addend };
}

const UNITS: readonly [string, number][] = [
  ['YEAR', 31_536_000],
  ['MONTH', 2_592_000],
  ['WEEK', 604_800],
  ['DAY', 86_400],
  ['HOUR', 3600],
  ['MINUTE', 60],
  ['SECOND', 1],
];

/** Envoy's RateLimit for a policy: its quota per the largest unit that fits in its window. */
function currentLimit(policy: Policy | undefined, name: string, limit: number): RateLimitMessage {
  const w = policy === undefined ? 1 : windowSeconds(policy);
  for (const [unit, seconds] of UNITS) {
    if (seconds <= w) {
      const perUnit = Math.max(1, Math.floor((limit * seconds) / w));
      return { name, requests_per_unit: Math.min(perUnit, 0xffffffff), unit };
    }
  }
  return { name, requests_per_unit: Math.min(Math.floor(limit), 0xffffffff), unit: 'SECOND' };
}

/** The engine's outcomes as Envoy's response, with the IETF headers to add. */
export function toResponse(outcomes: readonly DescriptorOutcome[]): unknown {
  let over = false;
  const statuses = new Array<DescriptorStatusMessage>(outcomes.length);
  for (let i = 0; i < outcomes.length; i++) {
    const o = outcomes[i] as DescriptorOutcome;
    if (o.code === 'OVER_LIMIT') over = true;
    const d = o.decision;
    if (d === undefined) {
      statuses[i] = { code: o.code };
      continue;
    }
    const policy = o.policies?.find((p) => p.name === d.policy);
    const resetMs = Number.isFinite(d.resetAfterMs) ? d.resetAfterMs : 0;
    statuses[i] = {
      code: o.code,
      current_limit: currentLimit(policy, d.policy, d.limit),
      limit_remaining: Math.min(Math.max(0, Math.floor(d.remaining)), 0xffffffff),
      duration_until_reset: { seconds: Math.floor(resetMs / 1000), nanos: (resetMs % 1000) * 1_000_000 },
    };
  }
  return {
    overall_code: over ? 'OVER_LIMIT' : 'OK',
    statuses,
    response_headers_to_add: rateLimitHeaders(outcomes),
  };
}
