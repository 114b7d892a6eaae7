import { describeValue, FloodgateError, invalid } from '../errors.js';
import type { CompiledPolicy } from '../model/compile.js';
import type { Settlement } from '../model/settle.js';
import { settleRefusal } from '../model/settle.js';
import { sha256Base64url } from '../sha256.js';

// The limiter's side of settling (the store's side is the model's `settlePolicy`): it issues each
// settlement signed for its key, and refuses, before any store is asked, one it did not issue (forged or
// altered: a changed estimate could take back what another call was charged) and one settled already
// (which would give the same units back twice). What it remembers is bounded: a settled id is kept until
// its settlement expires, and settlements expire `settleWithinMs` after they are issued.

// Refuses `settle: true` on a call with a policy that cannot be settled (see `settleRefusal`).
export function requireSettleable(policies: readonly CompiledPolicy[], option = 'settle'): void {
  for (const c of policies) {
    const reason = settleRefusal(c);
    if (reason !== undefined) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `${option} cannot settle a call under policy ${JSON.stringify(c.name)}: ${reason}`,
        { option },
      );
    }
  }
}

// Random bytes as base64: the limiter's signing secret when none is given, and its settlements' id tag.
function randomSecret(size = 32): string {
  const crypto = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (typeof crypto?.getRandomValues !== 'function') {
    throw new FloodgateError('ERR_INVALID_OPTION', 'settle needs crypto.getRandomValues to sign settlements', {
      option: 'settle',
    });
  }
  const bytes = crypto.getRandomValues(new Uint8Array(size));
  let text = '';
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

// Compares two strings in time that depends on their length only.
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

// What a settlement's fields say, once checked: the estimate, the time and the policies.
export interface CheckedSettlement {
  readonly settlement: Settlement;
  // Whether the settlement may still give something back (it has not expired).
  readonly live: boolean;
}

// Most settlements issued under one id tag before a new tag is drawn (the counter stays within 8 base-36 digits).
const IDS_PER_TAG = 36 ** 8;

export class Settler {
  private secret: string | undefined;
  // Random characters that start every id this limiter issues, so ids stay unique among the limiters
  // that share a secret (the processes of a fleet): one process's settled id never refuses another's.
  private tag: string | undefined;
  private next = 0;
  // Settled ids of live settlements, with their expiry (ms), in the order they were settled.
  private readonly settled = new Map<string, number>();

  constructor(
    private readonly prefix: string,
    private readonly withinMs: number,
    secret?: string,
  ) {
    this.secret = secret;
  }

  // How many settled ids are remembered (for tests of the bound).
  get remembered(): number {
    return this.settled.size;
  }

  // A settlement for a call on `key` of estimate `cost`, decided at `atUs`, issued at `nowMs`.
  issue(key: string, cost: number, policies: readonly CompiledPolicy[], atUs: number, nowMs: number): Settlement {
    if (this.tag === undefined || this.next >= IDS_PER_TAG) {
      // 6 random bytes: 8 base64 characters, made safe for URLs and headers.
      this.tag = randomSecret(6).replace(/\+/g, '-').replace(/\//g, '_');
      this.next = 0;
    }
    const id = `${this.tag}${(this.next++).toString(36)}`;
    const names = policies.map((c) => c.name);
    const expiresAtMs = Math.ceil(nowMs + this.withinMs);
    const signature = this.sign(key, id, cost, names, atUs, expiresAtMs);
    return { id, cost, policies: names, atUs, expiresAtMs, signature };
  }

  // The settlement of `decision` for `key`, checked: undefined when the decision carries none (a denial,
  // a decision made without the store); throws `ERR_INVALID_OPTION` (option `decision`) for one this
  // limiter did not issue for this key unchanged, or one settled already.
  check(key: string, decision: unknown, nowMs: number): CheckedSettlement | undefined {
    if (typeof decision !== 'object' || decision === null) {
      throw invalid('ERR_INVALID_OPTION', 'decision', decision, 'a decision of this limiter');
    }
    const candidate = (decision as { settlement?: unknown }).settlement;
    if (candidate === undefined) return undefined;
    const s = candidate as Partial<Record<keyof Settlement, unknown>>;
    if (
      typeof candidate !== 'object' ||
      candidate === null ||
      typeof s.id !== 'string' ||
      s.id.length > 16 ||
      typeof s.cost !== 'number' ||
      !Number.isFinite(s.cost) ||
      !(s.cost >= 0) ||
      !Array.isArray(s.policies) ||
      s.policies.length > 32 ||
      !s.policies.every((p) => typeof p === 'string') ||
      typeof s.atUs !== 'number' ||
      !Number.isSafeInteger(s.atUs) ||
      typeof s.expiresAtMs !== 'number' ||
      !Number.isFinite(s.expiresAtMs) ||
      typeof s.signature !== 'string' ||
      this.secret === undefined ||
      !sameText(s.signature, this.sign(key, s.id, s.cost, s.policies as string[], s.atUs, s.expiresAtMs))
    ) {
      throw new FloodgateError(
        'ERR_INVALID_OPTION',
        `decision carries a settlement this limiter did not issue for key ${describeValue(key)}, or one that was altered: settle the decision as limit() returned it, on its key`,
        { option: 'decision' },
      );
    }
    const settlement = candidate as Settlement;
    this.prune(nowMs);
    if (this.settled.has(settlement.id)) {
      throw new FloodgateError('ERR_INVALID_OPTION', 'decision was settled already: a decision settles once', {
        option: 'decision',
      });
    }
    return { settlement, live: nowMs <= settlement.expiresAtMs };
  }

  // Remembers a live settlement as settled (before its store call: a concurrent second settle is refused).
  mark(settlement: Settlement): void {
    this.settled.set(settlement.id, settlement.expiresAtMs);
  }

  // Forgets a settlement whose debt the store failed to charge, so that it may be settled again.
  unmark(settlement: Settlement): void {
    this.settled.delete(settlement.id);
  }

  // Drops the settled ids that expired: from the oldest settled, while they have expired.
  private prune(nowMs: number): void {
    for (const [id, expiresAtMs] of this.settled) {
      if (expiresAtMs >= nowMs) break;
      this.settled.delete(id);
    }
  }

  // The keyed digest of a settlement: `H(secret ‖ H(secret ‖ fields))`, the nested form so that no one
  // can extend a digest they saw into one of longer fields.
  private sign(
    key: string,
    id: string,
    cost: number,
    policies: readonly string[],
    atUs: number,
    expiresAtMs: number,
  ): string {
    this.secret ??= randomSecret();
    const fields = JSON.stringify([this.prefix, key, id, cost, policies, atUs, expiresAtMs]);
    return sha256Base64url(`${this.secret}\n${sha256Base64url(`${this.secret}\n${fields}`)}`);
  }
}
