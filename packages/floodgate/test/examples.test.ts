import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

// Every example runs as its own process, exactly as a reader would run it, but on the sources: the package
// tsconfig maps `floodgate` and `floodgate/testing` to src, so no build is needed and nothing goes stale.
const root = fileURLToPath(new URL('../../../', import.meta.url));
const tsx = fileURLToPath(new URL('../../../node_modules/.bin/tsx', import.meta.url));

async function run(example: string, ...args: string[]): Promise<string> {
  const { stdout } = await promisify(execFile)(
    tsx,
    ['--tsconfig', 'packages/floodgate/tsconfig.json', `packages/floodgate/examples/${example}`, ...args],
    { cwd: root, encoding: 'utf8', timeout: 120_000 },
  );
  return stdout;
}

describe('examples', { timeout: 150_000 }, () => {
  it('api-limit: the burst cap binds first, then the per-minute budget; denials consume nothing', async () => {
    const out = await run('api-limit.ts');
    expect(out).toContain('acme sends 25 at once: 10 admitted, 15 denied');
    expect(out).toContain('first denial: policy per-second, retry in 100 ms');
    expect(out).toContain('"status":429');
    expect(out).toContain('"Retry-After":"1"');
    expect(out).toContain('status: per-minute remaining 90, per-second remaining 0');
    expect(out).toContain('t= 1.0s acme, 20 in the last second: 10 admitted; 10 by per-second');
    expect(out).toMatch(/t=12\.0s acme, 20 in the last second: \d+ admitted; \d+ by per-minute/);
    expect(out).toContain('globex sends 1: admitted');
    expect(out).toContain('acme after a minute of quiet: remaining 10, resetAfterMs 0');
  });

  it('login-attempts: the account and the address each land in the penalty box', async () => {
    const out = await run('login-attempts.ts');
    expect(out).toContain('12:00:40 alice    from 203.0.113.9   → 401 wrong password (attempts left: 0)');
    expect(out).toContain('12:00:50 alice    from 203.0.113.9   → 429 limit by account, retry in 15 min 0 s');
    expect(out).toContain('12:01:00 alice    from 203.0.113.9   → 429 blocked by account, retry in 14 min 50 s');
    expect(out).toContain('12:05:00 alice    from 198.51.100.7  → 429 blocked by account');
    expect(out).toContain('12:16:00 alice    from 198.51.100.7  → 200 welcome');
    expect(out).toContain('user14   from 203.0.113.9   → 429 limit by ip, retry in 60 min 0 s');
    expect(out).toContain('user15   from 203.0.113.9   → 429 blocked by ip');
    expect(out).toContain('user1    from 192.0.2.44    → 401 wrong password');
  });

  it('spend-budget: fractional amounts, a refused overspend, leak-back and exceeds-capacity', async () => {
    const out = await run('spend-budget.ts');
    expect(out).toContain('day  0 groceries 30.00: paid, about 970 whole units left');
    expect(out).toContain('day  0 a laptop 990.00: refused (limit), possible in 14.4 h');
    expect(out).toContain('day  0 a phone 719.50: paid, about 0 whole units left');
    expect(out).toContain('day  0 a sticker 0.25: refused (limit), possible in 10.8 min');
    expect(out).toContain('day  3 status: about 100 whole units available');
    expect(out).toContain('day  3 dinner 99.75: paid');
    expect(out).toContain('day  3 a car 1200.00: refused (exceeds-capacity), possible never');
    expect(out).toContain('day 33 status: about 1000 whole units available, resetAfterMs 0');
  });

  it('openai-proxy: held on the estimate, settled at the usage, a debt waited for, an estimate kept on failure', async () => {
    const out = await run('openai-proxy.ts');
    const lines = out.trim().split('\n');
    // Three at once, each settled at what it used: 3 × 980 spent, 7060 of 10,000 left.
    expect(lines.slice(0, 3).every((l) => l.includes('alice max_tokens  3000: 200, used 980 tokens'))).toBe(true);
    expect(lines[3]).toBe(
      't=  0s alice max_tokens  9000: 429 Rate limit reached for tokens per minute: requested 9060, retry after 12 s; 7060 tokens left',
    );
    expect(lines[4]).toBe('t=  0s alice max_tokens  1000: 200, used 9004 tokens; 0 tokens left');
    expect(lines[5]).toBe(
      't=  0s alice max_tokens    10: 429 Rate limit reached for tokens per minute: requested 70, retry after 13 s; 0 tokens left',
    );
    expect(out).toContain('t=  0s bob   max_tokens  2000: 500 upstream failed; 7258 tokens left');
    expect(out).toContain("bob's budget after the failed call: 7258 tokens");
    expect(out).toContain('t= 30s alice max_tokens    10: 200, used 83 tokens; 2973 tokens left');
    expect(out).toContain('t= 90s alice max_tokens  9000: 200, used 2780 tokens; 7220 tokens left');
  });

  it('batch-import: cost per record, waiting as told, splitting what can never fit', async () => {
    const out = await run('batch-import.ts');
    expect(out).toContain('t=  0.0s tenant-a imports 4000 rows: not now, retry in 5000 ms');
    expect(out).toContain('t=  5.0s tenant-a imports 4000 rows: accepted, 0 rows of room left');
    expect(out).toContain('tenant-a imports 25000 rows: rejected, larger than 10000 rows: split it');
    expect(out).toContain('t= 55.0s tenant-a chunk of 5000 rows accepted (25000/25000)');
    expect(out).toContain('tenant-b imports 10000 rows: accepted');
  });

  it('waiting: acquire, throttle, reservations with cancel and the smooth limiter, in order and on time', async () => {
    const out = await run('waiting.ts');
    expect(out).toContain('t=   0ms job a calls\n  t= 200ms job b calls\n  t= 400ms job c calls');
    expect(out).toContain('a job that waits at most 100 ms: ERR_TIMEOUT');
    expect(out).toContain('t= 400ms send #1\n  t= 600ms send #2\n  t= 800ms send #3\n  t=1000ms send #4');
    expect(out).toContain('1 call(s) refused at once: ERR_QUEUE_FULL');
    expect(out).toContain('told to wait: 0 ms, 200 ms, 400 ms, 600 ms');
    expect(out).toContain('cancel the 2nd (a later one is booked behind it): gave back false');
    expect(out).toContain('cancel the 4th (the last one): gave back true');
    expect(out).toContain('the next booking takes its slot: wait 600 ms');
    expect(out).toContain('0.000, 1.375, 1.125, 0.875, 0.625, 0.500, 0.500, 0.500');
  });

  it('demo: every algorithm admits and denies a burst', async () => {
    const out = await run('demo.ts');
    expect(out).toMatch(/gcra-5-per-5s\s+t=0s {2}✓ ✓ ✓ ✓ ✓ ✗ ✗ ✗/);
  });

  it('compare-algorithms: the tables in docs/algorithms.md are the ones the library produces', async () => {
    const out = await run('compare-algorithms.ts');
    // Compared cell by cell: the padding of a markdown table is the formatter's business.
    const normalize = (text: string) => text.replace(/ {2,}/g, ' ').replace(/-{3,}/g, '---');
    const guide = normalize(readFileSync(new URL('../../../docs/algorithms.md', import.meta.url), 'utf8'));
    const tables = out.split(/\n\n+/).filter((block) => block.startsWith('<!-- compare-algorithms:'));
    expect(tables.length).toBeGreaterThanOrEqual(10);
    for (const table of tables) {
      // When this fails, regenerate: npx tsx packages/floodgate/examples/compare-algorithms.ts --write
      expect(guide, table.split('\n')[0]).toContain(normalize(table.trim()));
    }
    // A few facts the guide's prose leans on.
    const facts = normalize(out);
    expect(facts).toContain('| fixed window, clock | 110 | 20 | 10 |');
    expect(facts).toContain('| GCRA | 10 | 0 | 60_000 | 0 | 6000 | 60_000 | limit | 5 |');
    expect(facts).toContain('| fixed window, clock | 100 | 1000 | 100 | 100_100 | 10:59:59.656 | 100_000 |');
  });
});
