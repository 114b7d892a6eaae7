#!/usr/bin/env node
// The `floodgate` command. A file of its own rather than dist/cli.js, so that npm links the command in a
// fresh checkout before anything is built; there it says what to do instead of printing a stack trace.
import { existsSync } from 'node:fs';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write('floodgate: the service is not built yet: run `npm run build` in the repository first\n');
  process.exit(1);
}
const { run } = await import(cli.href);
run(process.argv.slice(2));
