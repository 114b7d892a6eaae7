// Attack: one client's calls on its own full countDenied sliding log made everyone wait. Such a call reads,
// sums and writes back 1,001 entries (about 1 ms of Lua), and the store's batcher put up to 512 of them in
// one script call, during which Redis serves nobody: 0.6 s per script call, and calls on other keys waited
// up to 953 ms (bench/log-stall.ts). Now a script call holds at most MAX_SCRIPT_STATE state numbers, heavy
// calls wait in a queue of their own with one script call of them in flight per lane, and a light call
// goes ahead of the heavy queue: it waits behind at most the heavy script call in flight and one more.
//
// The bound is on the work, counted here in the script calls the store sends (the speed is the
// benchmark's): a recording client sees each script call's keys, and when it was sent and answered.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLimiter, gcra, memoryStore, type Policy, slidingLog } from '../../src/index.js';
import { compilePolicy } from '../../src/model/compile.js';
import { maxStateLength } from '../../src/model/kinds.js';
import { fromIoredis, type RedisScriptClient, redisStore } from '../../src/stores/redis/index.js';
import { HEAVY_CALL_STATE, MAX_SCRIPT_STATE } from '../../src/stores/redis/redis-store.js';
import { manualClock, SCENARIO_START_MS, uniquePrefix } from '../../src/testing/index.js';
import { startRedis, type TestRedis } from '../faults/servers.js';
import { REDIS_HOST, redisAvailable, requireServer } from './redis/servers.js';

const available = requireServer(await redisAvailable(), 'Redis at 127.0.0.1:6379');

interface ScriptCall {
  keys: readonly string[];
  /** Order of sending and of answer, on one counter. */
  sentAt: number;
  answeredAt: number;
  /** The call failed (NOSCRIPT: the store sends it again, by EVAL). */
  failed: boolean;
}

/** The adapted client, recording every script call it carries. */
function recording(client: RedisScriptClient): RedisScriptClient & { log: ScriptCall[]; tick(): number } {
  let clock = 0;
  const log: ScriptCall[] = [];
  const record = (keys: readonly string[], reply: Promise<unknown>): Promise<unknown> => {
    const entry: ScriptCall = { keys, sentAt: clock++, answeredAt: Number.POSITIVE_INFINITY, failed: false };
    log.push(entry);
    return reply.then(
      (value) => {
        entry.answeredAt = clock++;
        return value;
      },
      (error: unknown) => {
        entry.answeredAt = clock++;
        entry.failed = true;
        throw error;
      },
    );
  };
  return {
    cluster: client.cluster,
    log,
    tick: () => clock++,
    evalsha: (sha, keys, args) => record(keys, client.evalsha(sha, keys, args)),
    eval: (script, keys, args) => record(keys, client.eval(script, keys, args)),
  };
}

const full = slidingLog({ limit: 1000, windowMs: 3_600_000, countDenied: true, name: 'log' });
const open = gcra({ limit: 1_000_000, periodMs: 1000, name: 'open' });
const FULL_STATE = maxStateLength(compilePolicy(full));
const OPEN_STATE = maxStateLength(compilePolicy(open));

