import { createHash } from 'node:crypto';
import { FloodgateError, invalid } from '../../errors.js';
import type { CompiledPolicy } from '../../model/compile.js';
import { exceedsCapacity, KIND_METER, KINDS } from '../../model/kinds.js';
import { meterCharge } from '../../model/meter.js';
import { booleanOption, checkOptionsObject, hasMethods, wholeOption } from '../kit/options.js';
import { stateKeys, validateIdentifier } from '../sql/common.js';
import type {
  CancelRequest,
  HeldResult,
  PermitClaim,
  RefundRequest,
  SettleRequest,
  Store,
  StoreRequest,
  StoreResult,
} from '../store.js';
import { declaresVariant } from './guards.js';
import { holdingPermitParams, holdingPermitReply, holdingStatement, holdingStatementName } from './holding.js';
import { meterReadStatement, meterWriteStatement } from './meter-fast.js';
import { dropVersionsStatement, INSTALLED_VERSIONS, migrationStatement } from './migration.js';
import { type PostgresPermitStore, postgresPermitStore } from './permit-store.js';
import { type PermitSqlNames, permitSqlNames } from './permits-sql.js';
import { cancelStatement, decideStatement, PORT_VERSION, refundStatement, settleCostStatement } from './port.js';
import type { PostgresClient } from './postgres-client.js';
import { decodeCall, decodeStatement, Reply } from './replies.js';
import { RESERVED_INFIX, type SqlNames, sqlNames } from './sql.js';
import { windowReadStatement, windowWriteStatement } from './window-fast.js';
import { FIXED_WINDOW_REPLY, METER_REPLY, type StatementReply } from './wire.js';

/** Options of {@link postgresStore}. */
export interface PostgresStoreOptions {
  /** The driver, through an adapter: `fromPg(pool)` or `fromPostgres(sql)`. The store never closes it. */
  client: PostgresClient;
  /** Schema of the table and functions, created by `migrate()` when missing. @default 'public' */
  schema?: string;
  /**
   * Table holding the state: `[a-z_][a-z0-9_]*`, at most 40 characters, not containing `__fg_` (the mark
   * of the objects `migrate()` creates beside it). @default 'floodgate_state'
   */
  table?: string;
  /**
   * Create the table UNLOGGED: no write-ahead log, so commits do not wait for the disk; the state is
   * emptied after a crash of the server (never after a clean restart) and is not replicated. @default false
   */
  unlogged?: boolean;
  /**
   * Statements in flight at once (keep it at most the pool's size). One is usually fastest: calls that
   * arrive while it runs make the next statement bigger, and a commit per statement, not the decisions in
   * it, is what costs. Raise it when statements are full (`maxBatch`) and the server has idle cores. Calls
   * on one key always share one lane, so they are decided in the order they were made. @default 1
   */
  concurrency?: number;
  /** Most calls decided by one statement. @default 128 */
  maxBatch?: number;
  /**
   * A call under a single meter policy (GCRA, token bucket with continuous refill, leaky bucket) or a
   * single fixed window that goes alone runs a plain statement that decides exactly the same with less work
   * for the server than the decide function. @default true
   */
  fastPath?: boolean;
  /**
   * Table of the store's own permit store (`store.permits`, as `postgresPermitStore({ client, schema,
   * table })` names it, in the same schema), created by `store.permits.migrate()`. @default 'floodgate_permits'
   */
  permitsTable?: string;
}

/** The PostgreSQL store. */
export interface PostgresStore extends Store {
  readonly name: 'postgres';
  readonly schema: string;
  readonly table: string;
  /**
   * The version of the PL/pgSQL port this store runs (`v` and 8 hex digits, a digest of its code): its
   * functions carry it in their names.
   */
  readonly version: string;
  /**
   * Creates (or updates) the schema, the table, its expiry index and the functions that decide, of this
   * store's `version`, beside those of other versions (which keep serving processes that still run them).
   * Idempotent and safe to run from several processes at once; run it at startup or in your migrations.
   */
  migrate(): Promise<void>;
  /**
   * Drops the functions of every other version of the port for this table, once no process runs one any
   * more (after a rolling deploy); resolves to the versions dropped (`''` is the port from before versions).
   */
  dropOtherVersions(): Promise<string[]>;
  /** Waits for the statements in flight and refuses new calls; the client stays open (it is yours). */
  close(): Promise<void>;
  /**
   * The store's own permit store, on the same client and schema (`postgresPermitStore` on
   * `permitsTable`; its `migrate()` creates its tables and functions): a limiter with a concurrency policy
   * and no `permits` keeps its permits here, and decides each `limit` in one statement (`decideWithPermit`).
   */
  readonly permits: PostgresPermitStore;
  /** A `limit` and a permit of `permits`, all or nothing in one statement (see holding.ts). */
  decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult>;
}

