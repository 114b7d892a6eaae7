import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attack, pythonH2, type Running, serve } from './h2-harness.js';

// Requests and frame sequences that break RFC 9113, sent by python3-h2's stack (outbound validation
// off): each is answered with the stream or connection error the RFC names, and none is decided.

const PROTOCOL_ERROR = 1;
const FLOW_CONTROL_ERROR = 3;
const STREAM_CLOSED = 5;

interface Answer {
  goaway: number | null;
  reset: number | null;
  resetStream: number | null;
  answered: number[];
  keptServing: boolean;
}

const enabled = pythonH2();
let running: Running | undefined;

beforeAll(async () => {
  if (enabled) running = await serve();
}, 30_000);

afterAll(async () => {
  await running?.stop();
});

const DECISIONS = /floodgate_decisions_total\{[^}]*outcome="allowed"\} (\d+)/;

describe.skipIf(!enabled)('gRPC server: malformed requests from python3-h2 (RFC 9113 §8.2-8.3)', () => {
  const streamErrors = [
    'no-method',
    'no-scheme',
    'no-path',
    'unknown-pseudo',
    'duplicate-pseudo',
    'pseudo-after-regular',
    'uppercase-name',
    'connection-header',
    'te-not-trailers',
    'all-of-the-issue',
    'content-length-mismatch',
  ];
  it.each(streamErrors)('%s: RST_STREAM PROTOCOL_ERROR, not decided, the connection kept', async (name) => {
    const s = running as Running;
    const before = await s.metric(DECISIONS);
    const answer = await attack<Answer>('malformed', s.grpcPort, name);
    expect(answer).toMatchObject({ goaway: null, reset: PROTOCOL_ERROR, resetStream: 1, keptServing: true });
    // Only the good request that followed was decided.
    expect(await s.metric(DECISIONS)).toBe(before + 1);
  });
});

describe.skipIf(!enabled)('gRPC server: stream states and flow control from python3-h2 (RFC 9113 §5.1)', () => {
  it('HEADERS on a stream id below the last one: GOAWAY PROTOCOL_ERROR', async () => {
    const answer = await attack<Answer>('malformed', (running as Running).grpcPort, 'headers-below-last');
    expect(answer.goaway).toBe(PROTOCOL_ERROR);
    expect(answer.keptServing).toBe(false);
  });

  it('DATA on a stream closed both ways: GOAWAY STREAM_CLOSED', async () => {
    const answer = await attack<Answer>('malformed', (running as Running).grpcPort, 'data-on-closed');
    expect(answer.answered).toEqual([1]);
    expect(answer.goaway).toBe(STREAM_CLOSED);
  });

  it.each(['priority-self', 'headers-priority-self'])(
    '%s (a stream depending on itself): RST_STREAM PROTOCOL_ERROR, the connection kept',
    async (name) => {
      const answer = await attack<Answer>('malformed', (running as Running).grpcPort, name);
      expect(answer).toMatchObject({ goaway: null, reset: PROTOCOL_ERROR, resetStream: 1, keptServing: true });
    },
  );

  it('DATA past the stream window: RST_STREAM FLOW_CONTROL_ERROR, the connection kept', async () => {
    const answer = await attack<Answer>('malformed', (running as Running).grpcPort, 'window-exceeded');
    expect(answer).toMatchObject({ goaway: null, reset: FLOW_CONTROL_ERROR, resetStream: 1, keptServing: true });
  });
});
