import { describe, expect, it } from 'vitest';
import { isFloodgateError } from '../../../src/index.js';
import {
  type Batch,
  type BatcherOptions,
  type CallFailure,
  callFailed,
  createBatcher,
} from '../../../src/stores/index.js';

/**
 * The request batcher reads no clock and sets no timer: these tests drive it by hand, answering each
 * batch when they choose (no sleeps), and check what was sent, when, and what each caller got.
 */

interface Call {
  readonly key: string;
  readonly n: number;
  readonly lane?: number;
  readonly group?: string;
}

interface Sent {
  readonly calls: readonly Call[];
  readonly batch: Batch;
  readonly answer: (outcomes?: readonly (string | CallFailure)[]) => void;
  readonly fail: (error: unknown) => void;
}

/** A transport whose batches stay in flight until the test answers them. */
function harness(options: Partial<BatcherOptions<Call, string>> = {}) {
  const sent: Sent[] = [];
  const batcher = createBatcher<Call, string>({
    name: 'test',
    key: (call) => call.key,
    maxInFlight: 1,
    maxBatchSize: 100,
    send: (calls, batch) =>
      new Promise((resolve, reject) => {
        sent.push({
          calls: [...calls],
          batch,
          answer: (outcomes) => resolve(outcomes ?? calls.map((c) => `${c.key}${c.n}`)),
          fail: reject,
        });
      }),
    ...options,
  });
  const results: Record<number, string> = {};
  const errors: Record<number, unknown> = {};
  const submit = (call: Call) =>
    batcher.submit(call).then(
      (r) => {
        results[call.n] = r;
      },
      (e: unknown) => {
        errors[call.n] = e;
      },
    );
  const batches = () => sent.map((s) => s.calls.map((c) => `${c.key}${c.n}`).join(' '));
  return { batcher, sent, submit, results, errors, batches };
}