const OP_CHECK = 0;
const OP_LIMIT = 1;
const OP_RESET = 2;

interface Pending {
  op: 0 | 1 | 2;
  prefix: string;
  key: string;
  /** Row keys, one per policy. */
  keys: string[];
  policies: readonly CompiledPolicy[];
  request: StoreRequest | undefined;
  resolve(result: unknown): void;
  reject(error: unknown): void;
}

/**
 * A cancel or a refund: one statement of its own, beside the lanes. It runs once the calls made before
 * it on its key are answered; calls on its key made after it wait until it is done (`held`).
 */
interface Side {
  prefix: string;
  key: string;
  run: () => Promise<unknown>;
  resolve(result: unknown): void;
  reject(error: unknown): void;
}

interface Lane {
  queue: Pending[];
  /** The calls of the statement in flight. */
  sending: readonly Pending[] | undefined;
  /** Cancels and refunds waiting for calls on their key in this lane to be answered. */
  sides: Side[];
  busy: boolean;
}

/** A call held behind a cancel or a refund on its key: a lane call, or another cancel or refund. */
type Held = Pending | Side;

/**
 * State in PostgreSQL, decided by a PL/pgSQL port of the model that `migrate()` installs. A call is one
 * function call in one statement: its rows are locked, every policy is decided all-or-nothing, new
 * states are written, and a few expired rows are deleted through the expiry index, in one transaction.
 *
 * Calls made while a statement is in flight wait in their lane and then go together in the next
 * statement: still one atomic decision each, in arrival order per key, but one round trip and one commit
 * for all of them. A lone call is sent at once.
 *
 * The clock is the server's `clock_timestamp()` (so app servers with skewed clocks agree), unless the
 * limiter has a `clock` option.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { createLimiter, gcra } from 'floodgate';
 * import { fromPg, postgresStore } from 'floodgate/postgres';
 *
 * const store = postgresStore({ client: fromPg(new pg.Pool({ connectionString: process.env.DATABASE_URL })) });
 * await store.migrate();
 * const limiter = createLimiter({ store, policies: [gcra({ limit: 100, periodMs: 60_000 })] });
 * const decision = await limiter.limit(clientId);
 * ```
 */
export function postgresStore(options: PostgresStoreOptions): PostgresStore {
  checkOptionsObject(options, 'postgresStore options');
  const client = options.client;
  if (!hasMethods(client, 'query')) {
    throw invalid('ERR_INVALID_OPTION', 'client', client, 'a client from fromPg(pool) or fromPostgres(sql)');
  }
  const schema = validateIdentifier('schema', options.schema ?? 'public');
  const table = validateIdentifier('table', options.table ?? 'floodgate_state');
  if (table.includes(RESERVED_INFIX)) {
    throw invalid('ERR_INVALID_OPTION', 'table', table, `an identifier without "${RESERVED_INFIX}"`);
  }
  const unlogged = booleanOption('unlogged', options.unlogged ?? false);
  const concurrency = wholeOption('concurrency', options.concurrency ?? 1, 1, 1024);
  const maxBatch = wholeOption('maxBatch', options.maxBatch ?? 128, 1, 10_000);
  const fastPath = booleanOption('fastPath', options.fastPath ?? true);
  const permitsTable = validateIdentifier('permitsTable', options.permitsTable ?? 'floodgate_permits');
  if (permitsTable.includes(RESERVED_INFIX) || permitsTable === table) {
    throw invalid(
      'ERR_INVALID_OPTION',
      'permitsTable',
      permitsTable,
      `an identifier without "${RESERVED_INFIX}", other than the state table`,
    );
  }
  return new PostgresStoreImpl(
    client,
    sqlNames(schema, table, PORT_VERSION),
    unlogged,
    concurrency,
    maxBatch,
    fastPath,
    permitSqlNames(schema, permitsTable),
  );
}

