import { createHash } from 'node:crypto';
import type { KindDescriptor } from '../../model/descriptor.js';
import { emptyStateLength, KIND_LIST, KIND_METER, KINDS } from '../../model/kinds.js';
import { MAX_DEBT_US } from '../../model/settle.js';
import { PRUNE_GRACE_US } from '../sql/common.js';
import { flagGuard } from './guards.js';
import { SQL_PORTS, type SqlPort } from './kind-ports.js';
import { charge, evaluation, expiry, type SqlNames, serverNow, sqlNames } from './sql.js';
import { LIST_KINDS } from './wire.js';

/*
 * The model, ported to PL/pgSQL: the functions `migrate()` installs beside the table (migration.ts).
 * Every function mirrors one in `src/model/`, with the same operations in the same order on float8, so
 * both compute bit-identical numbers; the randomized comparison in the conformance suite checks it. The
 * kinds' own code is in kind-ports.ts; here is what every kind shares: the dispatch on the kind's number
 * (`run`, `refund`: a number without a port raises), `evaluatePolicy`, `settleDenied`, the batch of
 * decisions, reservations and leases.
 *
 * An evaluation travels as one float8[] (sql.ts `evaluation`): [allowed 0/1, reason, remaining,
 * retryAfterUs, resetAfterUs, delayUs, length of the next state (-1: unchanged), …next state].
 */

/**
 * The parameters and return of `run` and `policy`, one policy's evaluation: `policy` takes what `run`
 * takes and hands it on.
 */
const EVALUATE_SIGNATURE = `(
    kind int, lim float8, a float8, b float8, c float8, s float8[], now float8, cost float8, maxdelay float8)
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$`;

/** The functions of the port, in the order they are created (each only calls those before it). */
export function portFunctions(n: SqlNames): string[] {
  return [
    ...KIND_LIST.flatMap((k) => SQL_PORTS[k.name].functions(n)),
    runFunction(n),
    policyFunction(n),
    settleFunction(n),
    pruneFunction(n),
    decideFunction(n),
    cancelFunction(n),
    refundFunction(n),
    settleCostFunction(n),
  ];
}

/** The names of the functions `portFunctions` creates (without table and version). */
export function portFunctionNames(): string[] {
  const names: string[] = [];
  const fn = (name: string): string => {
    names.push(name);
    return name;
  };
  const probe = { ...sqlNames('s', 't', ''), fn };
  portFunctions(probe);
  return [...new Set(names)];
}

/**
 * The port's version: a digest of its code (the functions, written for a placeholder table). Any change
 * to the port gives a new version, as a change to a Lua script gives it a new SHA; the functions carry
 * it in their names (`<table>_decide_v1a2b3c4d`), so several versions can live side by side in one
 * schema during a rolling deploy, each process calling its own.
 */
export const PORT_VERSION = `v${createHash('sha256')
  .update(portFunctions(sqlNames('schema', 'table', '')).join('\n'))
  .digest('hex')
  .slice(0, 8)}`;

/** The one statement a batch of decisions is: see `decideFunction` for the parameters. */
export function decideStatement(n: SqlNames): string {
  return `SELECT ${n.fn('decide')}($1::text[], $2::int, $3::float8[], $4::float8[]) AS r`;
}

/** Cancelling a reservation: see `cancelFunction` for the parameters. */
export function cancelStatement(n: SqlNames): string {
  return `SELECT ${n.fn('cancel')}($1::text[], $2::float8, $3::float8, $4::float8[]) AS r`;
}

/** Giving back a lease's unused units: see `refundFunction` for the parameters. */
export function refundStatement(n: SqlNames): string {
  return `SELECT ${n.fn('refund')}($1::text[], $2::float8, $3::float8, $4::float8, $5::float8, $6::float8[]) AS r`;
}

/** Settling a call admitted with an estimate: see `settleCostFunction` for the parameters. */
export function settleCostStatement(n: SqlNames): string {
  return `SELECT ${n.fn('settle_cost')}($1::text[], $2::float8, $3::float8, $4::float8, $5::float8, $6::float8[]) AS r`;
}

/**
 * `IF <on> = <id> THEN <guard> <body> ELSIF … ELSE RAISE … END IF;` over every kind: a number without a
 * port raises instead of falling through to another kind's code, and so does a variant its kind does not
 * declare (`flagGuard`, on the parameters named by `params`).
 */
