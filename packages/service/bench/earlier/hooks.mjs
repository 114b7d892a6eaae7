// Module hook of ./register.mjs: dist/grpc/h2.js resolves to the earlier transport, ./h2.ts.
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (resolved.url.endsWith('/dist/grpc/h2.js')) return { ...resolved, url: new URL('./h2.ts', import.meta.url).href };
  return resolved;
}