/** Where the fixed-window write statement of a form and clock (0 the server's, 1 the caller's) sits. */
function windowId(aligned: 0 | 1, box: boolean, counts: boolean, clock: 0 | 1): number {
  return aligned | (box ? 2 : 0) | (counts ? 4 : 0) | (clock << 3);
}

class PostgresStoreImpl implements PostgresStore {
  readonly name = 'postgres' as const;
  readonly hasOwnClock = true;
  readonly schema: string;
  readonly table: string;
  readonly version = PORT_VERSION;
  private readonly lanes: Lane[];
  private readonly statement: string;
  private readonly statementName: string;
  /**
   * The meter statements (meter-fast.ts) by clock: the server's, then the caller's; the write statements
   * first by penalty box: without one, then with one.
   */
  private readonly meterWrite: readonly [readonly [Statement, Statement], readonly [Statement, Statement]];
  private readonly meterRead: readonly [Statement, Statement];
  /**
   * The fixed-window statements (window-fast.ts): the read statements by alignment (`c`), then clock as
   * above; the write statements by `windowId` (form and clock).
   */
  private readonly windowWrite: readonly Statement[];
  private readonly windowRead: readonly [readonly [Statement, Statement], readonly [Statement, Statement]];
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Cancels and refunds running. */
  private sidesRunning = 0;
  /**
   * Keys (by {@link keyId}) with a cancel or a refund not done yet, and the calls on them made since, in
   * order. Empty almost always, so a decision pays one size check.
   */
  private readonly held = new Map<string, Held[]>();
  private idle: (() => void) | undefined;

  constructor(
    private readonly client: PostgresClient,
    private readonly names: SqlNames,
    private readonly unlogged: boolean,
    concurrency: number,
    private readonly maxBatch: number,
    private readonly fastPath: boolean,
    private readonly permitNames: PermitSqlNames,
  ) {
    this.schema = names.schema;
    this.table = names.table;
    this.lanes = Array.from({ length: concurrency }, () => ({ queue: [], sending: undefined, sides: [], busy: false }));
    this.statement = decideStatement(names);
    this.statementName = statementName(names, 'decide');
    const meters = (penalty: boolean) => {
      const what = penalty ? 'meter_box' : 'meter';
      return [
        { text: meterWriteStatement(names, 'server', penalty), name: statementName(names, what) },
        { text: meterWriteStatement(names, 'caller', penalty), name: statementName(names, `${what}_at`) },
      ] as const;
    };
    this.meterWrite = [meters(false), meters(true)];
    this.meterRead = [
      { text: meterReadStatement(names, 'server'), name: statementName(names, 'meter_read') },
      { text: meterReadStatement(names, 'caller'), name: statementName(names, 'meter_read_at') },
    ];
    const windows = (aligned: 0 | 1) =>
      [
        { text: windowReadStatement(names, aligned, 'server'), name: statementName(names, `window_read${aligned}`) },
        { text: windowReadStatement(names, aligned, 'caller'), name: statementName(names, `window_read${aligned}_at`) },
      ] as const;
    this.windowRead = [windows(0), windows(1)];
    this.windowWrite = Array.from({ length: 16 }, (_, id) => {
      const form = { aligned: (id & 1) as 0 | 1, box: (id & 2) !== 0, counts: (id & 4) !== 0 };
      const clock = id & 8 ? 'caller' : 'server';
      return {
        text: windowWriteStatement(names, form, clock),
        name: statementName(
          names,
          `window${form.aligned}${form.box ? '_box' : ''}${form.counts ? '_counted' : ''}${clock === 'caller' ? '_at' : ''}`,
        ),
      };
    });
  }

  async migrate(): Promise<void> {
    await this.client.query(migrationStatement(this.names, this.unlogged), []);
  }

  async dropOtherVersions(): Promise<string[]> {
    const others = (await this.installedVersions()).filter((v) => v !== this.version);
    if (others.length > 0) await this.client.query(dropVersionsStatement(this.names, others), []);
    return others;
  }