function kindBranches(
  on: string,
  body: (port: SqlPort, kind: KindDescriptor) => string,
  pad: string,
  params: { readonly a: string; readonly b: string; readonly c: string } = { a: 'a', b: 'b', c: 'c' },
): string {
  const branches = KIND_LIST.map((k, i) => {
    const guard = flagGuard(k, params, `${pad}  `);
    const head = `${pad}${i === 0 ? 'IF' : 'ELSIF'} ${on} = ${k.id} THEN -- ${k.name}`;
    return `${head}\n${guard === '' ? '' : `${guard}\n`}${pad}  ${body(SQL_PORTS[k.name], k)}`;
  });
  return `${branches.join('\n')}
${pad}ELSE
${pad}  RAISE EXCEPTION 'floodgate: no PL/pgSQL port of policy kind %', ${on};
${pad}END IF;`;
}

/**
 * decide.ts, `exceedsCapacity`: a cost that can never fit (a meter's charge beyond its tolerance, another
 * kind's cost beyond its limit). In scope: `kind`, `lim`, `a`, `b`, `cost`.
 */
function exceeds(): string {
  const charged = KIND_LIST.filter((k) => k.capacity === 'charge').map((k) => k.id);
  return `(CASE WHEN kind IN (${charged.join(', ')}) THEN ${charge('cost', 'a')} > b ELSE cost > lim END)`;
}

/**
 * A condition: the policy (its kind, `b` and `c` as SQL expressions) counts every committed call, a cost
 * some policy can never admit too (model: `countsDenied` is 'every-call').
 */
function everyCall(kind: string, b: string, c: string): string {
  const kinds = KIND_LIST.flatMap((k) => {
    const log = SQL_PORTS[k.name].logDenied;
    return log?.everyCall === true ? [`(${kind} = ${k.id} AND ${log.when(b, c)})`] : [];
  });
  return kinds.length === 0 ? 'false' : `(${kinds.join(' OR ')})`;
}

/** One kind's evaluation of one state (the descriptor's `evaluate`), without the penalty box and impossible costs (`policy`). */
function runFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('run')}${EVALUATE_SIGNATURE}
  DECLARE
    fl float8; rem float8;
  BEGIN
${kindBranches('kind', (port) => port.run(n), '    ')}
  END
  $fn$;`;
}

/** decide.ts `evaluatePolicy`: impossible costs, the penalty box, then the algorithm. */
function policyFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('policy')}${EVALUATE_SIGNATURE}
  DECLARE
    r float8[];
    blocked_until float8;
    w float8;
  BEGIN
    IF ${exceeds()} THEN
      r := ${n.fn('run')}(kind, lim, a, b, c, s, now, 0, 0);
      RETURN ${evaluation(0, 3, 'r[3]', "'Infinity'", 'r[5]', '0')};
    END IF;
    blocked_until := CASE WHEN s IS NULL THEN 0 ELSE s[1] END;
    IF blocked_until > now THEN
      -- The later of the block's end and the policy's own wait for this cost; the key as it stands.
      r := ${n.fn('run')}(kind, lim, a, b, c, s, now, cost, maxdelay);
      w := greatest(blocked_until - now, CASE WHEN r[1] = 0 THEN r[4] ELSE 0 END);
      r := ${n.fn('run')}(kind, lim, a, b, c, s, now, 0, 0);
      RETURN ${evaluation(0, 2, '0', 'w', 'greatest(r[5], w)', '0')};
    END IF;
    RETURN ${n.fn('run')}(kind, lim, a, b, c, s, now, cost, maxdelay);
  END
  $fn$;`;
}

