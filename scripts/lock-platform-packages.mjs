// The registry this project installs from serves Biome's native binary only for the platforms it runs
// on, so `npm install` cannot record Biome's other optional platform packages in package-lock.json, and
// `npm ci` then refuses the lock as out of sync. This adds the missing entries (never installed here: their
// os/cpu do not match), keeping the lock complete. Run after `npm install` if `npm ci` reports them missing.
import { readFileSync, writeFileSync } from 'node:fs';

const lockPath = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(lockPath, 'utf8'));
const platforms = {
  'cli-android-arm64': { os: ['android'], cpu: ['arm64'] },
  'cli-android-x64': { os: ['android'], cpu: ['x64'] },
  'cli-darwin-arm64': { os: ['darwin'], cpu: ['arm64'] },
  'cli-darwin-x64': { os: ['darwin'], cpu: ['x64'] },
  'cli-linux-arm64': { os: ['linux'], cpu: ['arm64'], libc: ['glibc'] },
  'cli-linux-arm64-musl': { os: ['linux'], cpu: ['arm64'], libc: ['musl'] },
  'cli-linux-x64': { os: ['linux'], cpu: ['x64'], libc: ['glibc'] },
  'cli-linux-x64-musl': { os: ['linux'], cpu: ['x64'], libc: ['musl'] },
  'cli-win32-arm64': { os: ['win32'], cpu: ['arm64'] },
  'cli-win32-x64': { os: ['win32'], cpu: ['x64'] },
};
const biome = lock.packages['node_modules/@biomejs/biome'];
let added = 0;
for (const [name, target] of Object.entries(platforms)) {
  const path = `node_modules/@biomejs/${name}`;
  if (lock.packages[path]) continue;
  lock.packages[path] = {
    version: biome.version,
    cpu: target.cpu,
    dev: true,
    ...(target.libc ? { libc: target.libc } : {}),
    license: biome.license,
    optional: true,
    os: target.os,
    engines: biome.engines,
  };
  added++;
}
lock.packages = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) => (a === '' ? -1 : b === '' ? 1 : a < b ? -1 : a > b ? 1 : 0)),
);
writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`package-lock.json: ${added} Biome platform entr${added === 1 ? 'y' : 'ies'} added`);