/** Lets every promise callback that is due run (one turn of the event loop; no time passes). */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('request batcher', () => {
  it('sends a lone call at once, and the calls that arrive while a batch is in flight together, in order', async () => {
    const h = harness();
    void h.submit({ key: 'a', n: 1 });
    expect(h.batches()).toEqual(['a1']);
    for (const [key, n] of [
      ['b', 2],
      ['c', 3],
      ['d', 4],
    ] as const) {
      void h.submit({ key, n });
    }
    expect(h.batcher.stats()).toEqual({ queued: 3, inFlight: 1, lanes: 1 });
    h.sent[0]?.answer();
    await turn();
    expect(h.results).toEqual({ 1: 'a1' });
    expect(h.batches()).toEqual(['a1', 'b2 c3 d4']);
    h.sent[1]?.answer();
    await turn();
    expect(h.results).toEqual({ 1: 'a1', 2: 'b2', 3: 'c3', 4: 'd4' });
    expect(h.batcher.stats()).toEqual({ queued: 0, inFlight: 0, lanes: 0 });
  });

  it('keeps maxInFlight batches in flight per lane and at most maxBatchSize calls in each', async () => {
    const h = harness({ maxInFlight: 2, maxBatchSize: 2 });
    for (let n = 1; n <= 7; n++) void h.submit({ key: `k${n}`, n });
    expect(h.batches()).toEqual(['k11', 'k22']);
    h.sent[0]?.answer();
    await turn();
    expect(h.batches()).toEqual(['k11', 'k22', 'k33 k44']);
    h.sent[1]?.answer();
    await turn();
    expect(h.batches()).toEqual(['k11', 'k22', 'k33 k44', 'k55 k66']);
    expect(h.batcher.stats()).toEqual({ queued: 1, inFlight: 2, lanes: 1 });
  });

  it('refuses a call with ERR_QUEUE_FULL once maxQueued calls wait, and sends nothing for it', async () => {
    const h = harness({ maxQueued: 2 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'b', n: 2 });
    void h.submit({ key: 'c', n: 3 });
    void h.submit({ key: 'd', n: 4 });
    await turn();
    expect(h.errors[4]).toMatchObject({ code: 'ERR_QUEUE_FULL', option: 'maxQueued' });
    expect(Object.keys(h.errors)).toEqual(['4']);
    h.sent[0]?.answer();
    await turn();
    expect(h.batches()).toEqual(['a1', 'b2 c3']);
  });

  it('unordered lanes: a call waits while its key is in flight; calls on other keys pass it, later calls on its key do not', async () => {
    const h = harness({ maxInFlight: 3 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'a', n: 2 }); // a is in flight: waits, although there is room
    void h.submit({ key: 'b', n: 3 }); // queued behind it (the queue is not empty), but may pass it
    expect(h.batches()).toEqual(['a1']);
    h.sent[0]?.answer();
    await turn();
    expect(h.batches()).toEqual(['a1', 'a2 b3']);
    void h.submit({ key: 'a', n: 4 });
    void h.submit({ key: 'c', n: 5 });
    // The batch with a2 is in flight: a4 waits, c5 goes in a batch of its own.
    h.sent[1]?.answer();
    await turn();
    expect(h.batches()).toEqual(['a1', 'a2 b3', 'a4 c5']);
  });

  it('unordered lanes: calls on a busy key stay in submission order while other keys go around them', async () => {
    const h = harness({ maxInFlight: 2 });
    void h.submit({ key: 'hot', n: 1 });
    void h.submit({ key: 'x', n: 2 });
    // Both in flight; now hot, y, hot, z queue.
    void h.submit({ key: 'hot', n: 3 });
    void h.submit({ key: 'y', n: 4 });
    void h.submit({ key: 'hot', n: 5 });
    void h.submit({ key: 'z', n: 6 });
    expect(h.batches()).toEqual(['hot1', 'x2']);
    h.sent[1]?.answer(); // x2 back; hot1 still in flight
    await turn();
    expect(h.batches()).toEqual(['hot1', 'x2', 'y4 z6']);
    h.sent[0]?.answer();
    await turn();
    expect(h.batches()).toEqual(['hot1', 'x2', 'y4 z6', 'hot3 hot5']);
  });

  it('ordered lanes: batches with calls on one key may be in flight together (the transport keeps their order)', async () => {
    const h = harness({ ordered: true, maxInFlight: 2, maxBatchSize: 2 });
    for (let n = 1; n <= 4; n++) void h.submit({ key: 'k', n });
    expect(h.batches()).toEqual(['k1', 'k2']);
    h.sent[0]?.answer();
    await turn();
    expect(h.batches()).toEqual(['k1', 'k2', 'k3 k4']);
  });

  it('groups: a batch holds calls of one group; a call behind a skipped one on its key waits for it', async () => {
    const h = harness({ group: (call) => call.group ?? 'decide', maxBatchSize: 10 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'a', n: 2, group: 'cancel' });
    void h.submit({ key: 'b', n: 3 });
    void h.submit({ key: 'a', n: 4 });
    void h.submit({ key: 'c', n: 5, group: 'cancel' });
    h.sent[0]?.answer();
    await turn();
    // a2 (a cancel) may not go: a is free now, but the batch is a2's group; b3 and a4 are decisions.
    expect(h.batches()).toEqual(['a1', 'a2 c5']);
    h.sent[1]?.answer();
    await turn();
    expect(h.batches()).toEqual(['a1', 'a2 c5', 'b3 a4']);
  });

  it('lanes count their batches apart and are forgotten once idle', async () => {
    const h = harness({ lane: (call) => call.lane ?? 0 });
    void h.submit({ key: 'a', n: 1, lane: 1 });
    void h.submit({ key: 'b', n: 2, lane: 2 });
    void h.submit({ key: 'c', n: 3, lane: 1 });
    expect(h.batches()).toEqual(['a1', 'b2']);
    expect(h.sent.map((s) => s.batch.lane)).toEqual([1, 2]);
    expect(h.batcher.stats()).toEqual({ queued: 1, inFlight: 2, lanes: 2 });
    h.sent[1]?.answer();
    await turn();
    expect(h.batcher.stats()).toEqual({ queued: 1, inFlight: 1, lanes: 1 });
    h.sent[0]?.answer();
    await turn();
    h.sent[2]?.answer();
    await turn();
    expect(h.batcher.stats()).toEqual({ queued: 0, inFlight: 0, lanes: 0 });
  });

  it('delivers errors to each call: a failed batch fails all of its calls, callFailed only its own', async () => {
    const h = harness({ maxBatchSize: 10 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'b', n: 2 });
    void h.submit({ key: 'c', n: 3 });
    const down = new Error('connection reset');
    h.sent[0]?.fail(down);
    await turn();
    expect(h.errors[1]).toBe(down);
    const wrongType = new Error('WRONGTYPE');
    h.sent[1]?.answer(['b2', callFailed(wrongType)]);
    await turn();
    expect(h.results).toEqual({ 2: 'b2' });
    expect(h.errors[3]).toBe(wrongType);
  });

  it('fails every call of a batch whose sender answers with the wrong number of outcomes, or throws', async () => {
    const h = harness({ maxBatchSize: 10 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'b', n: 2 });
    void h.submit({ key: 'c', n: 3 });
    h.sent[0]?.answer([]);
    await turn();
    expect(h.errors[1]).toMatchObject({ code: 'ERR_STORE_PROTOCOL' });
    h.sent[1]?.answer(['only one']);
    await turn();
    expect([h.errors[2], h.errors[3]]).toMatchObject([{ code: 'ERR_STORE_PROTOCOL' }, { code: 'ERR_STORE_PROTOCOL' }]);

    const thrown = new Error('synchronous');
    const batcher = createBatcher<Call, string>({
      name: 'throws',
      key: (call) => call.key,
      maxInFlight: 1,
      maxBatchSize: 1,
      send: () => {
        throw thrown;
      },
    });
    await expect(batcher.submit({ key: 'a', n: 1 })).rejects.toBe(thrown);
    await expect(batcher.close()).resolves.toBeUndefined();
  });

  it('close() refuses new calls, still sends those waiting, and resolves once all are answered', async () => {
    const h = harness();
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'b', n: 2 });
    let closed = false;
    const closing = h.batcher.close().then(() => {
      closed = true;
    });
    expect(h.batcher.close()).toBe(h.batcher.close());
    await expect(h.batcher.submit({ key: 'c', n: 3 })).rejects.toMatchObject({ code: 'ERR_CLOSED' });
    h.sent[0]?.answer();
    await turn();
    expect(closed).toBe(false);
    expect(h.batches()).toEqual(['a1', 'b2']);
    h.sent[1]?.answer();
    await closing;
    expect(h.results).toEqual({ 1: 'a1', 2: 'b2' });
    await expect(
      createBatcher({
        ...h.batcher,
        name: 'idle',
        maxInFlight: 1,
        maxBatchSize: 1,
        ordered: true,
        send: () => Promise.resolve([]),
      }).close(),
    ).resolves.toBeUndefined();
  });

  it('retryInOrder: holds the lane until every batch in flight is back or retrying, then retries in sending order', async () => {
    const h = harness({ ordered: true, maxInFlight: 4, maxBatchSize: 1 });
    const log: string[] = [];
    void h.submit({ key: 'k', n: 1 });
    void h.submit({ key: 'k', n: 2 });
    void h.submit({ key: 'k', n: 3 });
    // All three in flight on one ordered connection; the server lost its scripts: the second and the
    // first fail so, in that order; the third was sent after the reload and succeeds.
    const retried = (i: number) =>
      h.sent[i]?.batch.retryInOrder(() => {
        log.push(`retry ${i + 1}`);
        return Promise.resolve(`again ${i + 1}`);
      });
    const second = retried(1);
    void h.submit({ key: 'k', n: 4 }); // waits, although there is room: the lane is recovering
    await turn();
    expect(log).toEqual([]);
    expect(h.batcher.stats()).toMatchObject({ queued: 1, inFlight: 3 });
    const first = retried(0);
    await turn();
    expect(log).toEqual([]); // the third batch is still in flight
    h.sent[2]?.answer();
    await turn();
    expect(log).toEqual(['retry 1', 'retry 2']);
    expect(await first).toBe('again 1');
    expect(await second).toBe('again 2');
    // The retries are done: the lane sends again.
    expect(h.batches()).toEqual(['k1', 'k2', 'k3', 'k4']);
  });

  it('waitForTick: calls made in the same tick share the first batch', async () => {
    const h = harness({ waitForTick: true, maxInFlight: 4 });
    void h.submit({ key: 'a', n: 1 });
    void h.submit({ key: 'b', n: 2 });
    expect(h.batches()).toEqual([]);
    await turn();
    expect(h.batches()).toEqual(['a1 b2']);
  });

  it('refuses bad options with a typed error naming the option', () => {
    const send = () => Promise.resolve([]);
    const cases: [Record<string, unknown>, string][] = [
      [{ maxInFlight: 0 }, 'maxInFlight'],
      [{ maxInFlight: 1.5 }, 'maxInFlight'],
      [{ maxBatchSize: 0 }, 'maxBatchSize'],
      [{ maxQueued: -1 }, 'maxQueued'],
      [{ ordered: 'yes' as unknown as boolean }, 'ordered'],
      [{ key: undefined }, 'key'],
      [{ send: undefined }, 'send'],
    ];
    for (const [bad, option] of cases) {
      let caught: unknown;
      try {
        createBatcher<Call, string>({
          name: 'x',
          key: (c: Call) => c.key,
          maxInFlight: 1,
          maxBatchSize: 1,
          send,
          ...bad,
        } as BatcherOptions<Call, string>);
      } catch (error) {
        caught = error;
      }
      expect(isFloodgateError(caught) && [caught.code, caught.option]).toEqual(['ERR_INVALID_OPTION', option]);
    }
  });
});
