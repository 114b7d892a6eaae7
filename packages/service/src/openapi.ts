import { MAX_DESCRIPTORS, MAX_ENTRIES, MAX_ENTRY_LENGTH, OVERRIDE_UNITS } from './engine.js';
import { VERSION } from './version.js';

const problem = { $ref: '#/components/responses/Problem' };

let cached: unknown;

/** The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json`. */
export function openApiDocument(): unknown {
  cached ??= build();
  return cached;
}

function decisionOperation(summary: string, description: string) {
  return {
    summary,
    description,
    requestBody: {
      required: true,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/DecisionRequest' } } },
    },
    responses: {
      '200': {
        description: 'One outcome per descriptor, in order. A denial is a 200 with `code: OVER_LIMIT`.',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/DecisionResponse' } } },
      },
      '400': problem,
      '404': problem,
      '413': problem,
      '503': problem,
      '504': problem,
    },
  };
}

/** A permit call: its request schema and the schema of its 200 answer. */
function permitOperation(summary: string, description: string, request: string, answer: string) {
  return {
    post: {
      summary,
      description,
      requestBody: {
        required: true,
        content: { 'application/json': { schema: { $ref: `#/components/schemas/${request}` } } },
      },
      responses: {
        '200': {
          description: 'Answered; a refusal is a 200 with `allowed: false`.',
          content: { 'application/json': { schema: { $ref: `#/components/schemas/${answer}` } } },
        },
        '400': problem,
        '404': problem,
        '413': problem,
        '503': problem,
        '504': problem,
      },
    },
  };
}

/** The permit schemas: calls and answers. */
function permitSchemas() {
  const entries = {
    type: 'array',
    minItems: 1,
    maxItems: MAX_ENTRIES,
    items: { $ref: '#/components/schemas/Entry' },
    description: 'The descriptor: its rule must have a `concurrency` limit.',
  };
  const leaseId = {
    type: 'string',
    pattern: '^[A-Za-z0-9_-]{22}$',
    description: 'The lease id an acquire answered.',
  };
  const matched = {
    matched: { type: 'boolean', description: 'False when the descriptor matched no rule with a concurrency limit.' },
    rule: { type: ['string', 'null'] },
  };
  return {
    PermitAcquire: {
      type: 'object',
      required: ['domain', 'entries'],
      additionalProperties: false,
      properties: {
        domain: { type: 'string', minLength: 1 },
        entries,
        cost: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER, default: 1 },
        timeoutMs: {
          type: 'integer',
          minimum: 0,
          default: 0,
          description:
            'Wait up to this long, ms, in the descriptor’s queue (first come, first served across the fleet) when no permit is free; 0: never wait. At most the service’s maxPermitWaitMs (default 30000); refused when the queue holds the rule’s maxQueue waiters.',
        },
      },
    },
    PermitLease: {
      type: 'object',
      required: ['domain', 'entries', 'leaseId'],
      additionalProperties: false,
      properties: { domain: { type: 'string', minLength: 1 }, entries, leaseId },
    },
    PermitGrant: {
      type: 'object',
      required: ['matched', 'rule', 'allowed'],
      properties: {
        ...matched,
        allowed: { type: 'boolean' },
        limit: { type: 'integer' },
        inFlight: { type: 'integer', description: 'Cost in flight after the call.' },
        remaining: { type: 'integer' },
        retryAfterMs: {
          type: ['integer', 'null'],
          description: 'Until enough leases run out if none is released first (an upper bound); null: never.',
        },
        resetAfterMs: { type: 'integer' },
        policy: { type: 'string' },
        reason: { type: 'string', enum: ['limit', 'exceeds-capacity', 'timeout', 'queue-full'] },
        waitedMs: { type: 'integer', description: 'A waiting acquire (timeoutMs): how long it waited.' },
        leaseId,
        fence: { type: 'integer', description: 'Strictly increases per descriptor: a fencing token.' },
        leaseMs: { type: 'integer' },
      },
    },
    PermitRefreshed: {
      type: 'object',
      required: ['matched', 'rule', 'refreshed'],
      properties: { ...matched, refreshed: { type: 'boolean' } },
    },
    PermitReleased: {
      type: 'object',
      required: ['matched', 'rule', 'released'],
      properties: {
        ...matched,
        released: { type: 'boolean', description: 'True only for the call that ended a live lease.' },
      },
    },
  };
}