/** decide.ts `settleDenied`: one policy's report when the call as a whole was denied. */
function settleFunction(n: SqlNames): string {
  // A kind that counts denied calls counts the call here (model: `logDenied` in its descriptor).
  const counting = KIND_LIST.flatMap((k) => {
    const log = SQL_PORTS[k.name].logDenied;
    return log === undefined
      ? []
      : [
          `    IF kind = ${k.id} AND ${log.when('b', 'c')} THEN`,
          `      ${log.count(n)}`,
          '      counted := true;',
          '    END IF;',
        ];
  }).join('\n');
  const emptyLengths = KIND_LIST.map((k) => `WHEN ${k.id} THEN ${emptyStateLength(k)}`).join(' ');
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('settle')}(
    kind int, lim float8, blk float8, a float8, b float8, c float8, s float8[], now float8, cost float8,
    do_commit boolean, e float8[])
  RETURNS float8[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
  DECLARE
    allowed_here boolean := e[1] = 1;
    r float8[];
    w float8;
    nx float8[] := s;
    has_next boolean := false;
    counted boolean := false;
  BEGIN
    IF allowed_here THEN
      r := ${n.fn('policy')}(kind, lim, a, b, c, s, now, 0, 0);
      e := ARRAY[1, 0, r[3], 0, r[5], 0]::float8[];
    ELSE
      e := e[1:6];
    END IF;
    IF NOT do_commit OR cost = 0 OR e[2] = 2 THEN RETURN e || ARRAY[-1]::float8[]; END IF;
    IF e[2] = 3 AND NOT ${everyCall('kind', 'b', 'c')} THEN RETURN e || ARRAY[-1]::float8[]; END IF;
${counting}
    IF counted THEN
      r := ${n.fn('policy')}(kind, lim, a, b, c, nx, now, cost, 0);
      IF allowed_here THEN
        -- Did not deny, but the logged attempt may leave no room: its wait for the same cost counts.
        w := CASE WHEN r[1] = 1 THEN 0 ELSE r[4] END;
        r := ${n.fn('policy')}(kind, lim, a, b, c, nx, now, 0, 0);
        e := ARRAY[1, 0, r[3], w, greatest(r[5], w), 0]::float8[];
      ELSE
        e := r[1:6];
      END IF;
      has_next := true;
    END IF;
    IF blk > 0 AND e[2] = 1 THEN
      IF nx IS NULL THEN
        nx := array_fill(0::float8, ARRAY[CASE kind ${emptyLengths} END]);
      END IF;
      nx[1] := now + blk;
      e[3] := 0;
      -- The retry passes both the block and the policy's own wait for this cost.
      e[4] := greatest(blk, e[4]);
      e[5] := greatest(e[5], e[4]);
      has_next := true;
    END IF;
    IF NOT has_next THEN RETURN e || ARRAY[-1]::float8[]; END IF;
    RETURN e || ARRAY[array_length(nx, 1)]::float8[] || nx;
  END
  $fn$;`;
}

/**
 * Housekeeping after a call that created rows: only new rows make the table grow, so twice as many
 * expired ones (at least 16) go for each, a minute after their expiry (PRUNE_GRACE_US in sql/common.ts),
 * through the expiry index, skipping rows others hold (so it never waits). Returns how many rows it
 * deleted. The bound is a bigint, like the column: compared with a float8, the column would be cast and
 * the index could not serve the condition.
 *
 * Expired by whose clock: the earlier of the decision's (`p_now`, µs: a limiter's own `clock` when it has
 * one) and the server's. A limiter whose clock runs ahead never deletes a row live on the server's clock
 * (another limiter's), and one whose clock lags deletes only rows expired on its own.
 */
function pruneFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('prune')}(p_now float8, p_created int)
  RETURNS int LANGUAGE plpgsql VOLATILE AS $fn$
  DECLARE
    bound bigint := (least(p_now, (extract(epoch FROM clock_timestamp()) * 1000000)::float8) - ${PRUNE_GRACE_US})::bigint;
    deleted int;
  BEGIN
    DELETE FROM ${n.qualified} t WHERE t.key IN (
      SELECT x.key FROM ${n.qualified} x WHERE x.expires_at <= bound
      ORDER BY x.expires_at LIMIT greatest(16, 2 * p_created) FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
  END
  $fn$;`;
}

/** A condition: the kind (an SQL expression) keeps a list, so its call is answered with reports (wire.ts). */
function listKind(kind: string): string {
  return `${kind} IN (${LIST_KINDS.map((k) => k.id).join(', ')})`;
}

/**
 * The µs from `now` until the state `s` is untouched again: its own reset, a cost-0 evaluation. What an
 * expiry is computed from when the state written is a denial's (a counted call, a penalty box): a denial
 * reports its own resetAfter, which can be earlier (a `countDenied` fixed window's cost beyond its limit
 * reports the window's end while the key's penalty box lasts longer).
 */
function untouched(n: SqlNames, kind: string, lim: string, a: string, b: string, c: string, s: string): string {
  return `(${n.fn('policy')}(${kind}, ${lim}, ${a}, ${b}, ${c}, ${s}, now, 0, 0))[5]`;
}