describe.skipIf(!available)('redis store: bounded work per script call', () => {
  // A server of its own: tests in parallel flush the shared one's scripts, and the in-order recovery
  // from NOSCRIPT that follows is not the steady state whose bound this file checks.
  let server: TestRedis;
  let raw: Redis;
  beforeAll(async () => {
    server = await startRedis();
    raw = new Redis({ host: REDIS_HOST, port: server.port });
  });
  afterAll(async () => {
    raw?.disconnect();
    await server?.stop();
  });

  it('weighs calls by the state their policies hold at their longest', () => {
    expect(FULL_STATE).toBe(1 + 2 * 1001);
    expect(OPEN_STATE).toBe(2);
    expect(FULL_STATE).toBeGreaterThan(HEAVY_CALL_STATE);
    expect(maxStateLength(compilePolicy(slidingLog({ limit: 31, windowMs: 1000 })))).toBe(HEAVY_CALL_STATE + 1);
    expect(maxStateLength(compilePolicy(slidingLog({ limit: 30, windowMs: 1000 })))).toBeLessThan(HEAVY_CALL_STATE);
  });

  it('calls on other keys wait behind at most two script calls of bounded work while a full log is flooded', async () => {
    const client = recording(fromIoredis(raw));
    const store = redisStore({ client });
    const prefix = uniquePrefix('heavy');
    const clock = manualClock({ startMs: SCENARIO_START_MS });
    const attacker = createLimiter({ store, prefix: `${prefix}-a`, clock, policies: [full], timeoutMs: 60_000 });
    const victims = createLimiter({ store, prefix: `${prefix}-v`, clock, policies: [open], timeoutMs: 60_000 });
    // The log full: 1,000 events of cost 1, each at its own µs.
    for (let i = 0; i < 1000; i++) {
      clock.advanceUs(1);
      await attacker.limit('mallory');
    }
    // 600 calls on the full log, then 50 calls on 50 other keys, in one tick: what a busy server's store sees.
    const round = async () => {
      clock.advance(1);
      const start = client.log.length;
      const flood = Array.from({ length: 600 }, () => attacker.limit('mallory'));
      const submittedAt = client.tick();
      const calls = Array.from({ length: 50 }, (_, v) => victims.limit(`victim-${v}`));
      expect((await Promise.all(calls)).every((d) => d.allowed)).toBe(true);
      expect((await Promise.all(flood)).some((d) => d.allowed)).toBe(false);
      return { start, submittedAt };
    };
    // Once to load every script the round sends (a first call of each comes back NOSCRIPT, and the
    // in-order recovery that follows is not the steady state checked here), then the round measured.
    await round();
    const { start, submittedAt } = await round();

    const sent = client.log.slice(start).filter((s) => !s.failed);
    const isHeavy = (key: string) => key.startsWith(`${prefix}-a:`);
    let inFlight = 0;
    let mostInFlight = 0;
    for (const event of sent
      .filter((s) => s.keys.some(isHeavy))
      .flatMap((s) => [
        { at: s.sentAt, step: 1 },
        { at: s.answeredAt, step: -1 },
      ])
      .sort((x, y) => x.at - y.at)) {
      inFlight += event.step;
      mostInFlight = Math.max(mostInFlight, inFlight);
    }
    // One script call of heavy calls in flight at a time.
    expect(mostInFlight).toBe(1);
    for (const s of sent) {
      const state = s.keys.reduce((sum, key) => sum + (isHeavy(key) ? FULL_STATE : OPEN_STATE), 0);
      // At most MAX_SCRIPT_STATE state numbers, but for a call that holds more alone.
      if (s.keys.length > 1) expect(state).toBeLessThanOrEqual(MAX_SCRIPT_STATE);
    }
    // Each victim's call: the heavy script calls Redis ran before it while it waited (sent before its own,
    // answered after the victims were submitted): the one in flight then, and at most one more.
    const victimCalls = sent.filter((s) => s.keys.some((key) => !isHeavy(key)));
    expect(victimCalls.reduce((n, s) => n + s.keys.length, 0)).toBe(50);
    for (const mine of victimCalls) {
      const ahead = sent.filter((s) => s.keys.some(isHeavy) && s.sentAt < mine.sentAt && s.answeredAt > submittedAt);
      expect(ahead.length).toBeLessThanOrEqual(2);
      expect(ahead.reduce((n, s) => n + s.keys.length * FULL_STATE, 0)).toBeLessThanOrEqual(2 * MAX_SCRIPT_STATE);
    }
    await attacker.reset('mallory');
  }, 60_000);

  it('keeps calls on one key in order across the heavy and the light queue', async () => {
    // One stored log under two limits (the same policy name): a call of either limit changes what the
    // next one decides, so any call overtaking another on the key changes the answers.
    const heavy = slidingLog({ limit: 1000, windowMs: 60_000, name: 'shared' });
    const light = slidingLog({ limit: 5, windowMs: 60_000, name: 'shared' });
    const plan: ('H' | 'L' | 'R')[] = [...'LLHLHHLLLRHLLLHLHLHHLLLLHH', ...'LHLHLHLHLRLLLLLLHHHHHLLLLL'] as (
      | 'H'
      | 'L'
      | 'R'
    )[];
    const run = async (store: ReturnType<typeof memoryStore> | ReturnType<typeof redisStore>, together: boolean) => {
      const clock = manualClock({ startMs: SCENARIO_START_MS });
      const prefix = uniquePrefix('order');
      const limiter = createLimiter({ store, prefix, clock, policies: [light], timeoutMs: 60_000 });
      const other = createLimiter({ store, prefix: `${prefix}-o`, clock, policies: [open], timeoutMs: 60_000 });
      const filler = createLimiter({ store, prefix: `${prefix}-f`, clock, policies: [heavy], timeoutMs: 60_000 });
      const one = (step: 'H' | 'L' | 'R', i: number): Promise<string> => {
        if (step === 'R') return limiter.reset('k', { policies: [heavy] }).then(() => 'reset');
        const policies: Policy[] = [step === 'H' ? heavy : light];
        return limiter
          .limit('k', { policies, cost: 1 + (i % 3) })
          .then((d) => `${d.allowed} ${d.remaining} ${d.retryAfterMs}`);
      };
      if (!together) {
        const answers: string[] = [];
        for (const [i, step] of plan.entries()) answers.push(await one(step, i));
        return answers;
      }
      // Calls on other keys ahead: two heavy ones (one in flight, one that may go next, which the plan's
      // first heavy call must not join), then enough light ones that the light queue still holds the
      // plan's first calls when its first heavy call could go.
      const busy = [
        ...Array.from({ length: 2 }, (_, i) => filler.limit(`busy-${i}`)),
        ...Array.from({ length: 3000 }, (_, i) => other.limit(`busy-${i}`)),
      ];
      const answers = await Promise.all(plan.map((step, i) => one(step, i)));
      await Promise.all(busy);
      return answers;
    };
    const expected = await run(memoryStore(), false);
    expect(new Set(expected).size).toBeGreaterThan(5);
    expect(await run(redisStore({ client: fromIoredis(raw) }), true)).toEqual(expected);
  });
});
