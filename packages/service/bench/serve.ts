import { type ChildProcess, spawn } from 'node:child_process';

/**
 * Starts `floodgate serve` as its own process with these arguments and resolves with the process and its
 * first log line (the addresses it listens on). The process is killed when the benchmark exits, even after
 * a failure, so no service is ever left running behind one.
 */
export async function spawnServe(
  cli: string,
  args: readonly string[],
  nodeArgs: readonly string[] = [],
): Promise<{ child: ChildProcess; log: { http: string; grpc?: string } }> {
  // A script that is not the CLI (the node:http2 reference) takes its arguments without `serve`.
  const command = cli.endsWith('cli.js') ? [cli, 'serve', ...args] : [cli, ...args];
  const child = spawn(process.execPath, [...nodeArgs, ...command], { stdio: ['ignore', 'pipe', 'inherit'] });
  process.once('exit', () => child.kill('SIGKILL'));
  const line = await new Promise<string>((resolve, reject) => {
    let buffer = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      const newline = buffer.indexOf('\n');
      if (newline !== -1) resolve(buffer.slice(0, newline));
    });
    child.once('exit', (code) => reject(new Error(`floodgate serve exited with ${code}`)));
  });
  child.stdout?.resume();
  return { child, log: JSON.parse(line) as { http: string; grpc?: string } };
}