/**
 * A batch of calls, decided in arrival order in one transaction: decide.ts `decide` for each, with the
 * states kept in memory between calls on the same key and written once at the end.
 *
 * Parameters:
 * - `p_keys`: the distinct row keys the batch touches; the first `p_locked` are the ones it may write.
 * - `p_req`: 5 numbers per call: op (0 check, 1 limit, 2 reset), cost, nowUs (NaN: the server's
 *   `clock_timestamp()`, read once the locks are held), maxDelayUs, number of policies.
 * - `p_pol`: 7 numbers per policy of each call, in order: key index (1-based, into p_keys), kind, limit,
 *   blockUs, a, b, c (see compile.ts).
 *
 * Returns, as comma-separated text, for each call but resets: allowed (0/1), the µs it was decided at,
 * then per policy the server's verdict and the state it read (the client's model writes the report), or,
 * for a call under a list kind, the report itself: `CallForm` in wire.ts.
 *
 * Locking, deadlock-free: first the missing rows are created empty, in key order (a transaction only
 * waits there for another that is creating the same key, and that one never waits for a transaction
 * still creating rows); then all rows are locked in key order (waits only for transactions that hold
 * rows, all taken in the same order). A row deleted in between (expired and pruned) is created and
 * locked on its own. A batch that created rows prunes (`pruneFunction`) at the end: pruning never waits,
 * never scans the table, and keeps up with growth.
 */
function decideFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('decide')}(p_keys text[], p_locked int, p_req float8[], p_pol float8[])
  RETURNS text LANGUAGE plpgsql VOLATILE
  -- The result is float8s as text: shortest exact digits, whatever the session's extra_float_digits.
  SET extra_float_digits = 3 AS $fn$
  DECLARE
    nkeys int := coalesce(array_length(p_keys, 1), 0);
    nreq int := coalesce(array_length(p_req, 1), 0) / 5;
    st ${n.stateType}[] := array_fill(NULL::${n.stateType}, ARRAY[greatest(nkeys, 1)]);
    seen boolean[] := array_fill(false, ARRAY[greatest(nkeys, 1)]);
    dirty boolean[] := array_fill(false, ARRAY[greatest(nkeys, 1)]);
    expiry bigint[] := array_fill(0::bigint, ARRAY[greatest(nkeys, 1)]);
    res float8[] := '{}';
    created int := 0;
    locked int := 0;
    resets boolean := false;
    s float8[];
    r float8[];
    rb float8[];
    ro int[] := '{}';
    i int; j int; k int; q int; ki int; np int; pj int; op int; base int; kind int; n_len int;
    lim float8; a float8; b float8; c float8; blocked_until float8; bwait float8;
    cost float8; now float8; maxdelay float8; server_now float8; prune_now float8; ts timestamp;
    all_ok boolean; impossible boolean; reports boolean; is_commit boolean; optimistic boolean := false;
  BEGIN
    IF p_locked = 1 THEN
      -- One row to write: lock it if it exists. A new key is decided optimistically and inserted at
      -- the end; if another transaction created it meanwhile, the insert finds it and the batch is
      -- decided again on the row, locked (below). So a new key costs one row version, not two.
      SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[1] FOR UPDATE;
      optimistic := NOT FOUND;
      st[1] := ROW(s);
    ELSIF p_locked > 1 THEN
      INSERT INTO ${n.qualified} AS t (key, state, expires_at)
        SELECT u.k, NULL, 0 FROM unnest(p_keys[1:p_locked]) AS u(k) ORDER BY u.k COLLATE "C"
        ON CONFLICT DO NOTHING;
      GET DIAGNOSTICS created = ROW_COUNT;
      FOR i, s IN
        SELECT u.i, t.state FROM unnest(p_keys[1:p_locked]) WITH ORDINALITY AS u(k, i)
          JOIN ${n.qualified} t ON t.key = u.k ORDER BY t.key FOR UPDATE OF t
      LOOP
        st[i] := ROW(s);
        seen[i] := true;
        locked := locked + 1;
      END LOOP;
      IF locked < p_locked THEN
        FOR i IN 1..p_locked LOOP
          CONTINUE WHEN seen[i];
          LOOP
            SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[i] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO ${n.qualified} (key, state, expires_at) VALUES (p_keys[i], NULL, 0) ON CONFLICT DO NOTHING;
            IF FOUND THEN
              created := created + 1;
              s := NULL;
              EXIT;
            END IF;
          END LOOP;
          st[i] := ROW(s);
        END LOOP;
      END IF;
    END IF;
    IF nkeys > p_locked THEN
      FOR i, s IN
        SELECT u.i, t.state FROM unnest(p_keys[p_locked + 1:nkeys]) WITH ORDINALITY AS u(k, i)
          JOIN ${n.qualified} t ON t.key = u.k
      LOOP
        st[p_locked + i] := ROW(s);
      END LOOP;
    END IF;

    -- Runs once, unless a new key's optimistic insert finds the row created meanwhile.
    <<attempt>>
    LOOP
      pj := 0;
      FOR j IN 0..nreq - 1 LOOP
        op := p_req[j * 5 + 1]::int;
        cost := p_req[j * 5 + 2];
        now := p_req[j * 5 + 3];
        maxdelay := p_req[j * 5 + 4];
        np := p_req[j * 5 + 5]::int;
        IF now = 'NaN'::float8 THEN
          IF server_now IS NULL THEN
            ${serverNow('server_now')}
          END IF;
          now := server_now;
        END IF;
        IF op = 2 THEN
          FOR k IN 0..np - 1 LOOP
            ki := p_pol[pj + k * 7 + 1]::int;
            st[ki] := NULL;
            dirty[ki] := true;
          END LOOP;
          resets := true;
          pj := pj + np * 7;
          CONTINUE;
        END IF;
        is_commit := op = 1;
        IF is_commit AND (prune_now IS NULL OR now < prune_now) THEN prune_now := now; END IF;
        -- decide(): every policy first (evaluatePolicy, inlined), then settleDenied if one denied.
        all_ok := true;
        impossible := false;
        reports := false;
        IF np > 1 THEN rb := '{}'; END IF;
        FOR k IN 0..np - 1 LOOP
          base := pj + k * 7;
          ki := p_pol[base + 1]::int;
          kind := p_pol[base + 2]::int;
          lim := p_pol[base + 3];
          a := p_pol[base + 5];
          b := p_pol[base + 6];
          c := p_pol[base + 7];
          s := (st[ki]).s;
          blocked_until := coalesce(s[1], 0);
          IF ${exceeds()} THEN
            r := ${n.fn('run')}(kind, lim, a, b, c, s, now, 0, 0);
            r := ${evaluation(0, 3, 'r[3]', "'Infinity'", 'r[5]', '0')};
          ELSIF blocked_until > now THEN
            -- The later of the block's end and the policy's own wait for this cost; the key as it stands.
            r := ${n.fn('run')}(kind, lim, a, b, c, s, now, cost, maxdelay);
            bwait := greatest(blocked_until - now, CASE WHEN r[1] = 0 THEN r[4] ELSE 0 END);
            r := ${n.fn('run')}(kind, lim, a, b, c, s, now, 0, 0);
            r := ${evaluation(0, 2, '0', 'bwait', 'greatest(r[5], bwait)', '0')};
          ELSE
            r := ${n.fn('run')}(kind, lim, a, b, c, s, now, cost, maxdelay);
          END IF;
          IF r[1] = 0 THEN all_ok := false; END IF;
          IF r[2] = 3 THEN impossible := true; END IF;
          IF ${listKind('kind')} THEN reports := true; END IF;
          IF np > 1 THEN
            ro[k + 1] := coalesce(array_length(rb, 1), 0);
            rb := rb || r;
          END IF;
        END LOOP;
        IF np = 1 THEN
          -- One policy (the common case): no bookkeeping of several evaluations.
          IF NOT all_ok THEN
            r := ${n.fn('settle')}(kind, lim, p_pol[pj + 4], a, b, c, s, now, cost, is_commit, r[1:6]);
          END IF;
          res := res || ARRAY[CASE WHEN all_ok THEN 1 ELSE 0 END, now]::float8[];
          IF reports THEN
            res := res || r[1:6];
          ELSE
            res := res || ARRAY[r[1], coalesce(array_length(s, 1), -1)]::float8[] || s;
          END IF;
          n_len := r[7]::int;
          IF is_commit AND n_len >= 0 THEN
            st[ki] := ROW(r[8:7 + n_len]);
            dirty[ki] := true;
            IF all_ok THEN
              expiry[ki] := ${expiry('now', 'r[5]')};
            ELSE
              expiry[ki] := ${expiry('now', untouched(n, 'kind', 'lim', 'a', 'b', 'c', '(st[ki]).s'))};
            END IF;
          END IF;
        ELSE
          IF NOT all_ok THEN
            -- Nothing was written yet, so each policy settles against the state it was evaluated on. A
            -- cost one policy can never admit changes nothing under any policy (no block, no logged
            -- attempt), but a policy that counts every call counts it.
            r := rb;
            rb := '{}';
            FOR k IN 0..np - 1 LOOP
              base := pj + k * 7;
              q := ro[k + 1];
              ro[k + 1] := coalesce(array_length(rb, 1), 0);
              rb := rb || ${n.fn('settle')}(p_pol[base + 2]::int, p_pol[base + 3], p_pol[base + 4], p_pol[base + 5],
                p_pol[base + 6], p_pol[base + 7], (st[p_pol[base + 1]::int]).s, now, cost,
                is_commit AND (NOT impossible OR ${everyCall('p_pol[base + 2]', 'p_pol[base + 6]', 'p_pol[base + 7]')}),
                r[q + 1:q + 6]);
            END LOOP;
          END IF;
          res := res || ARRAY[CASE WHEN all_ok THEN 1 ELSE 0 END, now]::float8[];
          FOR k IN 0..np - 1 LOOP
            q := ro[k + 1];
            IF reports THEN
              res := res || rb[q + 1:q + 6];
            ELSE
              s := (st[p_pol[pj + k * 7 + 1]::int]).s;
              res := res || ARRAY[rb[q + 1], coalesce(array_length(s, 1), -1)]::float8[] || s;
            END IF;
          END LOOP;
          FOR k IN 0..np - 1 LOOP
            q := ro[k + 1];
            n_len := rb[q + 7]::int;
            IF is_commit AND n_len >= 0 THEN
              base := pj + k * 7;
              ki := p_pol[base + 1]::int;
              st[ki] := ROW(rb[q + 8:q + 7 + n_len]);
              dirty[ki] := true;
              IF all_ok THEN
                expiry[ki] := ${expiry('now', 'rb[q + 5]')};
              ELSE
                expiry[ki] := ${expiry(
                  'now',
                  untouched(
                    n,
                    'p_pol[base + 2]::int',
                    'p_pol[base + 3]',
                    'p_pol[base + 5]',
                    'p_pol[base + 6]',
                    'p_pol[base + 7]',
                    '(st[ki]).s',
                  ),
                )};
              END IF;
            END IF;
          END LOOP;
        END IF;
        pj := pj + np * 7;
      END LOOP;

      IF p_locked = 1 AND optimistic THEN
        IF dirty[1] AND (st[1]).s IS NOT NULL THEN
          INSERT INTO ${n.qualified} (key, state, expires_at) VALUES (p_keys[1], (st[1]).s, expiry[1])
            ON CONFLICT DO NOTHING;
          IF NOT FOUND THEN
            -- Created by another transaction since it was read: decide the batch again on that row.
            SELECT t.state INTO s FROM ${n.qualified} t WHERE t.key = p_keys[1] FOR UPDATE;
            optimistic := NOT FOUND;
            st[1] := ROW(s);
            dirty[1] := false;
            res := '{}';
            resets := false;
            prune_now := NULL;
            -- Read the clock again, now that the row is held: time never goes back on a key.
            server_now := NULL;
            CONTINUE attempt;
          END IF;
          created := 1;
        END IF;
      ELSIF p_locked = 1 THEN
        IF dirty[1] AND (st[1]).s IS NOT NULL THEN
          UPDATE ${n.qualified} t SET state = (st[1]).s, expires_at = expiry[1] WHERE t.key = p_keys[1];
        ELSIF dirty[1] THEN
          DELETE FROM ${n.qualified} t WHERE t.key = p_keys[1];
        END IF;
      ELSIF p_locked > 1 THEN
        UPDATE ${n.qualified} AS t SET state = u.s, expires_at = u.e
          FROM unnest(p_keys[1:p_locked], st[1:p_locked], expiry[1:p_locked], dirty[1:p_locked]) AS u(k, s, e, d)
          WHERE u.d AND u.s IS NOT NULL AND t.key = u.k;
        IF created > 0 OR resets THEN
          -- Empty rows created above and never written, and rows reset: gone.
          DELETE FROM ${n.qualified} AS t
            USING unnest(p_keys[1:p_locked], st[1:p_locked], dirty[1:p_locked]) AS u(k, s, d)
            WHERE t.key = u.k AND u.s IS NULL AND (u.d OR t.state IS NULL);
        END IF;
      END IF;
      EXIT attempt;
    END LOOP;
    IF created > 0 AND prune_now IS NOT NULL THEN
      PERFORM ${n.fn('prune')}(prune_now, created);
    END IF;
    RETURN array_to_string(res, ',');
  END
  $fn$;`;
}

/**
 * reservation.ts `cancelReservation`, in one transaction: gives a booked call's charge back under each
 * meter policy while the call is not yet due and is still the last one booked on it (its TAT is the one
 * the reservation set); other algorithms keep it counted.
 *
 * Parameters: `p_keys` the call's row keys in policy order; `p_now` µs (NaN: the server's
 * `clock_timestamp()`); `p_cost` the call's cost; `p_pol` 5 numbers per policy: kind, a, b, c (see
 * compile.ts) and the reservation's TAT. Rows are locked in key order, as the decide function locks
 * them, so the two never deadlock. Returns true when every policy gave the whole cost back.
 */
function cancelFunction(n: SqlNames): string {
  return `
  CREATE OR REPLACE FUNCTION ${n.fn('cancel')}(p_keys text[], p_now float8, p_cost float8, p_pol float8[])
  RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  DECLARE
    np int := coalesce(array_length(p_keys, 1), 0);
    now float8 := p_now;
    due float8 := '-Infinity';
    all_ok boolean := true;
    ts timestamp;
    st float8[];
    k int; base int;
    at float8; tat float8; back float8; reset float8;
  BEGIN
    ${lockRowsThenClock(n)}
    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      IF p_pol[base + 1] = ${KIND_METER} THEN
