import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { withFreePorts } from '../../free-ports.js';

const run = promisify(execFile);

export const REDIS_HOST = '127.0.0.1';
export const REDIS_PORT = 6379;

/**
 * True when a server answers. Under CI=true a missing server is a failure, not a skip: the caller
 * throws; otherwise it warns loudly and the suite is skipped.
 */
export async function redisAvailable(port = REDIS_PORT): Promise<boolean> {
  const probe = new Redis({
    host: REDIS_HOST,
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => {});
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

/** Decides whether a suite that needs `what` runs, fails (CI) or is skipped with a loud message. */
export function requireServer(available: boolean, what: string): boolean {
  if (available) return true;
  if (process.env.CI === 'true')
    throw new Error(`${what} is not reachable, and CI=true: the Redis tests cannot be skipped`);
  console.warn(`\n!!! ${what} is not reachable: SKIPPING its Redis tests (they fail under CI=true) !!!\n`);
  return false;
}

/**
 * A Redis Cluster of redis-server processes on ports the OS says are free, each node's cluster bus on a
 * free port of its own (`cluster-port`, not port + 10000), owned by this test run.
 */
export interface TestCluster {
  readonly ports: readonly number[];
  /** Runs a command on every node (e.g. SCRIPT FLUSH). */
  onEveryNode(...args: string[]): Promise<string[]>;
  /** Runs a command on the node at `port`. */
  onNode(port: number, ...args: string[]): Promise<string>;
  /** The ports of the primary serving `slot` and of its replica, as the cluster sees them now. */
  shardOf(slot: number): Promise<{ primary: number; replica: number }>;
  /** Kills one node with SIGKILL (no shutdown), resolving once its process is gone. */
  kill(port: number): Promise<void>;
  stop(): Promise<void>;
}

/** Options of {@link startCluster}. */
export interface ClusterOptions {
  /** `cluster-node-timeout`: how long a node may be silent before its replica takes over. @default 5000 */
  nodeTimeoutMs?: number;
}

export async function redisCli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-h', REDIS_HOST, '-p', String(port), ...args]);
  return stdout.trim();
}

/** A cluster node that exited before it answered. */
class NodeExited extends Error {
  constructor(readonly port: number) {
    super(`the redis-server on port ${port} exited while starting (port taken?)`);
  }
}

/**
 * Polls `test` until it holds (a server coming up, a failover completing), failing after `timeoutMs`, or
 * at once when a node it waits for has exited.
 */
export async function waitFor(what: string, test: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (
      await test().catch((error: unknown) => {
        if (error instanceof NodeExited) throw error;
        return false;
      })
    )
      return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Starts 3 primaries and 3 replicas, waits for `cluster_state:ok` everywhere. Stops them on failure, and
 * starts again on new ports when a node could not start (a port taken between its choice and its use).
 */
export function startCluster(options: ClusterOptions = {}): Promise<TestCluster> {
  return withFreePorts(12, (free) => startClusterOn(free.slice(0, 6), free.slice(6), options));
}

async function startClusterOn(ports: number[], busPorts: number[], options: ClusterOptions): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'floodgate-cluster-'));
  const children: ChildProcess[] = [];
  // A test run that dies still takes its servers down with it.
  const killAll = () => {
    for (const child of children) child.kill('SIGKILL');
  };
  process.once('exit', killAll);
  const stop = async () => {
    process.removeListener('exit', killAll);
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGTERM');
          }),
      ),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const [i, port] of ports.entries()) {
      const child = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--cluster-port',
          String(busPorts[i]),
          '--bind',
          REDIS_HOST,
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          `nodes-${port}.conf`,
          '--cluster-node-timeout',
          String(options.nodeTimeoutMs ?? 5000),
          '--dir',
          dir,
          '--save',
          '',
          '--appendonly',
          'no',
          // Primaries stream a replica's first sync at once instead of waiting 5 s for more replicas.
          '--repl-diskless-sync-delay',
          '0',
          '--daemonize',
          'no',
          '--logfile',
          join(dir, `${port}.log`),
        ],
        { stdio: 'ignore' },
      );
      children.push(child);
    }
    for (const [i, port] of ports.entries()) {
      const child = children[i] as ChildProcess;
      await waitFor(
        `redis-server on ${port}`,
        async () => {
          // A node that exited while starting (its port taken) fails the start at once, not after 10 s.
          if (child.exitCode !== null || child.signalCode !== null) throw new NodeExited(port);
          return (await redisCli(port, 'ping')) === 'PONG';
        },
        10_000,
      );
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...ports.map((port) => `${REDIS_HOST}:${port}`),
      '--cluster-replicas',
      '1',
      '--cluster-yes',
    ]);
    for (const port of ports) {
      await waitFor(
        `cluster_state:ok on ${port}`,
        async () => (await redisCli(port, 'cluster', 'info')).includes('cluster_state:ok'),
        30_000,
      );
    }
    // A replica can take over (by a failover or a kill) only once it holds its primary's data.
    await waitFor(
      'every replica in sync with its primary',
      async () => {
        const roles = await Promise.all(ports.map((port) => redisCli(port, 'INFO', 'replication')));
        const replicas = roles.filter((info) => info.includes('role:slave'));
        return replicas.length === 3 && replicas.every((info) => info.includes('master_link_status:up'));
      },
      30_000,
    );
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    ports,
    onEveryNode: (...args) => Promise.all(ports.map((port) => redisCli(port, ...args))),
    onNode: (port, ...args) => redisCli(port, ...args),
    shardOf: async (slot) => {
      // cluster_state:ok comes before every replica is attached: wait until the slot's shard has both.
      const portOf = (address: string) => Number(address.split('@')[0]?.split(':')[1]);
      let shard: { primary: number; replica: number } | undefined;
      await waitFor(
        `a primary and a replica for slot ${slot}`,
        async () => {
          const lines = (await redisCli(ports[0] as number, 'CLUSTER', 'NODES'))
            .split('\n')
            .map((line) => line.split(' '));
          const primary = lines.find(
            (fields) =>
              fields[2]?.includes('master') &&
              fields.slice(8).some((range) => {
                const [from, to] = range.split('-').map(Number);
                return from !== undefined && slot >= from && slot <= (to ?? from);
              }),
          );
          const replica = lines.find((fields) => primary !== undefined && fields[3] === primary[0]);
          if (primary === undefined || replica === undefined) return false;
          shard = { primary: portOf(primary[1] as string), replica: portOf(replica[1] as string) };
          return true;
        },
        30_000,
      );
      return shard as { primary: number; replica: number };
    },
    async kill(port) {
      const child = children[ports.indexOf(port)];
      if (child === undefined) throw new Error(`no node on port ${port}`);
      if (child.exitCode !== null || child.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGKILL');
      await gone;
    },
    stop,
  };
}
