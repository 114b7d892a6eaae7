import { describe, expect, it } from 'vitest';
import {
  createLimiter,
  fixedWindow,
  gcra,
  type Limiter,
  type LimiterEvents,
  memoryStore,
  type Store,
  slidingLog,
} from '../../src/index.js';
import type { StoreRequest, SyncStore } from '../../src/stores/index.js';
import { manualClock, modelStore, seededRandom } from '../../src/testing/index.js';

/**
 * A store that delegates to a real memory store and can be switched off, to drive the limiter's failure
 * handling (the stores themselves are tested against their real servers elsewhere).
 */
function switchableStore() {
  const inner = memoryStore();
  let up = true;
  let calls = 0;
  const store: Store & { up: boolean; readonly calls: number } = {
    name: 'switchable',
    hasOwnClock: false,
    get up() {
      return up;
    },
    set up(value: boolean) {
      up = value;
    },
    get calls() {
      return calls;
    },
    decide(request: StoreRequest) {
      calls++;
      return up ? inner.decide(request) : Promise.reject(new Error('ECONNREFUSED'));
    },
    reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
  };
  return store;
}

describe('circuit breaker', () => {
  it('opens after consecutive failures, skips the store for the cool-down, then probes it back', async () => {
    const clock = manualClock();
    const store = switchableStore();
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 100, periodMs: 1000 })],
      failure: 'open',
      breaker: { failureThreshold: 3, cooldownMs: 500 },
    });
    const states: string[] = [];
    limiter.on('breaker', (e) => states.push(e.state));
    store.up = false;
    for (let i = 0; i < 3; i++) expect((await limiter.limit('k')).reason).toBe('degraded');
    expect(limiter.breakerState).toBe('open');
    const callsWhenOpened = store.calls;
    for (let i = 0; i < 10; i++) expect(await limiter.limit('k')).toMatchObject({ allowed: true, reason: 'degraded' });
    expect(store.calls).toBe(callsWhenOpened);
    clock.advance(500);
    // The probe fails: open again for another cool-down.
    await limiter.limit('k');
    expect(store.calls).toBe(callsWhenOpened + 1);
    expect(limiter.breakerState).toBe('open');
    store.up = true;
    clock.advance(500);
    const probe = await limiter.limit('k');
    expect(probe.reason).toBeUndefined();
    expect(limiter.breakerState).toBe('closed');
    expect(states).toEqual(['open', 'half-open', 'open', 'half-open', 'closed']);
  });

  it('a probe that never settles gives way to a new probe after max(cooldownMs, timeoutMs, 1000 ms)', async () => {
    for (const [cooldownMs, timeoutMs, probeMs] of [
      [500, undefined, 1000],
      [0, undefined, 1000],
      [2000, undefined, 2000],
      [0, 3000, 3000],
    ] as const) {
      const clock = manualClock();
      const store = switchableStore();
      let lose = false;
      const lossy: Store = {
        ...store,
        // The probe's request is lost: no answer, no error (a timeoutMs would bound it on a real clock).
        decide: (request) => (lose ? new Promise(() => {}) : store.decide(request)),
      };
      const limiter = createLimiter({
        store: lossy,
        clock,
        policies: [gcra({ limit: 100, periodMs: 1000 })],
        failure: 'open',
        breaker: { failureThreshold: 2, cooldownMs },
        ...(timeoutMs === undefined ? {} : { timeoutMs }),
      });
      store.up = false;
      for (let i = 0; i < 2; i++) await limiter.limit('k');
      expect(limiter.breakerState).toBe('open');
      store.up = true;
      lose = true;
      clock.advance(cooldownMs);
      void limiter.limit('k'); // the probe, never answered
      lose = false;
      expect(limiter.breakerState).toBe('half-open');
      // One probe at a time, also with cooldownMs 0: the others are decided without the store.
      const calls = store.calls;
      for (let i = 0; i < 3; i++) expect((await limiter.limit('k')).reason).toBe('degraded');
      clock.advance(probeMs - 1);
      expect((await limiter.limit('k')).reason).toBe('degraded');
      expect(store.calls).toBe(calls);
      clock.advance(1);
      const probe = await limiter.limit('k');
      expect(probe.reason).toBeUndefined();
      expect(limiter.breakerState).toBe('closed');
    }
  });

  it("with failure 'throw' it fails fast while open", async () => {
    const clock = manualClock();
    const store = switchableStore();
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 1, periodMs: 1 })],
      breaker: { failureThreshold: 1 },
    });
    store.up = false;
    await expect(limiter.limit('k')).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(limiter.limit('k')).rejects.toThrow(/circuit breaker open/);
    expect(store.calls).toBe(1);
  });

  it('can be turned off, and refuses bad options', async () => {
    const store = switchableStore();
    const limiter = createLimiter({
      store,
      policies: [gcra({ limit: 1, periodMs: 1 })],
      failure: 'open',
      breaker: false,
    });
    store.up = false;
    for (let i = 0; i < 10; i++) await limiter.limit('k');
    expect(store.calls).toBe(10);
    expect(() => createLimiter({ breaker: { failureThreshold: 0 } })).toThrow(/breaker.failureThreshold/);
    expect(() => createLimiter({ breaker: { cooldownMs: -1 } })).toThrow(/breaker.cooldownMs/);
    expect(() => createLimiter({ breaker: 'yes' as never })).toThrow(/breaker/);
  });
});

