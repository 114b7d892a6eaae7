import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig, type Plugin } from 'vitest/config';

const library = fileURLToPath(new URL('./packages/floodgate/', import.meta.url));

/**
 * Inside packages/floodgate, `floodgate` and its subpaths resolve to the sources, as the package's
 * tsconfig `paths` say (its examples import `floodgate/model` like users do, and its tests run them
 * beside the sources, never beside a stale build). The other packages use the built package, as installed.
 */
function librarySources(): Plugin {
  const paths = JSON.parse(readFileSync(`${library}tsconfig.json`, 'utf8')).compilerOptions.paths as Record<
    string,
    string[]
  >;
  return {
    name: 'floodgate-sources',
    enforce: 'pre',
    resolveId(source, importer) {
      const target = paths[source]?.[0];
      if (target === undefined || importer === undefined || !importer.startsWith(library)) return null;
      return fileURLToPath(new URL(target, `file://${library}`));
    },
  };
}

export default defineConfig({
  plugins: [librarySources()],
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    projects: [
      {
        // Packing rebuilds the packages' dist folders, which the other tests import: it runs first, alone.
        extends: true,
        // Each of its steps runs npm or a checker on the tarballs: minutes on a busy machine, not seconds.
        test: {
          name: 'packages',
          include: ['test/packages.test.ts'],
          sequence: { groupOrder: 0 },
          testTimeout: 300_000,
        },
      },
      {
        extends: true,
        test: {
          name: 'tests',
          include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: ['test/packages.test.ts'],
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