  private async installedVersions(): Promise<string[]> {
    const rows = await this.client.query(INSTALLED_VERSIONS, [this.schema, this.table]);
    return rows.map((row) => String(row.version));
  }

  private ownPermits: PostgresPermitStore | undefined;
  private holding: Statement | undefined;

  get permits(): PostgresPermitStore {
    this.ownPermits ??= postgresPermitStore({
      client: this.client,
      schema: this.schema,
      table: this.permitNames.table,
    });
    return this.ownPermits;
  }

  /**
   * One statement of its own, sent at once (holding.ts): the permit's acquire, the call's decision (a
   * check when the permit was refused) and the lease's release when the decision is a denial.
   */
  async decideWithPermit(request: StoreRequest, claim: PermitClaim): Promise<HeldResult> {
    if (this.closed) throw new FloodgateError('ERR_CLOSED', 'the postgres store is closed');
    const permit = holdingPermitParams(request, claim);
    const item = (op: Pending['op']): Pending => ({
      op,
      prefix: request.prefix,
      key: request.key,
      keys: stateKeys(request.prefix, request.key, request.policies),
      policies: request.policies,
      request,
      resolve: () => {},
      reject: () => {},
    });
    const [keys, locked, asLimit, policies] = encodeBatch([item(OP_LIMIT)]);
    const asCheck = encodeBatch([item(OP_CHECK)])[2] as string;
    const params = [...permit, keys, locked, asLimit, asCheck, policies] as string[];
    this.holding ??= {
      text: holdingStatement(this.names, this.permitNames),
      name: holdingStatementName(this.names, this.permitNames),
    };
    const { text: statement, name } = this.holding;
    this.sidesRunning++;
    try {
      let rows: readonly Record<string, unknown>[];
      try {
        rows = await this.send(statement, name, params, 0);
      } catch (error) {
        const code = (error as { code?: unknown } | null)?.code;
        if (code !== '42883' && code !== '42P01' && code !== '3F000') throw error;
        throw new FloodgateError(
          'ERR_STORE_UNAVAILABLE',
          `the postgres store's tables or functions, or those of its permits (${this.permitNames.leases}), are missing: call store.migrate() and store.permits.migrate() first`,
          { cause: error },
        );
      }
      const acquired = holdingPermitReply(rows[0]?.permit);
      const text = rows[0]?.decided;
      if (typeof text !== 'string') {
        throw new FloodgateError('ERR_STORE_PROTOCOL', 'the postgres store got no decision from its holding statement');
      }
      const reply = new Reply(text);
      const result = decodeCall(reply, request.policies, { ...request, commit: acquired.granted });
      reply.end();
      return { permit: acquired, result };
    } finally {
      this.sidesRunning--;
      this.checkIdle();
    }
  }

  decide(request: StoreRequest): Promise<StoreResult> {
    return this.enqueue(
      request.commit ? OP_LIMIT : OP_CHECK,
      request.prefix,
      request.key,
      request.policies,
      request,
    ) as Promise<StoreResult>;
  }

  /**
   * One statement of its own (cancels are rare): it waits for the calls made before it on that key, and
   * calls made after it on that key wait for it; other keys go on. See `cancelFunction` in port.ts.
   */
  async cancel(request: CancelRequest): Promise<boolean> {
    const { reservation } = request;
    const pol: number[] = [];
    request.policies.forEach((c, i) => {
      pol.push(c.kind, c.a, c.b, c.c, reservation.tatUs[i] as number);
    });
    const keys = stateKeys(request.prefix, request.key, request.policies);
    const rows = (await this.side(request.prefix, request.key, () =>
      this.client.query(
        cancelStatement(this.names),
        [textArray(keys), String(request.nowUs ?? Number.NaN), String(reservation.cost), numberArray(pol)],
        statementName(this.names, 'cancel'),
      ),
    )) as readonly Record<string, unknown>[];
    const r = rows[0]?.r;
    if (typeof r !== 'boolean') {
      throw new FloodgateError('ERR_STORE_PROTOCOL', 'the postgres store got no result from its cancel function');
    }
    return r;
  }

  /**
   * One statement of its own (a lease gives back at most once), ordered on its key like `cancel`. See
   * `refundFunction` in port.ts.
   */
  refund(request: RefundRequest): Promise<void> {
    return this.afterTheCall(request, refundStatement(this.names), 'refund', [
      request.leasedAtUs,
      request.leased,
      request.unused,
    ]);
  }

