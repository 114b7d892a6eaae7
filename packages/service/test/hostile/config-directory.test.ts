// A config directory over the rule bound used to be refused only once every file was parsed: 1,000 files
// of 16 kB (184,000 rules of envoyproxy/ratelimit's format) took 77 s and 568 MiB before the refusal. The
// rules each file writes out are now counted as it is read, and the directory is refused as soon as they
// pass the bound, before any file is parsed.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_RULES } from '../../src/config.js';
import { loadConfigPath } from '../../src/config-files.js';

const dir = mkdtempSync(join(tmpdir(), 'floodgate-config-flood-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One file of envoyproxy/ratelimit's format, of about 16 kB. */
function file(index: number): string {
  let text = `domain: d${index}\ndescriptors:\n`;
  for (let i = 0; text.length < 16_000; i++) {
    text += `  - key: k\n    value: "v${String(i).padStart(6, '0')}"\n    rate_limit: { unit: second, requests_per_unit: 1 }\n`;
  }
  return text;
}

describe('a config directory over the rule bound', () => {
  it('1,000 files of 16 kB: refused while read, within 2 s and 100 MB', () => {
    for (let f = 0; f < 1000; f++) writeFileSync(join(dir, `f${String(f).padStart(4, '0')}.yaml`), file(f));
    const rss = process.memoryUsage().rss;
    const started = performance.now();
    let message = '';
    try {
      loadConfigPath(dir);
    } catch (error) {
      message = (error as Error).message;
    }
    const ms = performance.now() - started;
    const grownMb = (process.memoryUsage().rss - rss) / 2 ** 20;
    expect(message).toMatch(
      new RegExp(
        `hold more than ${MAX_RULES} descriptor rules \\(\\d+ written out by f0\\d{3}\\.yaml, before any file is parsed\\)`,
      ),
    );
    expect(ms).toBeLessThan(2000);
    expect(grownMb).toBeLessThan(100);
  });

  it('a directory within the bound still loads', () => {
    const small = mkdtempSync(join(tmpdir(), 'floodgate-config-small-'));
    try {
      for (let f = 0; f < 3; f++) writeFileSync(join(small, `f${f}.yaml`), file(f));
      const loaded = loadConfigPath(small);
      expect(loaded.files).toHaveLength(3);
      expect(loaded.config.domains.map((d) => d.domain)).toEqual(['d0', 'd1', 'd2']);
    } finally {
      rmSync(small, { recursive: true, force: true });
    }
  });
});
