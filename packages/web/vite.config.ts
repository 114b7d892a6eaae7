import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

/**
 * The page bundles the library itself (its model, limiter, memory store, manual clock and HTTP header
 * formatting), from the built package. Two Node modules are imported by parts of the library the page
 * never runs (SHA-256 of keys longer than 200 characters; the conformance suite's assertions): they
 * resolve to a module that fails loudly if that ever changes, instead of a silent empty stub.
 */
const shim = fileURLToPath(new URL('./src/node-shim.ts', import.meta.url));

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: './',
  resolve: {
    alias: [
      { find: /^node:crypto$/, replacement: shim },
      { find: /^node:assert\/strict$/, replacement: shim },
    ],
  },
  // `npm run dev -w packages/web`: the live view asks a running service (FLOODGATE_URL, or npm start's).
  server: { proxy: { '/v1': process.env.FLOODGATE_URL ?? 'http://127.0.0.1:8080' } },
  build: {
    // The page ships inside the service package: `floodgate serve` serves dist/web at `/`.
    outDir: '../service/dist/web',
    emptyOutDir: true,
    target: 'es2022',
    chunkSizeWarningLimit: 400,
  },
});
