// Module hooks of ./register.mjs: dist/grpc/h2.js resolves to the earlier transport, ./h2.ts, compiled here
// with TypeScript's own transpiler (the compiler options of the build), so that the service runs on plain
// Node as `now` does. Loaded through tsx instead, the process allocated and collected differently: the
// service with the current transport run under tsx kept a flat old generation at 10,000 calls/s where the
// same build on plain Node grew by 1 MB per young collection, so a comparison across the two measured the
// loader as much as the transport.
import { readFile } from 'node:fs/promises';
import ts from 'typescript';

const HERE = new URL('./', import.meta.url).href;

export async function resolve(specifier, context, next) {
  // The earlier transport's own imports (./hpack.js) are its TypeScript files here.
  if (context.parentURL?.startsWith(HERE) && specifier.startsWith('./') && specifier.endsWith('.js')) {
    return { url: new URL(specifier.replace(/\.js$/, '.ts'), context.parentURL).href, shortCircuit: true };
  }
  const resolved = await next(specifier, context);
  if (resolved.url.endsWith('/dist/grpc/h2.js')) return { ...resolved, url: new URL('./h2.ts', import.meta.url).href };
  return resolved;
}

export async function load(url, context, next) {
  if (!(url.startsWith(HERE) && url.endsWith('.ts'))) return next(url, context);
  const source = await readFile(new URL(url), 'utf8');
  const { outputText } = ts.transpileModule(source, {
    fileName: url,
    compilerOptions: { target: ts.ScriptTarget.ES2023, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: true },
  });
  return { format: 'module', source: outputText, shortCircuit: true };
}