describe('fallback limiter', () => {
  it('enforces its own policies when it has some (a per-process share), else the call’s', async () => {
    const clock = manualClock();
    const store = switchableStore();
    store.up = false;
    const policies = [gcra({ limit: 10, periodMs: 1000 })];
    const share = createLimiter({ clock, policies: [gcra({ limit: 2, periodMs: 1000, name: 'share' })] });
    const strict = createLimiter({ store, clock, policies, failure: { fallback: share }, breaker: false });
    const allowed = async (limiter: typeof strict) => {
      let n = 0;
      for (let i = 0; i < 12; i++) if ((await limiter.limit('k')).allowed) n++;
      return n;
    };
    expect(await allowed(strict)).toBe(2);
    expect((await strict.limit('k')).policy).toBe('share');
    const plain = createLimiter({ clock, prefix: 'plain' });
    const same = createLimiter({ store, clock, policies, failure: { fallback: plain }, breaker: false });
    expect(await allowed(same)).toBe(10);
  });
});

describe('blocked-key cache', () => {
  it('answers a denied key locally until it may pass, with the wait counting down', async () => {
    const clock = manualClock();
    const store = switchableStore();
    const limiter = createLimiter({ store, clock, policies: [gcra({ limit: 2, periodMs: 1000 })], blockedCache: true });
    await limiter.limit('hot');
    await limiter.limit('hot');
    const denied = await limiter.limit('hot');
    expect(denied).toMatchObject({ allowed: false, retryAfterMs: 500 });
    const calls = store.calls;
    clock.advance(200);
    const local = await limiter.limit('hot');
    expect(local).toMatchObject({ allowed: false, reason: 'limit', retryAfterMs: 300, resetAfterMs: 800 });
    expect(await limiter.check('hot')).toMatchObject({ allowed: false, retryAfterMs: 300 });
    expect(store.calls).toBe(calls);
    expect(limiter.blockedCache?.hits).toBe(2);
    // Another cost, another key: the store decides.
    await limiter.limit('hot', { cost: 0 });
    await limiter.limit('other');
    expect(store.calls).toBe(calls + 2);
    clock.advance(300);
    expect((await limiter.limit('hot')).allowed).toBe(true);
    expect(store.calls).toBe(calls + 3);
  });

  it('gives the same decisions as asking the store every time', async () => {
    const clockA = manualClock();
    const clockB = manualClock();
    const policies = [gcra({ limit: 5, periodMs: 1000, blockMs: 700 })];
    const cached = createLimiter({ store: switchableStore(), clock: clockA, policies, blockedCache: { maxKeys: 2 } });
    const plain = createLimiter({ store: switchableStore(), clock: clockB, policies });
    for (let i = 0; i < 400; i++) {
      const step = (i * 37) % 101;
      clockA.advance(step);
      clockB.advance(step);
      const key = `k${i % 3}`;
      const [a, b] = [await cached.limit(key), await plain.limit(key)];
      expect([a.allowed, a.reason, a.retryAfterMs]).toEqual([b.allowed, b.reason, b.retryAfterMs]);
    }
    expect(cached.blockedCache?.hits).toBeGreaterThan(0);
    expect(cached.blockedCache?.size).toBeLessThanOrEqual(2);
  });

  it('after a check, a limit still reaches the store and starts the blockMs penalty', async () => {
    const clock = manualClock();
    const limiter = createLimiter({
      store: modelStore(),
      clock,
      policies: [fixedWindow({ limit: 1, windowMs: 1000, blockMs: 60_000 })],
      blockedCache: true,
    });
    await limiter.limit('k');
    expect(await limiter.check('k')).toMatchObject({ allowed: false, reason: 'limit', retryAfterMs: 1000 });
    expect(await limiter.limit('k')).toMatchObject({ allowed: false, retryAfterMs: 60_000 });
    clock.advance(1000);
    expect(await limiter.limit('k')).toMatchObject({ allowed: false, reason: 'blocked', retryAfterMs: 59_000 });
  });

  it('a denial is answered locally only for the same booking window (maxDelayMs)', async () => {
    const clock = manualClock();
    const limiter = createLimiter({
      store: modelStore(),
      clock,
      policies: [gcra({ limit: 1, periodMs: 1000 })],
      blockedCache: true,
    });
    await limiter.limit('k');
    expect((await limiter.limit('k')).allowed).toBe(false);
    expect(await limiter.limit('k', { maxDelayMs: 2000 })).toMatchObject({ allowed: true, delayMs: 1000 });
  });

  it('gives the same decisions and leaves the same state as asking the store every time, for limit, check and status', async () => {
    const sets = [
      [fixedWindow({ limit: 2, windowMs: 1000, blockMs: 1500 })],
      [
        gcra({ limit: 3, periodMs: 1000, name: 'g' }),
        fixedWindow({ limit: 4, windowMs: 2000, blockMs: 3000, name: 'fw' }),
      ],
      [
        gcra({ limit: 2, periodMs: 1000, blockMs: 1500, name: 'g' }),
        slidingLog({ limit: 5, windowMs: 2000, countDenied: true, name: 'log' }),
      ],
      [slidingLog({ limit: 2, windowMs: 1000, countDenied: true, blockMs: 2500 })],
      // Blocks shorter than the policy's own wait: past the block, a refused call starts a new one.
      [gcra({ limit: 1, periodMs: 1000, blockMs: 100 })],
      [
        fixedWindow({ limit: 2, windowMs: 1000, blockMs: 300, name: 'fw' }),
        gcra({ limit: 3, periodMs: 1000, name: 'g' }),
      ],
      [gcra({ limit: 3, periodMs: 1000 })],
    ];
    for (const [index, policies] of sets.entries()) {
      const random = seededRandom(index + 1);
      const clock = manualClock();
      const cachedStore = modelStore();
      const plainStore = modelStore();
      const cached = createLimiter({ store: cachedStore, clock, policies, blockedCache: true });
      const plain = createLimiter({ store: plainStore, clock, policies });
      // Reads each store as it stands, bypassing any cache.
      const observe = (store: Store) => createLimiter({ store, clock, policies, prefix: 'floodgate' });
      const [seeCached, seePlain] = [observe(cachedStore), observe(plainStore)];
      const reservable = index === sets.length - 1;
      for (let i = 0; i < 300; i++) {
        clock.advance(Math.floor(random() * 400));
        const key = `k${Math.floor(random() * 2)}`;
        const pick = random();
        const options = { cost: random() < 0.7 ? 1 : 2, ...(reservable && random() < 0.3 ? { maxDelayMs: 700 } : {}) };
        const [a, b] =
          pick < 0.6
            ? [await cached.limit(key, options), await plain.limit(key, options)]
            : pick < 0.9
              ? [await cached.check(key, options), await plain.check(key, options)]
              : [await cached.status(key), await plain.status(key)];
        const step = [index, i, key, pick < 0.6 ? 'limit' : pick < 0.9 ? 'check' : 'status'];
        expect([...step, a.allowed, a.reason, a.retryAfterMs, a.delayMs]).toEqual([
          ...step,
          b.allowed,
          b.reason,
          b.retryAfterMs,
          b.delayMs,
        ]);
        const [sa, sb] = [await seeCached.status(key), await seePlain.status(key)];
        expect([...step, sa.policies]).toEqual([...step, sb.policies]);
      }
      // Sets with a countDenied log are never cached; the others are, often.
      expect([index, (cached.blockedCache?.hits ?? 0) > 0]).toEqual([index, index !== 2 && index !== 3]);
    }
  });

  it('never caches policies that count denied attempts, and forgets a key on reset', async () => {
    const clock = manualClock();
    const store = switchableStore();
    const limiter = createLimiter({
      store,
      clock,
      policies: [slidingLog({ limit: 1, windowMs: 1000, countDenied: true })],
      blockedCache: true,
    });
    await limiter.limit('k');
    await limiter.limit('k');
    await limiter.limit('k');
    expect(store.calls).toBe(3);
    const other = createLimiter({ store, clock, policies: [gcra({ limit: 1, periodMs: 1000 })], blockedCache: true });
    await other.limit('x');
    await other.limit('x');
    await other.reset('x');
    expect((await other.limit('x')).allowed).toBe(true);
  });

  it('answers nothing a policy with blockMs did not deny: it may fill, and the same call then starts its block', async () => {
    for (const sync of [true, false]) {
      const clock = manualClock();
      const policies = [
        gcra({ limit: 3, periodMs: 1000, name: 'a' }),
        fixedWindow({ limit: 4, windowMs: 10_000, blockMs: 60_000, name: 'b' }),
      ];
      // Each twin: this limiter, and another process's on the same store.
      const make = (blockedCache: boolean) => {
        const store = memoryStore();
        return [createLimiter({ store, clock, blockedCache, policies }), createLimiter({ store, clock, policies })];
      };
      const [[cached, otherA], [plain, otherB]] = [make(true), make(false)] as [Limiter[], Limiter[]];
      const both = async (options?: { cost: number }) => {
        const decisions = await Promise.all(
          [cached, plain].map((l) =>
            sync ? Promise.resolve((l as Limiter).limitSync('k', options)) : (l as Limiter).limit('k', options),
          ),
        );
        expect(decisions[0], `sync: ${sync}`).toEqual(decisions[1]);
        return decisions[1]?.allowed;
      };
      expect(await both()).toBe(true);
      // Denied by `a` alone: `b` had room for it.
      expect(await both({ cost: 3 })).toBe(false);
      // Another process's call: now `b` has no room for it either.
      for (const other of [otherA, otherB]) expect((other as Limiter).limitSync('k').allowed).toBe(true);
      clock.advance(10);
      // The same denied call: the store starts `b`'s block on it.
      expect(await both({ cost: 3 })).toBe(false);
      let admitted = 0;
      // Within `b`'s block (60 s from that call): the store admits none.
      for (let i = 0; i < 11; i++) {
        clock.advance(5000);
        if (await both()) admitted++;
      }
      expect(admitted).toBe(0);
    }
  });

  it('forgets a key when a call of another shape changes it: the remembered wait would be too short', async () => {
    const clock = manualClock();
    const make = (blockedCache: boolean) =>
      createLimiter({ clock, blockedCache, policies: [gcra({ limit: 3, periodMs: 1000 })] });
    const twins = [make(true), make(false)] as const;
    const both = async (options?: { cost: number }) => {
      const [cached, plain] = await Promise.all(twins.map((l) => l.limit('k', options)));
      expect(cached).toEqual(plain);
      return plain;
    };
    expect((await both())?.allowed).toBe(true);
    expect((await both({ cost: 3 }))?.allowed).toBe(false);
    expect((await both())?.allowed).toBe(true);
    clock.advance(10);
    // The store's wait for the cost of 3 is now a third of a second longer than the one remembered.
    expect(await both({ cost: 3 })).toMatchObject({ allowed: false, retryAfterMs: 657 });
  });

  it('forgets a key on cancel: what came back may let a remembered denial pass', async () => {
    const clock = manualClock();
    const make = (blockedCache: boolean) =>
      createLimiter({ clock, blockedCache, policies: [gcra({ limit: 1, periodMs: 1000 })] });
    const twins = [make(true), make(false)] as const;
    for (const l of twins) {
      expect(l.limitSync('k').allowed).toBe(true);
      const reservation = await l.limit('k', { maxDelayMs: 1000 });
      expect(reservation).toMatchObject({ allowed: true, delayMs: 1000 });
      expect(l.limitSync('k')).toMatchObject({ allowed: false, retryAfterMs: 2000 });
      expect(await l.cancel('k', reservation)).toBe(true);
    }
    clock.advance(1000);
    const [cached, plain] = await Promise.all(twins.map((l) => l.limit('k')));
    expect(plain?.allowed).toBe(true);
    expect(cached).toEqual(plain);
  });

  it('times a sync denial from before the store decided, as the promise methods do', async () => {
    const manual = manualClock();
    // Each reading moves time on by 5 ms: a store call takes time.
    const clock = {
      nowUs: () => {
        manual.advance(5);
        return manual.nowUs();
      },
      sleep: (ms: number, signal?: AbortSignal) => manual.sleep(ms, signal),
    };
    const limiter = createLimiter({ clock, policies: [gcra({ limit: 1, periodMs: 1000 })], blockedCache: true });
    expect(limiter.limitSync('k').allowed).toBe(true);
    const denied = limiter.limitSync('k');
    expect(denied.allowed).toBe(false);
    // The store admits the call again `retryAfterMs` after its own reading (5 ms after the cache's). The
    // next call reads the cache's time 10 ms after the store's last reading, and the store's 15 ms after:
    // 2 ms past the end of the denial. Timed from after the store's reading, the entry would still deny.
    manual.advance(denied.retryAfterMs - 8);
    expect((await limiter.limit('k')).allowed).toBe(true);
  });

  it('remembers no denial from a call in flight while the key was reset or given units back', async () => {
    for (const give of ['reset', 'settle'] as const) {
      const clock = manualClock();
      // A store that applies each call at once and answers when released (a network store's latency).
      const inner = memoryStore();
      const answers: (() => void)[] = [];
      const release = () => {
        for (const answer of answers.splice(0)) answer();
      };
      const store: Store = {
        name: 'latent',
        hasOwnClock: false,
        decide: (request) => {
          const result = inner.decideSync(request);
          const copy = { ...result, evaluations: result.evaluations.map((e) => ({ ...e })) };
          return new Promise((resolve) => answers.push(() => resolve(copy)));
        },
        reset: async (prefix, key, policies) => inner.resetSync(prefix, key, policies),
        settle: async (request) => inner.settleSync(request),
      };
      const limiter = createLimiter({
        store,
        clock,
        blockedCache: true,
        policies: [gcra({ limit: 2, periodMs: 1000 })],
      });
      const first = limiter.limit('k', { cost: 2, settle: true });
      release();
      const estimate = await first;
      expect(estimate.allowed).toBe(true);
      // Denied at the store now, answered after the key got its units back.
      const inFlight = limiter.limit('k');
      if (give === 'reset') await limiter.reset('k');
      else expect(await limiter.settle('k', estimate, { cost: 0 })).toBe(true);
      release();
      expect((await inFlight).allowed).toBe(false);
      const next = limiter.limit('k');
      release();
      expect((await next).allowed, give).toBe(true);
      expect(limiter.blockedCache?.hits).toBe(0);
    }
  });

  it("forgets a key on resetSync, and remembers the sync methods' denials at the time they were made", async () => {
    const clock = manualClock();
    const limiter = createLimiter({ clock, policies: [gcra({ limit: 1, periodMs: 1000 })], blockedCache: true });
    expect(limiter.limitSync('x').allowed).toBe(true);
    expect(limiter.limitSync('x')).toMatchObject({ allowed: false, retryAfterMs: 1000 });
    clock.advance(400);
    // The sync denial answers the promise call from the cache, counted down from when it was made.
    expect(await limiter.limit('x')).toMatchObject({ allowed: false, retryAfterMs: 600 });
    expect(limiter.blockedCache?.hits).toBe(1);
    limiter.resetSync('x');
    expect((await limiter.limit('x')).allowed).toBe(true);
    expect(limiter.blockedCache?.hits).toBe(1);
    expect(await limiter.limit('x')).toMatchObject({ allowed: false });
    limiter.resetSync('x');
    expect(limiter.limitSync('x').allowed).toBe(true);
  });
});

