import { describe, expect, it } from 'vitest';
import { gcra } from '../../../src/index.js';
import { compilePolicy } from '../../../src/model/compile.js';
import { inspect } from '../../../src/model/decide.js';
import { emptyEvaluation, type State } from '../../../src/model/types.js';
import {
  callerNowUs,
  checkNowUs,
  encodeKey,
  expiryOf,
  policyId,
  recordKey,
  runCall,
  type StoreCall,
  stateKey,
  stateKeys,
} from '../../../src/stores/index.js';
import { randomPolicySets, SCENARIO_START_MS, seededRandom } from '../../../src/testing/index.js';

describe('store kit helpers', () => {
  it('checkNowUs: undefined or a whole number of µs within 2^53, else ERR_INVALID_OPTION naming clock.nowUs()', () => {
    expect(checkNowUs(undefined)).toBeUndefined();
    expect(checkNowUs(0)).toBe(0);
    expect(checkNowUs(Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
    for (const bad of [-1, 0.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, -0.1, '5' as unknown as number]) {
      expect(() => checkNowUs(bad)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'clock.nowUs()' }),
      );
    }
  });

  it('callerNowUs: a store without a clock refuses a request without the caller’s', () => {
    expect(callerNowUs('kv', 5)).toBe(5);
    expect(() => callerNowUs('kv', undefined)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION', option: 'nowUs' }),
    );
    expect(() => callerNowUs('kv', 1.5)).toThrow(expect.objectContaining({ option: 'clock.nowUs()' }));
  });

  it('expiryOf rounds the moment a state is untouched again up to its grain, never down', () => {
    expect(expiryOf(1000, 500)).toBe(1500);
    expect(expiryOf(1000, 0.25)).toBe(1001);
    expect(expiryOf(60_000_000, 1, 60_000_000)).toBe(120_000_000);
    expect(expiryOf(60_000_000, 0, 60_000_000)).toBe(60_000_000);
  });

  it('keys: a state key is its record key, a colon and the policy id; user keys are encoded', () => {
    const c = compilePolicy(gcra({ limit: 1, periodMs: 1000, name: 'per-second' }));
    expect(policyId(c)).toBe(`per-second:${c.kind}`);
    expect(recordKey('api', 'a{b}')).toBe(`api:{${encodeKey('a{b}')}}`);
    expect(stateKey('api', encodeKey('a{b}'), c)).toBe(`${recordKey('api', 'a{b}')}:${policyId(c)}`);
    expect(stateKeys('api', 'k', [c, c])).toEqual([stateKey('api', 'k', c), stateKey('api', 'k', c)]);
  });

  it('runCall: every state a call writes expires no earlier than the model reads it untouched again', () => {
    // The builders expire and drop a state at nowUs + untouchedAfterUs: an expiry earlier than the
    // model's own reading of that state would forget it while it still counts (admitting too much). The
    // evaluation's resetAfterUs is not always that (a cost no policy can take, counted by a fixed window
    // that counts every call, reports the window before the count), so this runs every policy set.
    const random = seededRandom(42);
    const sets = randomPolicySets();
    let writes = 0;
    for (let run = 0; run < 60; run++) {
      const policies = (sets[run % sets.length] ?? []).map((p) => compilePolicy(p));
      let states: (State | undefined)[] = policies.map(() => undefined);
      let nowUs = SCENARIO_START_MS * 1000;
      for (let step = 0; step < 200; step++) {
        nowUs += Math.floor(random() ** 3 * 3_000_000);
        const cost = [0, 0.5, 1, 1, 2, 7][Math.floor(random() * 6)] as number;
        const call: StoreCall = {
          op: 'decide',
          request: { prefix: 'p', key: 'k', policies, cost, commit: random() < 0.9, nowUs, maxDelayUs: 0 },
        };
        const outs = policies.map(() => emptyEvaluation());
        const untouchedAfterUs: number[] = [];
        runCall(call, states, nowUs, outs, untouchedAfterUs);
        states = states.map((s, i) => {
          const out = outs[i];
          if (out?.next === undefined) return s;
          const next = out.next.slice();
          const reading = inspect(policies[i] as (typeof policies)[0], next, nowUs).resetAfterUs;
          expect(untouchedAfterUs[i], `run ${run} step ${step} policy ${i}`).toBeGreaterThanOrEqual(reading);
          writes++;
          return next;
        });
      }
    }
    expect(writes).toBeGreaterThan(5000);
  });

  it('runCall: refunds write their state with its reading as expiry; resets write nothing', () => {
    const c = compilePolicy(gcra({ limit: 10, periodMs: 1000 }));
    const nowUs = SCENARIO_START_MS * 1000;
    const outs = [emptyEvaluation()];
    const after: number[] = [];
    const leased: StoreCall = {
      op: 'decide',
      request: { prefix: 'p', key: 'k', policies: [c], cost: 5, commit: true, nowUs, maxDelayUs: 0 },
    };
    runCall(leased, [undefined], nowUs, outs, after);
    const state = outs[0]?.next?.slice() as State;
    const refund: StoreCall = {
      op: 'refund',
      request: { prefix: 'p', key: 'k', policies: [c], leased: 5, leasedAtUs: nowUs, unused: 3, nowUs },
    };
    expect(runCall(refund, [state], nowUs, outs, after)).toBeUndefined();
    const next = outs[0]?.next as State;
    expect(after[0]).toBe(inspect(c, next, nowUs).resetAfterUs);
    expect(after[0]).toBe(200_000);
    const reset: StoreCall = { op: 'reset', request: { prefix: 'p', key: 'k', policies: [c] } };
    expect(runCall(reset, [next], nowUs, outs, after)).toBeUndefined();
    expect(outs[0]?.next).toBeUndefined();
  });
});
