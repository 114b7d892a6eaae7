// A flood of fresh descriptor values through `floodgate serve`'s HTTP API, against keys at their limit,
// on the memory store. The client controls the descriptors (64 per request here, as in the full-size
// attack: maxKeys 1,000,000 and 2,000,000 keys; packages/service/bench/key-flood.ts runs that size).
// Scaled to maxKeys 2,000, 20 victims (the same 1% of the store as 100 in 10,000) and 20,000 fresh keys
// so that it runs in seconds. A victim let go keeps its state in the memory store's summary, so it comes
// back at its limit.
import { afterEach, describe, expect, it } from 'vitest';
import { type Service, startService } from '../../src/service.js';
import { descriptor, get, post } from '../helpers.js';

const MAX_KEYS = 2000;
const VICTIMS = 20;
const FLOOD = 10 * MAX_KEYS;
const PER_REQUEST = 64;

// Windows start at each key's first call, so no clock boundary can fall inside the test. The flood's
// rule keeps its keys longer than the victims' own.
const CONFIG = `
domains:
  - domain: api
    descriptors:
      - key: user
        policies:
          - { algorithm: fixed-window, name: per-user, limit: 1, windowMs: 3600000, align: first-request }
      - key: session
        policies:
          - { algorithm: fixed-window, name: per-session, limit: 10, windowMs: 7200000, align: first-request }
`;

let service: Service | undefined;
afterEach(async () => {
  await service?.close();
  service = undefined;
});

async function start(store: string, failure?: 'open'): Promise<Service> {
  service = await startService({
    config: CONFIG,
    store,
    httpPort: 0,
    grpcPort: 0,
    logger: process.env.LOGLEVEL ?? 'silent',
    drainTimeoutMs: 2000,
    ...(failure === undefined ? {} : { failure }),
  });
  return service;
}

/** Victim calls: how many were answered OK. */
async function victimsAdmitted(s: Service, calls: number): Promise<number> {
  let ok = 0;
  for (let v = 0; v < VICTIMS; v++) {
    for (let i = 0; i < calls; i++) {
      const answer = await post(s, '/v1/decide', { domain: 'api', descriptors: [descriptor(['user', `victim-${v}`])] });
      expect(answer.status).toBe(200);
      if (answer.body.code === 'OK') ok++;
    }
  }
  return ok;
}

/** The flood: FLOOD fresh sessions, 64 descriptors per request; returns the HTTP statuses seen. */
async function flood(s: Service): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  for (let first = 0; first < FLOOD; first += PER_REQUEST) {
    const descriptors = Array.from({ length: Math.min(PER_REQUEST, FLOOD - first) }, (_, i) =>
      descriptor(['session', `fresh-${first + i}`]),
    );
    const { status } = await post(s, '/v1/decide', { domain: 'api', descriptors });
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  return statuses;
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? Number.NaN : Number(line.slice(name.length + 1));
}

describe('hostile: a flood of fresh descriptors against keys at their limit (service, memory store)', () => {
  it(`${FLOOD} fresh keys, ${PER_REQUEST} per request, into maxKeys ${MAX_KEYS}: the victims get 0 more`, {
    timeout: 120_000,
  }, async () => {
    const s = await start(`memory:?maxKeys=${MAX_KEYS}`);
    expect(await victimsAdmitted(s, 1)).toBe(VICTIMS);
    expect(await flood(s)).toEqual(new Map([[200, Math.ceil(FLOOD / PER_REQUEST)]]));
    expect(await victimsAdmitted(s, 2)).toBe(0);
    const metrics = (await get(s, '/metrics')).text;
    expect(metric(metrics, 'floodgate_memory_store_keys')).toBe(MAX_KEYS);
    // Each fresh session stored lets a key go into the summary; one whose summary cell holds a live
    // window of a session let go (a block until that window ends) is denied, and stores nothing.
    const forced = metric(metrics, 'floodgate_memory_store_forced_evictions_total');
    expect(forced).toBeGreaterThan(MAX_KEYS);
    expect(forced).toBeLessThanOrEqual(FLOOD - (MAX_KEYS - VICTIMS));
  });

  it('whenFull=refuse with --failure open: the flood is admitted as degraded, the victims stay exact', {
    timeout: 120_000,
  }, async () => {
    const s = await start(`memory:?maxKeys=${MAX_KEYS}&whenFull=refuse`, 'open');
    expect(await victimsAdmitted(s, 1)).toBe(VICTIMS);
    expect(await flood(s)).toEqual(new Map([[200, Math.ceil(FLOOD / PER_REQUEST)]]));
    expect(await victimsAdmitted(s, 2)).toBe(0);
    const metrics = (await get(s, '/metrics')).text;
    const refused = FLOOD - (MAX_KEYS - VICTIMS);
    expect(metric(metrics, 'floodgate_memory_store_refused_keys_total')).toBe(refused);
    expect(metric(metrics, 'floodgate_degraded_decisions_total')).toBe(refused);
    expect(metric(metrics, 'floodgate_memory_store_keys')).toBe(MAX_KEYS);
  });

  it('whenFull=refuse with the default failure policy: a request needing a new key is answered 503', async () => {
    const s = await start('memory:?maxKeys=3&whenFull=refuse');
    const one = (value: string) => ({ domain: 'api', descriptors: [descriptor(['user', value])] });
    for (const user of ['a', 'b', 'c']) expect((await post(s, '/v1/decide', one(user))).status).toBe(200);
    const refused = await post(s, '/v1/decide', one('d'));
    expect(refused.status).toBe(503);
    expect(JSON.stringify(refused.body)).toMatch(/memory store is full/);
    // Held keys are still decided exactly.
    expect((await post(s, '/v1/decide', one('a'))).body.code).toBe('OVER_LIMIT');
  });
});