describe('events', () => {
  it('reports decisions with their source, store errors, and survives a throwing listener', async () => {
    const clock = manualClock();
    const store = switchableStore();
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 1, periodMs: 1000 })],
      failure: 'closed',
      blockedCache: true,
    });
    const seen: LimiterEvents['decision'][] = [];
    const errors: string[] = [];
    const off = limiter.on('decision', (e) => seen.push(e));
    limiter.on('storeError', (e) => errors.push(e.error.code));
    limiter.on('decision', () => {
      throw new Error('listener bug');
    });
    await limiter.limit('k');
    await limiter.limit('k');
    await limiter.limit('k');
    store.up = false;
    await limiter.check('j');
    expect(seen.map((e) => [e.key, e.source, e.decision.allowed, e.commit])).toEqual([
      ['k', 'store', true, true],
      ['k', 'store', false, true],
      ['k', 'cache', false, true],
      ['j', 'degraded', false, false],
    ]);
    expect(errors).toEqual(['ERR_STORE_UNAVAILABLE']);
    off();
    await limiter.limit('k');
    expect(seen).toHaveLength(4);
    expect(() => limiter.on('nope' as 'decision', () => {})).toThrow(/event/);
  });

  it('over a synchronous store, the promise methods use the blocked-key cache and the breaker', async () => {
    const clock = manualClock();
    const inner = memoryStore();
    let up = true;
    let calls = 0;
    const store: SyncStore = {
      name: 'switchable-sync',
      hasOwnClock: false,
      decideSync(request) {
        calls++;
        if (!up) throw new Error('SQLITE_IOERR');
        return inner.decideSync(request);
      },
      decide(request) {
        return Promise.resolve(this.decideSync(request));
      },
      resetSync: (prefix, key, policies) => inner.resetSync(prefix, key, policies),
      reset: (prefix, key, policies) => inner.reset(prefix, key, policies),
    };
    const limiter = createLimiter({
      store,
      clock,
      policies: [gcra({ limit: 1, periodMs: 1000 })],
      blockedCache: true,
      failure: 'open',
      breaker: { failureThreshold: 2, cooldownMs: 500 },
    });
    const sources: string[] = [];
    limiter.on('decision', (e) => sources.push(e.source));
    for (let i = 0; i < 4; i++) await limiter.limit('k');
    expect(sources).toEqual(['store', 'store', 'cache', 'cache']);
    expect(calls).toBe(2);
    // The sync methods always ask the store.
    expect(limiter.limitSync('k').allowed).toBe(false);
    expect(calls).toBe(3);
    up = false;
    for (let i = 0; i < 5; i++) expect((await limiter.limit('j')).reason).toBe('degraded');
    expect(limiter.breakerState).toBe('open');
    expect(calls).toBe(5);
    up = true;
    clock.advance(500);
    expect((await limiter.limit('j')).reason).toBeUndefined();
    expect(limiter.breakerState).toBe('closed');
  });

  it('fires on the synchronous path too', () => {
    const limiter = createLimiter({ clock: manualClock(), policies: [gcra({ limit: 1, periodMs: 1000 })] });
    const sources: string[] = [];
    limiter.on('decision', (e) => sources.push(`${e.source}:${e.decision.allowed}`));
    limiter.limitSync('k');
    limiter.limitSync('k');
    expect(sources).toEqual(['store:true', 'store:false']);
  });
});