  /**
   * One statement of its own (a call settles once), ordered on its key like `refund`. See
   * `settleCostFunction` in port.ts.
   */
  settle(request: SettleRequest): Promise<void> {
    return this.afterTheCall(request, settleCostStatement(this.names), 'settle_cost', [
      request.atUs,
      request.estimate,
      request.actual,
    ]);
  }

  /** A refund or a settle: `statement` with the row keys, the time, `numbers` and the policies. */
  private async afterTheCall(
    request: RefundRequest | SettleRequest,
    statement: string,
    fn: 'refund' | 'settle_cost',
    numbers: readonly number[],
  ): Promise<void> {
    const pol: number[] = [];
    for (const c of request.policies) pol.push(c.kind, c.limit, c.a, c.b, c.c);
    const keys = stateKeys(request.prefix, request.key, request.policies);
    await this.side(request.prefix, request.key, () =>
      this.client.query(
        statement,
        [textArray(keys), String(request.nowUs ?? Number.NaN), ...numbers.map(String), numberArray(pol)],
        statementName(this.names, fn),
      ),
    );
  }

  async reset(prefix: string, key: string, policies: readonly CompiledPolicy[]): Promise<void> {
    await this.enqueue(OP_RESET, prefix, key, policies, undefined);
  }

  /** Waits for the statements in flight and refuses new calls; the client stays open (it is yours). */
  close(): Promise<void> {
    this.closed = true;
    // Every call gets the same promise: a second close() neither hangs the first nor resolves early.
    this.closing ??= this.isIdle()
      ? Promise.resolve()
      : new Promise((resolve) => {
          this.idle = resolve;
        });
    return this.closing;
  }

  private enqueue(
    op: Pending['op'],
    prefix: string,
    key: string,
    policies: readonly CompiledPolicy[],
    request: StoreRequest | undefined,
  ): Promise<unknown> {
    if (this.closed) return Promise.reject(new FloodgateError('ERR_CLOSED', 'the postgres store is closed'));
    return new Promise((resolve, reject) => {
      const pending: Pending = {
        op,
        prefix,
        key,
        keys: stateKeys(prefix, key, policies),
        policies,
        request,
        resolve,
        reject,
      };
      const held = this.held.size === 0 ? undefined : this.held.get(keyId(prefix, key));
      if (held === undefined) this.toLane(pending);
      else held.push(pending);
    });
  }

  private toLane(pending: Pending): void {
    const lane = this.laneOf(pending.prefix, pending.key);
    lane.queue.push(pending);
    if (!lane.busy) {
      lane.busy = true;
      // Calls made in the same tick share the first statement; a lone call waits for nothing else.
      queueMicrotask(() => this.flush(lane));
    }
  }

  private laneOf(prefix: string, key: string): Lane {
    return this.lanes[laneOf(prefix, key, this.lanes.length)] as Lane;
  }

  /** Runs a cancel or a refund after the calls made before it on its key, and before those made after it. */
  private side(prefix: string, key: string, run: () => Promise<unknown>): Promise<unknown> {
    if (this.closed) return Promise.reject(new FloodgateError('ERR_CLOSED', 'the postgres store is closed'));
    return new Promise((resolve, reject) => {
      const side: Side = { prefix, key, run, resolve, reject };
      const id = keyId(prefix, key);
      const held = this.held.get(id);
      if (held !== undefined) {
        held.push(side);
        return;
      }
      this.held.set(id, []);
      this.startSide(side);
    });
  }

  /** Runs a side statement now, or once the lane has answered every call on its key it holds. */
  private startSide(side: Side): void {
    const lane = this.laneOf(side.prefix, side.key);
    const onKey = (p: Pending) => p.key === side.key && p.prefix === side.prefix;
    if (lane.queue.some(onKey) || lane.sending?.some(onKey) === true) {
      lane.sides.push(side);
      return;
    }
    this.sidesRunning++;
    // A client that throws instead of rejecting fails this call only.
    new Promise<unknown>((resolve) => resolve(side.run())).then(
      (rows) => this.sideDone(side, () => side.resolve(rows)),
      (error: unknown) => this.explain(error).then((failure) => this.sideDone(side, () => side.reject(failure))),
    );
  }

