import { type AddressInfo, createServer, type Server } from 'node:net';

/**
 * Ports the OS says are free now, all different: each is listened on at port 0 (all at once, so no two
 * are the same), then released for the caller's server to take. Clones of the repository testing side by
 * side on one machine get distinct ports this way, which fixed ranges could not promise. A port can still
 * be taken by someone else between its release and its use, so a caller whose server fails to bind picks
 * new ones ({@link withFreePorts}).
 */
export async function freePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, host, () => resolve());
      });
    }
    return servers.map((server) => (server.address() as AddressInfo).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

/**
 * Runs `start` on `count` free ports; when it fails (a port taken in the meantime), tries again on new
 * ones, at most `attempts` times in all.
 */
export async function withFreePorts<T>(
  count: number,
  start: (ports: number[]) => Promise<T>,
  attempts = 3,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(count);
    try {
      return await start(ports);
    } catch (error) {
      if (attempt >= attempts) throw error;
    }
  }
}