${flagGuard(KINDS.meter, { a: 'p_pol[base + 2]', b: 'p_pol[base + 3]', c: 'p_pol[base + 4]' }, '        ')}
        IF p_pol[base + 4] = 1 THEN
          at := p_pol[base + 5] - ${charge('p_cost', 'p_pol[base + 2]')};
        ELSE
          at := p_pol[base + 5] - p_pol[base + 3];
        END IF;
        IF at > due THEN due := at; END IF;
      END IF;
    END LOOP;
    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      tat := p_pol[base + 5];
      SELECT t.state INTO st FROM ${n.qualified} t WHERE t.key = p_keys[k + 1];
      IF p_pol[base + 1] <> ${KIND_METER} OR now >= due OR st IS NULL OR st[2] <> tat THEN
        all_ok := false;
      ELSE
        back := tat - ${charge('p_cost', 'p_pol[base + 2]')};
        reset := greatest(0, back - now, st[1] - now);
        UPDATE ${n.qualified} t SET state = ARRAY[st[1], back]::float8[], expires_at = ${expiry('now', 'reset')}
          WHERE t.key = p_keys[k + 1];
      END IF;
    END LOOP;
    RETURN all_ok;
  END
  $fn$;`;
}

/**
 * The start of the cancel and refund functions: locks the rows of `p_keys` in key order (as the decide
 * function locks them), then reads the server's clock into `now` unless the caller gave a time.
 */
function lockRowsThenClock(n: SqlNames): string {
  return `PERFORM 1 FROM ${n.qualified} t WHERE t.key = ANY(p_keys) ORDER BY t.key FOR UPDATE;
    IF now = 'NaN'::float8 THEN
      ${serverNow('now')}
    END IF;`;
}

/**
 * The opening of a function that changes states after the call (refund, settle): its name, parameters
 * (the row keys, the time, `params`, the policies) and locals.
 */
function lateHead(n: SqlNames, name: 'refund' | 'settle_cost', params: string): string {
  return `  CREATE OR REPLACE FUNCTION ${n.fn(name)}(
    p_keys text[], p_now float8, ${params}, p_pol float8[])
  RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $fn$
  DECLARE
    np int := coalesce(array_length(p_keys, 1), 0);
    now float8 := p_now;
    ts timestamp;
    st float8[]; nx float8[]; r float8[];
    k int; base int; kind int;
    lim float8; a float8; b float8; c float8;