  private sideDone(side: Side, settle: () => void): void {
    this.sidesRunning--;
    settle();
    // The calls held behind it go on in order, up to the next cancel or refund on the key.
    const id = keyId(side.prefix, side.key);
    const held = this.held.get(id) as Held[];
    let next: Held | undefined = held.shift();
    while (next !== undefined && !('run' in next)) {
      this.toLane(next);
      next = held.shift();
    }
    if (next === undefined) this.held.delete(id);
    else this.startSide(next);
    this.checkIdle();
  }

  /** After a statement: the cancels and refunds no call of this lane holds back any longer start. */
  private releaseSides(lane: Lane): void {
    if (lane.sides.length === 0) return;
    const waiting = lane.sides;
    lane.sides = [];
    for (const side of waiting) this.startSide(side);
  }

  private flush(lane: Lane): void {
    if (this.fastPath && lane.queue.length === 1) {
      const item = lane.queue[0] as Pending;
      const call = singleCall(item);
      if (call !== undefined) {
        const sent = call.policy.kind === KIND_METER ? this.sendMeter(item, call) : this.sendWindow(item, call);
        if (sent !== undefined) {
          lane.queue = [];
          this.settleSingle(lane, item, call, sent);
          return;
        }
      }
    }
    const end = Math.min(lane.queue.length, this.maxBatch);
    const batch = end === lane.queue.length ? lane.queue : lane.queue.slice(0, end);
    lane.queue = end === lane.queue.length ? [] : lane.queue.slice(end);
    let params: string[];
    try {
      params = encodeBatch(batch);
    } catch (error) {
      for (const item of batch) item.reject(error);
      this.next(lane);
      return;
    }
    lane.sending = batch;
    this.send(this.statement, this.statementName, params, 0).then(
      (rows) => {
        try {
          settleBatch(batch, rows);
        } catch (error) {
          for (const item of batch) item.reject(error);
        }
        this.next(lane);
      },
      (error: unknown) =>
        this.explain(error).then((failure) => {
          for (const item of batch) item.reject(failure);
          this.next(lane);
        }),
    );
  }

  /** A lone call under one meter policy: one of the plain statements of meter-fast.ts. */
  private sendMeter(item: Pending, call: SingleCall): Promise<readonly Record<string, unknown>[]> {
    const { request, policy } = call;
    const key = item.keys[0] as string;
    const clock = request.nowUs === undefined ? 0 : 1;
    const charge = meterCharge(request.cost, policy.a);
    const exceeds = exceedsCapacity(policy, request.cost);
    const write = request.commit && request.cost !== 0 && !exceeds;
    // The meter admits while TAT ≤ now + room (kinds/meter.ts); queue mode books no further ahead than τ.
    const room = exceeds ? '-Infinity' : String(policy.b + (policy.c === 1 ? 0 : request.maxDelayUs) - charge);
    if (write) {
      const penalty = policy.blockUs > 0 ? 1 : 0;
      const params = [key, String(charge), room];
      if (penalty === 1) params.push(String(policy.blockUs));
      if (clock === 1) params.push(String(request.nowUs));
      const statement = this.meterWrite[penalty][clock];
      return this.send(statement.text, statement.name, params, 0);
    }
    const statement = this.meterRead[clock];
    return this.send(statement.text, statement.name, clock === 1 ? [key, room, String(request.nowUs)] : [key, room], 0);
  }

  /**
   * A lone call under one fixed-window policy: one of the plain statements of window-fast.ts, or undefined
   * for the decide function (a cost beyond the limit that a window counting denied calls counts).
   */
  private sendWindow(item: Pending, call: SingleCall): Promise<readonly Record<string, unknown>[]> | undefined {
    const { request, policy } = call;
    const exceeds = exceedsCapacity(policy, request.cost);
    const write = request.commit && request.cost !== 0;
    if (write && exceeds && policy.b === 1) return undefined;
    const clock = request.nowUs === undefined ? 0 : 1;
    const aligned = policy.c === 1 ? 1 : 0;
    const params = [item.keys[0] as string, String(request.cost), String(policy.limit), String(policy.a)];
    let statement: Statement;
    if (write && !exceeds) {
      const box = policy.blockUs > 0;
      if (box) params.push(String(policy.blockUs));
      statement = this.windowWrite[windowId(aligned, box, policy.b === 1, clock)] as Statement;
    } else {
      statement = this.windowRead[aligned][clock];
    }
    if (clock === 1) params.push(String(request.nowUs));
    return this.send(statement.text, statement.name, params, 0);
  }

