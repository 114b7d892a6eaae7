import { FloodgateError, invalid } from '../errors.js';
import { type Cidr, type IpAddress, inCidr, parseCidrs, parseIp } from './address.js';

/**
 * When to believe `X-Forwarded-For` or `Forwarded`. Without it only the socket's peer address counts,
 * since any client can write those headers. Both forms read the address chain from the right, where the
 * entries your own proxies appended are:
 * - `{ hops: n }`: exactly `n` proxies of yours stand in front of the app (a load balancer: 1); the
 *   client is the address `n` places left of the peer. Only safe when the app cannot be reached around
 *   them.
 * - `{ cidrs: [...] }`: peers and chain entries inside these networks (or `loopback`, `private`,
 *   `linklocal`) are your proxies; the client is the first address from the right outside them.
 */
export type TrustProxy =
  | { readonly hops: number; readonly header?: ForwardedHeader }
  | { readonly cidrs: readonly string[]; readonly header?: ForwardedHeader };

/** The header a trusted proxy writes. @default 'x-forwarded-for' */
export type ForwardedHeader = 'x-forwarded-for' | 'forwarded';

/** A validated {@link TrustProxy}. */
export interface ProxyTrust {
  readonly header: ForwardedHeader;
  readonly hops: number;
  readonly cidrs: readonly Cidr[] | undefined;
}

/** Validates a {@link TrustProxy} option. */
export function compileTrustProxy(input: TrustProxy | false | undefined): ProxyTrust | undefined {
  if (input === undefined || input === false) return undefined;
  if (typeof input !== 'object' || input === null) {
    throw invalid('ERR_INVALID_OPTION', 'trustProxy', input, '{ hops: n } or { cidrs: [...] }');
  }
  const header = input.header ?? 'x-forwarded-for';
  if (header !== 'x-forwarded-for' && header !== 'forwarded') {
    throw invalid('ERR_INVALID_OPTION', 'trustProxy.header', header, "'x-forwarded-for' or 'forwarded'");
  }
  const hasHops = 'hops' in input;
  const hasCidrs = 'cidrs' in input;
  if (hasHops === hasCidrs) {
    throw new FloodgateError('ERR_INVALID_OPTION', 'trustProxy needs exactly one of `hops` or `cidrs`', {
      option: 'trustProxy',
    });
  }
  if (hasHops) {
    const hops = input.hops;
    if (!Number.isInteger(hops) || hops < 1 || hops > 32) {
      throw invalid('ERR_INVALID_OPTION', 'trustProxy.hops', hops, 'an integer from 1 to 32');
    }
    return { header, hops, cidrs: undefined };
  }
  const list = input.cidrs;
  if (!Array.isArray(list) || list.length === 0) {
    throw invalid('ERR_INVALID_OPTION', 'trustProxy.cidrs', list, 'a non-empty array of CIDRs');
  }
  const cidrs = list.flatMap((cidr: unknown, i) => {
    if (typeof cidr !== 'string') throw invalid('ERR_INVALID_OPTION', `trustProxy.cidrs[${i}]`, cidr, 'a string');
    return parseCidrs(cidr, `trustProxy.cidrs[${i}]`);
  });
  return { header, hops: 0, cidrs };
}

/**
 * Splits an RFC 7239 `Forwarded` value into its elements on commas outside quoted strings, scanning from
 * the right. The entries your proxies appended are well formed and sit at the right end, so they split
 * the same whatever the client wrote to their left. A quoted string still open when the scan reaches the
 * start (an unterminated `"` the client sent) cannot be read: everything from the start to the last
 * comma before that quote becomes one element marked `malformed`, never a source of an address, and it
 * cannot swallow the entries on its right.
 */
function splitForwarded(value: string): { elements: string[]; malformed: boolean } {
  const elements: string[] = [];
  let end = value.length;
  let quoted = false;
  for (let i = value.length - 1; i >= 0; i--) {
    const c = value.charCodeAt(i);
    if (c === 34 /* " */) {
      if (!quoted) {
        quoted = true;
      } else {
        // Inside a quoted string a `"` preceded by an odd run of backslashes is escaped.
        let backslashes = 0;
        for (let j = i - 1; j >= 0 && value.charCodeAt(j) === 92 /* \ */; j--) backslashes++;
        if (backslashes % 2 === 0) quoted = false;
      }
    } else if (c === 44 /* , */ && !quoted) {
      elements.push(value.slice(i + 1, end));
      end = i;
    }
  }
  elements.push(value.slice(0, end));
  elements.reverse();
  return { elements, malformed: quoted };
}

/**
 * The `for=` node of each element of an RFC 7239 `Forwarded` header, unquoted (`''` when absent, and for
 * the leftmost element when it holds an unterminated quoted string: see {@link splitForwarded}).
 */
export function forwardedFor(value: string): string[] {
  const { elements, malformed } = splitForwarded(value);
  return elements.map((element, i) => {
    if (malformed && i === 0) return '';
    for (const pair of element.split(';')) {
      const eq = pair.indexOf('=');
      if (eq < 0 || pair.slice(0, eq).trim().toLowerCase() !== 'for') continue;
      let node = pair.slice(eq + 1).trim();
      if (node.length >= 2 && node.startsWith('"') && node.endsWith('"')) {
        node = node.slice(1, -1).replace(/\\(.)/g, '$1');
      }
      return node;
    }
    return '';
  });
}

/** The forwarded chain, leftmost (claimed client) first, as raw entries. */
function forwardedChain(value: string | undefined, header: ForwardedHeader): string[] {
  if (value === undefined || value === '') return [];
  // X-Forwarded-For has no quoted strings: a `"` in it is just a malformed entry, split on commas only.
  return header === 'forwarded' ? forwardedFor(value) : value.split(',');
}

function trusted(address: IpAddress | undefined, cidrs: readonly Cidr[]): boolean {
  if (address === undefined) return false;
  for (const cidr of cidrs) if (inCidr(address, cidr)) return true;
  return false;
}

/**
 * The client's address: the peer, or with a trusted proxy setting the address it names in the forwarded
 * chain. An entry that is not an address (`unknown`, `_hidden`, garbage) cannot be a key, so the nearest
 * valid address to its right stands in: the proxy that reported it, which limits more, never less.
 */
export function clientAddress(
  peer: string | undefined,
  forwarded: string | undefined,
  trust: ProxyTrust | undefined,
): IpAddress | undefined {
  const peerAddress = peer === undefined ? undefined : parseIp(peer);
  if (trust === undefined) return peerAddress;
  const cidrs = trust.cidrs;
  if (cidrs !== undefined && !trusted(peerAddress, cidrs)) return peerAddress;
  const chain = forwardedChain(forwarded, trust.header);
  if (chain.length === 0) return peerAddress;
  let stop: number;
  if (cidrs === undefined) {
    stop = Math.max(0, chain.length - trust.hops);
  } else {
    stop = chain.length;
    while (stop > 0) {
      const entry = parseIp(chain[stop - 1] as string);
      if (!trusted(entry, cidrs)) break;
      stop--;
    }
    // stop - 1 is the first untrusted entry; when every entry is a proxy of yours, the leftmost is the client.
    stop = Math.max(0, stop - 1);
  }
  for (let i = stop; i < chain.length; i++) {
    const address = parseIp(chain[i] as string);
    if (address !== undefined) return address;
  }
  return peerAddress;
}
