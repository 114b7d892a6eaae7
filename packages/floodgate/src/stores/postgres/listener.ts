import { invalid } from '../../errors.js';
import type { ChannelSubscriber } from '../kit/channel-watch.js';

/**
 * A connection that LISTENs for the permit store (`listener` of `postgresPermitStore`): a waiting
 * `acquire` then hears the NOTIFY of the release that lets it in at once. Build one with
 * {@link fromPgListener} or {@link fromPostgresListener}.
 */
export interface PostgresListener extends ChannelSubscriber {
  /** LISTENs on `channel` (an identifier the store builds: `floodgate_` and hex digits), each payload to `listener`. */
  subscribe(channel: string, listener: (payload: string) => void): Promise<void>;
  /** UNLISTENs `channel`. */
  unsubscribe(channel: string): Promise<void>;
}

// Only the store's own channel names are ever listened to; checked again before they reach SQL.
const CHANNEL = /^[a-z_][a-z0-9_]{0,62}$/;

function checkChannel(channel: string): string {
  if (!CHANNEL.test(channel)) throw invalid('ERR_INVALID_OPTION', 'channel', channel, 'a lower-case identifier');
  return channel;
}

/** The part of a `pg` `Client` the listener uses. */
export interface PgListenClient {
  query(text: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string | undefined }) => void): unknown;
}

/**
 * Adapts a connected `pg` `Client` (or a client held from a pool: `await pool.connect()`, never released
 * while the store listens) as the permit store's listener. It must be a connection of its own: LISTEN
 * belongs to a session, which a pool would hand to other queries.
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString });
 * const store = postgresPermitStore({ client: fromPg(pool), listener: fromPgListener(await pool.connect()) });
 * ```
 */
export function fromPgListener(client: PgListenClient): PostgresListener {
  if (
    typeof client !== 'object' ||
    client === null ||
    typeof client.query !== 'function' ||
    typeof client.on !== 'function'
  ) {
    throw invalid('ERR_INVALID_OPTION', 'fromPgListener(client)', client, 'a connected pg Client');
  }
  const listeners = new Map<string, (payload: string) => void>();
  client.on('notification', (message) => {
    listeners.get(message.channel)?.(message.payload ?? '');
  });
  return {
    async subscribe(channel, listener) {
      listeners.set(checkChannel(channel), listener);
      try {
        await client.query(`LISTEN "${channel}"`);
      } catch (error) {
        if (listeners.get(channel) === listener) listeners.delete(channel);
        throw error;
      }
    },
    async unsubscribe(channel) {
      listeners.delete(checkChannel(channel));
      await client.query(`UNLISTEN "${channel}"`);
    },
  };
}

/** The part of a `postgres` (Postgres.js) `sql` instance the listener uses. */
export interface PostgresJsListenSql {
  listen(channel: string, onNotify: (payload: string) => void): PromiseLike<{ unlisten(): PromiseLike<unknown> }>;
}

/**
 * Adapts a `postgres` (Postgres.js) `sql` instance as the permit store's listener: `sql.listen`, which
 * keeps a connection of its own for LISTEN (the same `sql` as the store's `client` will do).
 *
 * @example
 * ```ts
 * const sql = postgres(connectionString);
 * const store = postgresPermitStore({ client: fromPostgres(sql), listener: fromPostgresListener(sql) });
 * ```
 */
export function fromPostgresListener(sql: PostgresJsListenSql): PostgresListener {
  if ((typeof sql !== 'object' && typeof sql !== 'function') || sql === null || typeof sql.listen !== 'function') {
    throw invalid('ERR_INVALID_OPTION', 'fromPostgresListener(sql)', sql, 'a postgres (Postgres.js) sql instance');
  }
  const listening = new Map<string, { unlisten(): PromiseLike<unknown> }>();
  return {
    async subscribe(channel, listener) {
      listening.set(checkChannel(channel), await sql.listen(channel, listener));
    },
    async unsubscribe(channel) {
      const meta = listening.get(checkChannel(channel));
      listening.delete(channel);
      await meta?.unlisten();
    },
  };
}