  /** Hands a lone call its decision from one of the single-policy statements. */
  private settleSingle(
    lane: Lane,
    item: Pending,
    call: SingleCall,
    sent: Promise<readonly Record<string, unknown>[]>,
  ): void {
    lane.sending = [item];
    const layout: StatementReply = call.policy.kind === KIND_METER ? METER_REPLY : FIXED_WINDOW_REPLY;
    sent.then(
      (rows) => {
        try {
          item.resolve(decodeStatement(call.policy, call.request, rows, layout));
        } catch (error) {
          item.reject(error);
        }
        this.next(lane);
      },
      (error: unknown) =>
        this.explain(error).then((failure) => {
          item.reject(failure);
          this.next(lane);
        }),
    );
  }

  /**
   * Runs a statement. A transaction PostgreSQL aborted to break a deadlock or a serialization conflict
   * changed nothing, so it is run again (the locking order makes both rare; see port.ts).
   */
  private async send(
    text: string,
    name: string,
    params: string[],
    attempt: number,
  ): Promise<readonly Record<string, unknown>[]> {
    try {
      return await this.client.query(text, params, name);
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      if ((code === '40P01' || code === '40001') && attempt < 3) return this.send(text, name, params, attempt + 1);
      throw error;
    }
  }

  private next(lane: Lane): void {
    lane.sending = undefined;
    this.releaseSides(lane);
    if (lane.queue.length > 0) {
      this.flush(lane);
      return;
    }
    lane.busy = false;
    this.checkIdle();
  }

  private isIdle(): boolean {
    return this.sidesRunning === 0 && this.lanes.every((l) => !l.busy);
  }

  private checkIdle(): void {
    if (this.idle !== undefined && this.isIdle()) {
      this.idle();
      this.idle = undefined;
    }
  }

  /**
   * Turns "the table or a function is missing" into advice, never rejecting: `ERR_STORE_VERSION` when
   * the database holds the functions of other versions of the port only (another release of floodgate
   * migrated it: `migrate()` installs this one beside them), else `ERR_STORE_UNAVAILABLE` (call
   * `migrate()` first). Other failures pass through (the limiter wraps them).
   */
  private async explain(error: unknown): Promise<unknown> {
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== '42883' && code !== '42P01' && code !== '3F000') return error;
    let others: string[] = [];
    if (code === '42883') {
      try {
        const installed = await this.installedVersions();
        if (!installed.includes(this.version)) others = installed;
      } catch {
        // The catalog could not be read either: the advice below still holds.
      }
    }
    if (others.length > 0) {
      const found = others.map((v) => (v === '' ? 'the one from before versions' : v)).join(', ');
      return new FloodgateError(
        'ERR_STORE_VERSION',
        `the postgres store runs version ${this.version} of its functions, but ${this.names.qualified} has only version ${found}: run store.migrate() to install ${this.version} beside them`,
        { cause: error },
      );
    }
    return new FloodgateError(
      'ERR_STORE_UNAVAILABLE',
      `the postgres store's table ${this.names.qualified} or its functions are missing: call store.migrate() first`,
      { cause: error },
    );
  }
}

/**
 * The name `pg` prepares a statement under: unique per schema and table and at most 63 bytes, since
 * PostgreSQL cuts longer names (two stores on one pool would then share one name for two statements).
 */
function statementName(
  names: SqlNames,
  what:
    | 'decide'
    | 'cancel'
    | 'refund'
    | 'settle_cost'
    | `meter${'' | '_box'}${'' | '_at'}`
    | 'meter_read'
    | 'meter_read_at'
    | `window${0 | 1}${'' | '_box'}${'' | '_counted'}${'' | '_at'}`
    | `window_read${0 | 1}`
    | `window_read${0 | 1}_at`,
): string {
  const hash = createHash('sha256')
    .update(`${names.schema}.${names.table}.${names.version}`)
    .digest('hex')
    .slice(0, 24);
  return `floodgate_${hash}_${what}`;
}

