import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attack, measure, pythonH2, type Running, serve } from './h2-harness.js';

// The gRPC server against hostile HTTP/2 clients built on python3-h2 (an independent stack), run as its
// own process, with normal gRPC calls (node:http2) measured during each attack. The attacks are scaled
// down here; bench/h2-attacks.ts runs them full size. Bounds are wide: the machine may be loaded, and
// the python attacker itself takes a core; the figures of a quiet run are in docs/service.md.

const RSS_LIMIT_MB = 150;
const P99_LIMIT_MS = 1500;
const ENHANCE_YOUR_CALM = '11';
const NO_ERROR = '0';
const LIMIT = (limit: string) => new RegExp(`floodgate_grpc_limit_hits_total\\{limit="${limit}"\\} (\\d+)`);

const enabled = pythonH2();
let running: Running | undefined;

beforeAll(async () => {
  if (!enabled) return;
  running = await serve(['--grpc-frame-timeout-ms', '1000', '--grpc-no-stream-timeout-ms', '1500']);
}, 30_000);

afterAll(async () => {
  await running?.stop();
});

function service(): Running {
  if (running === undefined) throw new Error('the service did not start');
  return running;
}

describe.skipIf(!enabled)('gRPC server against python3-h2 attackers', () => {
  it.each(['ping', 'settings'])(
    'ends %s floods that never read with GOAWAY ENHANCE_YOUR_CALM; memory and normal calls hold',
    async (kind) => {
      const s = service();
      const m = await measure(s, () => attack<{ outcomes: Record<string, number> }>('flood', s.grpcPort, kind, 10, 2));
      expect(m.result.outcomes).toEqual({ [ENHANCE_YOUR_CALM]: 10 });
      expect(m.rssMaxMb).toBeLessThan(RSS_LIMIT_MB);
      expect(m.failed).toBe(0);
      expect(m.p99Ms).toBeLessThan(P99_LIMIT_MS);
      expect(await s.metric(LIMIT('control_frames'))).toBeGreaterThanOrEqual(10);
    },
    60_000,
  );

  it('ends connections that send a frame one byte a second (frame timeout)', async () => {
    const s = service();
    const m = await measure(s, () => attack<{ outcomes: Record<string, number> }>('slowloris', s.grpcPort, 100, 6));
    expect(m.result.outcomes).toEqual({ [ENHANCE_YOUR_CALM]: 100 });
    expect(m.rssMaxMb).toBeLessThan(RSS_LIMIT_MB);
    expect(m.failed).toBe(0);
    expect(m.p99Ms).toBeLessThan(P99_LIMIT_MS);
    expect(await s.metric(LIMIT('frame_timeout'))).toBeGreaterThanOrEqual(100);
  }, 60_000);

  it('ends connections that hold unfinished 240 kB header blocks', async () => {
    const s = service();
    const m = await measure(s, () =>
      attack<{ outcomes: Record<string, number> }>('headerblock', s.grpcPort, 100, 240, 6),
    );
    expect(m.result.outcomes).toEqual({ [ENHANCE_YOUR_CALM]: 100 });
    expect(m.rssMaxMb).toBeLessThan(RSS_LIMIT_MB);
    expect(m.failed).toBe(0);
    expect(m.p99Ms).toBeLessThan(P99_LIMIT_MS);
  }, 60_000);

  it('closes connections that open no stream (GOAWAY NO_ERROR)', async () => {
    const s = service();
    const m = await measure(s, () => attack<{ outcomes: Record<string, number> }>('nostream', s.grpcPort, 200, 6));
    expect(m.result.outcomes).toEqual({ [NO_ERROR]: 200 });
    expect(m.rssMaxMb).toBeLessThan(RSS_LIMIT_MB);
    expect(m.failed).toBe(0);
    expect(await s.metric(LIMIT('no_stream_timeout'))).toBeGreaterThanOrEqual(200);
  }, 60_000);

  it('ends a rapid-reset connection past its reset budget (about 2,000 streams)', async () => {
    const s = service();
    const m = await measure(s, () =>
      attack<{ outcome: string; streamsSent: number }>('rapidreset', s.grpcPort, 50_000),
    );
    expect(m.result.outcome).toBe(ENHANCE_YOUR_CALM);
    // 2,000 at once, 200 a second more: the attacker's batches of 100 overshoot a little.
    expect(m.result.streamsSent).toBeGreaterThanOrEqual(2000);
    expect(m.result.streamsSent).toBeLessThan(10_000);
    expect(m.rssMaxMb).toBeLessThan(RSS_LIMIT_MB);
    expect(m.failed).toBe(0);
    expect(m.p99Ms).toBeLessThan(P99_LIMIT_MS);
    expect(await s.metric(LIMIT('resets'))).toBe(1);
  }, 60_000);
});
