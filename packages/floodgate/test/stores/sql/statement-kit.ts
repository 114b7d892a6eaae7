import type { PostgresClient } from '../../../src/stores/postgres/index.js';
import type { StoreResult } from '../../../src/stores/store.js';
import type { Connection } from './postgres-env.js';

/**
 * Counts the statements a client runs by the name it prepares them under: each of `kinds` (a name ending in
 * `_<kind>`, with an optional clock digit and `_at` suffix), and `decide`.
 */
export function countingStatements(
  client: PostgresClient,
  kinds: readonly string[],
): { client: PostgresClient; counts: Record<string, number> } {
  const counts: Record<string, number> = Object.fromEntries([...kinds, 'decide'].map((k) => [k, 0]));
  // A statement's kind, its alignment (windows), its form (a penalty box, denied calls counted) and clock.
  const pattern = new RegExp(`_(${[...kinds, 'decide'].join('|')})([01]?)(_box)?(_counted)?(?:_at)?$`);
  return {
    counts,
    client: {
      query(text, params, name) {
        const match = pattern.exec(name ?? '');
        const what = match?.[1];
        if (what !== undefined) counts[what] = (counts[what] ?? 0) + 1;
        // And by alignment and form, to show each was sent: `meter_box`, `window1`, `window0_box_counted`.
        const form = `${what}${match?.[2] ?? ''}${match?.[3] ?? ''}${match?.[4] ?? ''}`;
        if (what !== undefined && form !== what) counts[form] = (counts[form] ?? 0) + 1;
        return client.query(text, params, name);
      },
    },
  };
}

/** What a decision says, field by field (the single-policy statements hand over no `next`). */
export function decisionFields(result: StoreResult) {
  return {
    allowed: result.allowed,
    evaluations: result.evaluations.map((e) => ({
      allowed: e.allowed,
      reason: e.reason,
      remaining: e.remaining,
      retryAfterUs: e.retryAfterUs,
      resetAfterUs: e.resetAfterUs,
      delayUs: e.delayUs,
    })),
  };
}

/** The rows of a table under a prefix, by their key without it: `[state, expires_at]`. */
export async function tableRows(
  connection: Connection,
  schema: string,
  table: string,
  prefix: string,
): Promise<Map<string, [number[], number]>> {
  const found = await connection.sql(
    `SELECT key, state, expires_at FROM "${schema}"."${table}" WHERE starts_with(key, $1) ORDER BY key`,
    [`${prefix}:`],
  );
  return new Map(
    found.map((r) => [
      String(r.key).slice(prefix.length),
      [(r.state as number[]).map(Number), Number(r.expires_at)] as [number[], number],
    ]),
  );
}
