import type { Decision, Policy } from 'floodgate';
import { type HeaderFormat, type HeaderWriter, headerWriter } from 'floodgate/http';
import type { DescriptorOutcome } from './engine.js';

/** A response header, as Envoy's `HeaderValue` carries it. */
export interface Header {
  readonly key: string;
  readonly value: string;
}

/** Header formats a service can send: those of `floodgate/http`. */
export const HEADER_FORMATS: readonly HeaderFormat[] = ['ietf', 'draft-7', 'draft-6', 'legacy', 'none'];

/** Orders decisions by how binding they are: denials (longest wait first), then least remaining. */
function tighter(a: Decision, b: Decision): boolean {
  if (a.allowed !== b.allowed) return !a.allowed;
  if (!a.allowed) return a.retryAfterMs > b.retryAfterMs;
  return a.remaining < b.remaining;
}

/**
 * Builds the rate-limit headers of a request's outcomes with the library's header writer (the same
 * headers the HTTP middleware sends), from every descriptor decided outside shadow mode, plus
 * `Retry-After` (whole seconds, rounded up) when the request is over the limit and waiting can help;
 * nothing at all with the format `none`.
 * With the IETF format every policy of every descriptor is listed (a policy name once: the tightest);
 * the single-policy formats describe the tightest descriptor.
 */
export class RateLimitHeaders {
  private readonly write: HeaderWriter;
  private readonly scratch: string[] = [];

  constructor(readonly format: HeaderFormat = 'ietf') {
    this.write = headerWriter({ format });
  }

  of(outcomes: readonly DescriptorOutcome[]): Header[] {
    // `none` is none: no rate-limit fields, and no Retry-After either.
    if (this.format === 'none') return [];
    let binding: DescriptorOutcome | undefined;
    let eligible = 0;
    let retryAfterMs = 0;
    let over = false;
    for (let i = 0; i < outcomes.length; i++) {
      const o = outcomes[i] as DescriptorOutcome;
      const d = o.decision;
      if (d === undefined || o.shadow || o.policies === undefined) continue;
      eligible++;
      if (!d.allowed) {
        over = true;
        if (d.retryAfterMs > retryAfterMs) retryAfterMs = d.retryAfterMs;
      }
      if (binding === undefined || tighter(d, binding.decision as Decision)) binding = o;
    }
    if (binding === undefined) return [];
    const headers: Header[] = [];
    if (eligible === 1 || this.format !== 'ietf') {
      this.pairs(binding, headers);
    } else {
      this.merged(outcomes, binding, headers);
    }
    if (over && Number.isFinite(retryAfterMs)) {
      headers.push({ key: 'Retry-After', value: String(Math.max(1, Math.ceil(retryAfterMs / 1000))) });
    }
    return headers;
  }

  /** The headers of one descriptor. */
  private pairs(o: DescriptorOutcome, headers: Header[]): void {
    const out = this.scratch;
    out.length = 0;
    this.write(o.decision as Decision, o.policies as readonly Policy[], Date.now(), out);
    for (let i = 0; i < out.length; i += 2) headers.push({ key: out[i] as string, value: out[i + 1] as string });
  }

  /** IETF lists of several descriptors, one item per policy name (from the tightest descriptor first). */
  private merged(outcomes: readonly DescriptorOutcome[], binding: DescriptorOutcome, headers: Header[]): void {
    const ordered = outcomes
      .filter((o) => o.decision !== undefined && !o.shadow && o.policies !== undefined && o !== binding)
      .sort((a, b) => (tighter(a.decision as Decision, b.decision as Decision) ? -1 : 1));
    ordered.unshift(binding);
    const seen = new Set<string>();
    const fields = new Map<string, string[]>();
    for (const o of ordered) {
      const parts: Header[] = [];
      this.pairs(o, parts);
      const names = (o.decision as Decision).policies.map((p) => p.policy);
      // Both fields list the descriptor's policies in order; keep the items of names not listed yet.
      const keep = names.map((name) => !seen.has(name));
      for (const name of names) seen.add(name);
      for (const { key, value } of parts) {
        const items = value.split(', ').filter((_, i) => keep[i]);
        if (items.length === 0) continue;
        let list = fields.get(key);
        if (list === undefined) {
          list = [];
          fields.set(key, list);
        }
        list.push(...items);
      }
    }
    for (const [key, items] of fields) headers.push({ key, value: items.join(', ') });
  }
}
