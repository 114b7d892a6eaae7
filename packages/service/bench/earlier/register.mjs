// node --import ./register.mjs dist/cli.js serve …: the built service with the earlier gRPC transport
// (./h2.ts) in place of dist/grpc/h2.js, for bench/service.ts's alternation (see ./hooks.mjs).
import { register } from 'node:module';

register('./hooks.mjs', import.meta.url);