`;
}

/** Their loop over the policies, up to the state read (`st`) and the next one cleared (`nx`). */
function lateLoopHead(n: SqlNames): string {
  return `    FOR k IN 0..np - 1 LOOP
      base := k * 5;
      kind := p_pol[base + 1]::int;
      lim := p_pol[base + 2];
      a := p_pol[base + 3];
      b := p_pol[base + 4];
      c := p_pol[base + 5];
      SELECT t.state INTO st FROM ${n.qualified} t WHERE t.key = p_keys[k + 1];
      nx := NULL;
`;
}

/** Their loop's end: a next state is written with the expiry a cost-0 evaluation gives it. */
function lateLoopTail(n: SqlNames): string {
  return `      IF nx IS NOT NULL THEN
        r := ${n.fn('policy')}(kind, lim, a, b, c, nx, now, 0, 0);
        UPDATE ${n.qualified} t SET state = nx, expires_at = ${expiry('now', 'r[5]')}
          WHERE t.key = p_keys[k + 1];
      END IF;
    END LOOP;
    RETURN true;
  END
  $fn$;`;
}

/**
 * refund.ts `refundPolicy`, in one transaction: gives back the unused units of a lease (a committed call
 * of cost `p_leased` decided at `p_leased_at` µs) under each policy, as far as the algorithm can still
 * tell them apart; the new state expires when a cost-0 evaluation says it is untouched.
 *
 * Parameters: `p_keys` the row keys in policy order; `p_now` µs (NaN: the server's `clock_timestamp()`);
 * `p_leased_at`, `p_leased`, `p_unused`; `p_pol` 5 numbers per policy: kind, limit, a, b, c (compile.ts).
 * Rows are locked in key order, as the decide function locks them. Returns true.
 */
function refundFunction(n: SqlNames): string {
  const refunds = kindBranches('kind', (port) => port.refund(n), '      ');
  return `
