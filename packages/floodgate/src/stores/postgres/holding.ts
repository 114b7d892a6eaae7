import { createHash } from 'node:crypto';
import type { AcquireReply } from '../../permits/model.js';
import { checkClaim } from '../kit/holding.js';
import { integerReply } from '../kit/integer-reply.js';
import type { PermitClaim, StoreRequest } from '../store.js';
import type { PermitSqlNames } from './permits-sql.js';
import type { SqlNames } from './sql.js';

/**
 * A `limit` and a concurrency permit, all or nothing, in one statement (`Store.decideWithPermit`): the
 * permit store's acquire function, the rate store's decide function and the permit store's release
 * function, called in that order in one statement (one transaction), each step reading the one before
 * (LATERAL): the decision is the call's (`$8`, `$9`: its row keys locked, op limit) when the permit was
 * granted, a check (`0`, `$10`: nothing locked or written) when it was refused; the release runs, at the
 * acquire's time, only when the permit was granted and the decision is a denial (its first number 0),
 * with the limit, to wake the key's waiters (its NOTIFY, like the acquire's, is sent when the statement commits).
 * A function that raises (a row of another shape, a missing migration) fails the whole statement and
 * nothing of it is kept. The permit key's row is locked before the rate rows, in every such statement.
 *
 * Parameters: $1 the permit's storage key, $2 its time ('' = the server's clock), $3 limit, $4 leaseUs,
 * $5 cost, $6 lease id; then the decide function's: $7 row keys, $8 rows to lock, $9 the requests of a
 * limit, $10 those of a check, $11 the policies.
 * Returns `permit` (the acquire's bigint[]) and `decided` (the decide function's text).
 */
export function holdingStatement(rate: SqlNames, permits: PermitSqlNames): string {
  return `SELECT a.r AS permit, d.r AS decided, g.r AS released
FROM (SELECT ${permits.fn('acquire')}($1, NULLIF($2, '')::bigint, $3::bigint, $4::bigint, $5::bigint, $6) AS r) a
CROSS JOIN LATERAL (SELECT ${rate.fn('decide')}($7::text[], CASE WHEN a.r[1] = 1 THEN $8::int ELSE 0 END,
  CASE WHEN a.r[1] = 1 THEN $9::float8[] ELSE $10::float8[] END, $11::float8[]) AS r) d
CROSS JOIN LATERAL (SELECT CASE WHEN a.r[1] = 1 AND split_part(d.r, ',', 1) <> '1'
  THEN ${permits.fn('release')}($1, a.r[5], $6, $3::bigint) END AS r) g`;
}

/** The name `pg` prepares the holding statement under: unique per both tables and versions, within 63 bytes. */
export function holdingStatementName(rate: SqlNames, permits: PermitSqlNames): string {
  const id = `${rate.qualified}.${rate.fn('decide')}.${permits.fn('acquire')}.${permits.fn('release')}`;
  return `floodgate_${createHash('sha256').update(id).digest('hex').slice(0, 24)}_hold`;
}

/** The permit's six parameters of the holding statement, the claim checked first. */
export function holdingPermitParams(request: StoreRequest, claim: PermitClaim): string[] {
  checkClaim(request, claim);
  const a = claim.args;
  return [
    claim.key,
    a.nowUs === undefined ? '' : String(a.nowUs),
    String(a.limit),
    String(a.leaseUs),
    String(a.cost),
    a.leaseId,
  ];
}

/** The acquire's bigint[] (the drivers give an array of strings or numbers, or a '{…}' literal). */
export function holdingPermitReply(value: unknown): AcquireReply {
  const r = integerReply(value, 'the holding statement', 8);
  const [granted, inFlight, fence, expiresAtUs, nowUs, retryAfterUs, resetAfterUs, wake] = r as number[];
  return {
    granted: granted === 1,
    inFlight: inFlight as number,
    fence: fence as number,
    expiresAtUs: expiresAtUs as number,
    nowUs: nowUs as number,
    retryAfterUs: retryAfterUs as number,
    resetAfterUs: resetAfterUs as number,
    wake: wake as number,
  };
}