/** A statement the store runs again and again, under the name drivers prepare it by. */
interface Statement {
  readonly text: string;
  readonly name: string;
}

const KIND_FIXED_WINDOW = KINDS['fixed-window'].id;

/** A call a single-policy statement decides: a `limit` or a `check` under one meter or fixed-window policy. */
interface SingleCall {
  readonly request: StoreRequest;
  readonly policy: CompiledPolicy;
}

/**
 * The call as the single-policy statements take it, or undefined for any other: several policies, another
 * kind or variant, a reset, or a caller's clock that is not a whole number of µs (the statements return
 * numbers as bigints).
 */
function singleCall(item: Pending): SingleCall | undefined {
  const request = item.request;
  if (request === undefined || item.policies.length !== 1) return undefined;
  const policy = item.policies[0] as CompiledPolicy;
  // A variant the kind does not declare goes to the decide function, whose guard raises on it.
  const kind =
    policy.kind === KIND_METER ? KINDS.meter : policy.kind === KIND_FIXED_WINDOW ? KINDS['fixed-window'] : undefined;
  if (kind === undefined || !declaresVariant(kind, policy)) return undefined;
  if (request.nowUs !== undefined && !Number.isSafeInteger(request.nowUs)) return undefined;
  return { request, policy };
}

/** One string per prefix and key (the prefix's length first, so no two pairs meet). */
function keyId(prefix: string, key: string): string {
  return `${prefix.length}:${prefix}${key}`;
}

/** FNV-1a over prefix and key: calls on one key always use the same lane, which keeps their order. */
function laneOf(prefix: string, key: string, lanes: number): number {
  if (lanes === 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < prefix.length; i++) h = Math.imul(h ^ prefix.charCodeAt(i), 0x01000193);
  h = Math.imul(h ^ 0, 0x01000193);
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return (h >>> 0) % lanes;
}

/** The four parameters of the decide function (see port.ts), as text. */
function encodeBatch(batch: readonly Pending[]): string[] {
  const written = new Set<string>();
  const read = new Set<string>();
  for (const item of batch) {
    for (const key of item.keys) (item.op === OP_CHECK ? read : written).add(key);
  }
  const keys = [...written];
  for (const key of read) if (!written.has(key)) keys.push(key);
  const index = new Map<string, number>();
  for (let i = 0; i < keys.length; i++) index.set(keys[i] as string, i + 1);
  const requests: number[] = [];
  const policies: number[] = [];
  for (const item of batch) {
    const r = item.request;
    requests.push(item.op, r?.cost ?? 0, r?.nowUs ?? Number.NaN, r?.maxDelayUs ?? 0, item.keys.length);
    item.policies.forEach((c, i) => {
      policies.push(index.get(item.keys[i] as string) as number, c.kind, c.limit, c.blockUs, c.a, c.b, c.c);
    });
  }
  return [textArray(keys), String(written.size), numberArray(requests), numberArray(policies)];
}

function settleBatch(batch: readonly Pending[], rows: readonly Record<string, unknown>[]): void {
  const text = rows[0]?.r;
  if (typeof text !== 'string') {
    throw new FloodgateError('ERR_STORE_PROTOCOL', 'the postgres store got no result from its decide function');
  }
  // Read every answer before settling any: a malformed reply fails the whole batch.
  const reply = new Reply(text);
  const results = batch.map((item) =>
    item.op === OP_RESET ? undefined : decodeCall(reply, item.policies, item.request as StoreRequest),
  );
  reply.end();
  for (let i = 0; i < batch.length; i++) (batch[i] as Pending).resolve(results[i]);
}

/** A PostgreSQL array literal of strings: every element quoted, `"` and `\` escaped. Keys stay data. */
function textArray(values: readonly string[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    out += `"${(values[i] as string).replace(/["\\]/g, '\\$&')}"`;
  }
  return `${out}}`;
}

/** A float8[] literal; JavaScript's shortest round-trip digits parse back to the same double. */
function numberArray(values: readonly number[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const v = values[i] as number;
    out += Object.is(v, -0) ? '-0' : String(v);
  }
  return `${out}}`;
}