${lateHead(n, 'refund', 'p_leased_at float8, p_leased float8, p_unused float8')}  BEGIN
    ${lockRowsThenClock(n)}
    IF NOT (p_unused > 0) OR p_unused > p_leased THEN RETURN true; END IF;
${lateLoopHead(n)}      CONTINUE WHEN st IS NULL;
${refunds}
${lateLoopTail(n)}`;
}

/**
 * settle.ts `settlePolicy`, in one transaction: settles a call admitted at `p_at` µs with an estimate of
 * `p_estimate` at its actual cost `p_actual` under each policy. Below the estimate it is the refund of
 * the difference (each kind's `refund` branch, as `refundFunction` runs it); above it a meter's debt: the
 * TAT moves by the difference of the two charges, counted from now when the key owes nothing, to at most
 * ${MAX_DEBT_US} µs owed (`MAX_DEBT_US`). Only meters settle (the client refuses the other kinds first);
 * another kind raises. A debt may land on a key without a row: the rows are created first, with no
 * state, in the order the decide function creates them, then locked in key order as it locks them.
 *
 * Parameters: `p_keys` the row keys in policy order; `p_now` µs (NaN: the server's `clock_timestamp()`);
 * `p_at`, `p_estimate`, `p_actual`; `p_pol` 5 numbers per policy: kind, limit, a, b, c (compile.ts).
 * Returns true.
 */
function settleCostFunction(n: SqlNames): string {
  const refunds = kindBranches('kind', (port) => port.refund(n), '        ');
  return `
${lateHead(n, 'settle_cost', 'p_at float8, p_estimate float8, p_actual float8')}    -- The names the kinds' refund branches read.
    p_leased float8 := p_estimate;
    p_leased_at float8 := p_at;
    p_unused float8 := p_estimate - p_actual;
    extra float8; owed_from float8; tat float8; cap float8;
  BEGIN
    IF p_actual > p_estimate THEN
      INSERT INTO ${n.qualified} AS t (key, state, expires_at)
        SELECT u.k, NULL, 0 FROM unnest(p_keys) AS u(k) ORDER BY u.k COLLATE "C"
        ON CONFLICT DO NOTHING;
    END IF;
    PERFORM 1 FROM ${n.qualified} t WHERE t.key = ANY(p_keys) ORDER BY t.key FOR UPDATE;
    IF now = 'NaN'::float8 THEN
      ${serverNow('now')}
    END IF;
    IF NOT (p_actual <> p_estimate) THEN RETURN true; END IF;
${lateLoopHead(n)}      IF p_actual < p_estimate THEN
        CONTINUE WHEN st IS NULL;
${refunds}
      ELSE
        IF kind <> ${KIND_METER} THEN
          RAISE EXCEPTION 'floodgate: only a meter policy settles a debt, not kind %', kind;
        END IF;
        extra := ${charge('p_actual', 'a')} - ${charge('p_estimate', 'a')};
        IF extra > 0 THEN
          tat := coalesce(st[2], now);
          owed_from := greatest(tat, now);
          cap := now + ${MAX_DEBT_US};
          tat := owed_from + extra;
          IF tat > cap THEN tat := greatest(owed_from, cap); END IF;
          nx := ARRAY[coalesce(st[1], 0), tat];
        END IF;
      END IF;
${lateLoopTail(n)}`;
}