function build(): unknown {
  return {
    openapi: '3.1.0',
    info: {
      title: 'floodgate',
      version: VERSION,
      description:
        'Rate limiting as a service. Each descriptor of a request is matched to a rule of its domain (exact value, then longest `prefix*`, then any value) and decided by the rule’s policies. The same service answers Envoy’s `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over gRPC.',
    },
    paths: {
      '/v1/decide': {
        post: decisionOperation('Decide and consume', 'Decides every descriptor and consumes its cost when admitted.'),
      },
      '/v1/check': {
        post: decisionOperation('Decide without consuming', 'Decides as /v1/decide would, changing nothing.'),
      },
      '/v1/status': {
        post: decisionOperation(
          'State of each descriptor',
          'Reports each descriptor’s state (a cost-0 check); changes nothing.',
        ),
      },
      '/v1/permits/acquire': permitOperation(
        'Take a permit',
        'Takes a permit of the concurrency limit of the descriptor’s rule; with timeoutMs, waits for one in the descriptor’s queue (a client that goes away leaves it). Give it back with /v1/permits/release; a holder that never does frees it when its lease runs out (on the store’s clock).',
        'PermitAcquire',
        'PermitGrant',
      ),
      '/v1/permits/refresh': permitOperation(
        'Extend a lease',
        'Extends a live lease to the rule’s leaseMs from now; a lease that ran out is never taken back.',
        'PermitLease',
        'PermitRefreshed',
      ),
      '/v1/permits/release': permitOperation(
        'Give a permit back',
        'Ends the lease; idempotent.',
        'PermitLease',
        'PermitReleased',
      ),
      '/v1/reset': {
        post: {
          summary: 'Forget descriptors',
          description: 'Forgets the state of each matched descriptor under its rule’s policies.',
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { $ref: '#/components/schemas/DecisionRequest' } } },
          },
          responses: {
            '200': {
              description: 'Which descriptors matched a rule (and were reset).',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: {
                      descriptors: {
                        type: 'array',
                        items: {
                          type: 'object',
                          properties: { matched: { type: 'boolean' }, rule: { type: ['string', 'null'] } },
                        },
                      },
                    },
                  },
                },
              },
            },
            '400': problem,
            '404': problem,
            '503': problem,
          },
        },
      },
      '/v1/settle': {
        post: {
          summary: 'Charge calls their actual cost',
          description:
            'Settles descriptors decided by `/v1/decide` with `settle: true`: each is charged its actual `cost`. Above the estimate the difference is charged whatever the key’s state, past the limit (a debt the next calls wait for); below it the difference comes back as far as the policy can give it. A settlement settles once (in a fleet sharing `--settle-secret-file`, once in the fleet); a forged or altered one, one for other entries, or one settled already is refused (400, `field` naming it) before its store call. Every cost and entry is checked before any store call.',
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { $ref: '#/components/schemas/SettleRequest' } } },
          },
          responses: {
            '200': {
              description: 'One outcome per descriptor, in order.',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: {
                      descriptors: {
                        type: 'array',
                        items: {
                          type: 'object',
                          properties: {
                            rule: { type: ['string', 'null'] },
                            settled: {
                              type: 'boolean',
                              description:
                                'False when there was nothing to settle: the estimate exactly, or a refund past its settlement’s expiry.',
                            },
                          },
                        },
                      },
                    },
                  },
                },
              },
            },
            '400': problem,
            '404': problem,
            '413': problem,
            '503': problem,
            '504': problem,
          },
        },
      },
      '/v1/config': {
        get: { summary: 'The config in use', responses: { '200': { description: 'Domains and rules.' } } },
      },
      '/v1/stats': {
        get: {
          summary: 'Live decision rates',
          parameters: [
            {
              name: 'window',
              in: 'query',
              schema: { type: 'integer', minimum: 1, maximum: 60, default: 1 },
              description: 'Seconds to average over.',
            },
          ],
          responses: {
            '200': {
              description:
                'Allowed, denied and shadow-denied decisions per second, each decision once (`decisions`) and by policy; store health (reachable, circuit breaker, errors, degraded decisions) and decision latency percentiles; the most denied keys of the last 30 to 60 s (a bounded sketch).',
            },
          },
        },
      },
      '/healthz': { get: { summary: 'Liveness', responses: { '200': { description: 'The process answers.' } } } },
      '/readyz': {
        get: {
          summary: 'Readiness',
          responses: {
            '200': { description: 'Ready: the store answers and the service is not shutting down.' },
            '503': { description: 'Not ready.' },
          },
        },
      },
      '/metrics': {
        get: { summary: 'Prometheus metrics', responses: { '200': { description: 'Text exposition format.' } } },
      },
    },
    components: {
      schemas: {
        ...permitSchemas(),
        Entry: {
          type: 'object',
          required: ['key', 'value'],
          additionalProperties: false,
          properties: {
            key: { type: 'string', minLength: 1, maxLength: MAX_ENTRY_LENGTH },
            value: { type: 'string', minLength: 1, maxLength: MAX_ENTRY_LENGTH },
          },
        },
        Descriptor: {
          type: 'object',
          required: ['entries'],
          additionalProperties: false,
          properties: {
            entries: {
              type: 'array',
              minItems: 1,
              maxItems: MAX_ENTRIES,
              items: { $ref: '#/components/schemas/Entry' },
            },
            cost: { type: 'number', minimum: 0, description: 'This descriptor’s cost, instead of the request’s.' },
            limit: {
              type: 'object',
              description: 'A limit to apply instead of the configured one (a fixed window of one unit).',
              required: ['requestsPerUnit', 'unit'],
              properties: {
                requestsPerUnit: { type: 'integer', minimum: 1 },
                unit: { type: 'string', enum: OVERRIDE_UNITS },
              },
            },
          },
        },
        DecisionRequest: {
          type: 'object',
          required: ['domain', 'descriptors'],
          additionalProperties: false,
          properties: {
            domain: { type: 'string', minLength: 1 },
            descriptors: {
              type: 'array',
              minItems: 1,
              maxItems: MAX_DESCRIPTORS,
              items: { $ref: '#/components/schemas/Descriptor' },
            },
            cost: { type: 'number', minimum: 0, default: 1 },
            settle: {
              type: 'boolean',
              default: false,
              description:
                '`/v1/decide` only: the costs are estimates. Each descriptor admitted under a rule whose policies can settle (gcra, a continuous tokenBucket, a leakyBucket as a meter) answers a `settlement` for `/v1/settle`.',
            },
          },
          example: {
            domain: 'api',
            descriptors: [{ entries: [{ key: 'remote_address', value: '203.0.113.7' }] }],
          },
        },
        PolicyDecision: {
          type: 'object',
          properties: {
            policy: { type: 'string' },
            allowed: { type: 'boolean' },
            limit: { type: 'number' },
            remaining: { type: 'number' },
            retryAfterMs: { type: ['number', 'null'], description: '`null` when waiting never helps.' },
            resetAfterMs: { type: 'number' },
            delayMs: { type: 'number' },
            reason: { type: 'string', enum: ['limit', 'blocked', 'exceeds-capacity', 'degraded'] },
          },
        },
        DescriptorOutcome: {
          type: 'object',
          properties: {
            code: { type: 'string', enum: ['OK', 'OVER_LIMIT'] },
            matched: {
              type: 'boolean',
              description: 'A rule with policies, an unlimited rule, or a request limit applied.',
            },
            rule: { type: ['string', 'null'] },
            shadow: { type: 'boolean', description: 'Shadow mode: a denial is counted but answered OK.' },
            unlimited: { type: 'boolean' },
            allowed: { type: 'boolean' },
            limit: { type: 'number' },
            remaining: { type: 'number' },
            retryAfterMs: { type: ['number', 'null'] },
            resetAfterMs: { type: 'number' },
            delayMs: { type: 'number' },
            policy: { type: 'string', description: 'The binding policy.' },
            reason: { type: 'string', enum: ['limit', 'blocked', 'exceeds-capacity', 'degraded'] },
            policies: { type: 'array', items: { $ref: '#/components/schemas/PolicyDecision' } },
            settlement: {
              $ref: '#/components/schemas/Settlement',
              description:
                'With `settle: true`, admitted under policies that can settle: send it back to `/v1/settle`.',
            },
            charged: {
              type: 'boolean',
              description:
                'A `charge_on_stream_done` rule charged the descriptor’s own cost past the limit (a debt) and answered OK.',
            },
          },
        },
        Settlement: {
          type: 'object',
          description: 'Signed by the service: send it back unchanged. Valid on any process sharing the settle secret.',
          properties: {
            id: { type: 'string', maxLength: 16 },
            cost: { type: 'number', description: 'The estimate the call was admitted with.' },
            policies: { type: 'array', items: { type: 'string' }, maxItems: 32 },
            atUs: { type: 'integer' },
            expiresAtMs: { type: 'number', description: 'Past it, a settle charges a debt but gives nothing back.' },
            signature: { type: 'string' },
          },
        },
        SettleRequest: {
          type: 'object',
          required: ['domain', 'descriptors'],
          additionalProperties: false,
          properties: {
            domain: { type: 'string', minLength: 1 },
            descriptors: {
              type: 'array',
              minItems: 1,
              maxItems: MAX_DESCRIPTORS,
              items: {
                type: 'object',
                required: ['entries', 'settlement', 'cost'],
                additionalProperties: false,
                properties: {
                  entries: {
                    type: 'array',
                    minItems: 1,
                    maxItems: MAX_ENTRIES,
                    items: { $ref: '#/components/schemas/Entry' },
                  },
                  settlement: { $ref: '#/components/schemas/Settlement' },
                  cost: { type: 'number', minimum: 0, description: 'What the call really cost.' },
                },
              },
            },
          },
        },
        DecisionResponse: {
          type: 'object',
          properties: {
            code: { type: 'string', enum: ['OK', 'OVER_LIMIT'] },
            allowed: { type: 'boolean' },
            descriptors: { type: 'array', items: { $ref: '#/components/schemas/DescriptorOutcome' } },
            headers: {
              type: 'object',
              additionalProperties: { type: 'string' },
              description: 'IETF RateLimit-Policy and RateLimit headers (and Retry-After) to forward to the client.',
            },
          },
        },
        Problem: {
          type: 'object',
          description: 'RFC 9457 problem details.',
          properties: {
            type: { type: 'string' },
            title: { type: 'string' },
            status: { type: 'integer' },
            detail: { type: 'string' },
            field: { type: 'string', description: 'The request field at fault.' },
          },
        },
      },
      responses: {
        Problem: {
          description: 'An error, as RFC 9457 problem details.',
          content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
        },
      },
    },
  };
}
