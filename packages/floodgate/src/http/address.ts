import { FloodgateError, invalid } from '../errors.js';

/**
 * An IP address as numbers: IPv4 as one 32-bit integer, IPv6 as eight 16-bit groups. IPv4-mapped IPv6
 * (`::ffff:192.0.2.1`, what a dual-stack socket reports for IPv4 peers) is parsed as the IPv4 address, so
 * one client never has two keys.
 */
export type IpAddress =
  | { readonly version: 4; readonly value: number }
  | { readonly version: 6; readonly groups: number[] };

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

function parseIpv4(text: string): number | undefined {
  const m = IPV4.exec(text);
  if (m === null) return undefined;
  let value = 0;
  for (let i = 1; i <= 4; i++) {
    const octet = Number(m[i]);
    if (octet > 255) return undefined;
    value = value * 256 + octet;
  }
  return value;
}

function parseGroups(part: string, out: number[]): boolean {
  if (part === '') return true;
  const pieces = part.split(':');
  for (let i = 0; i < pieces.length; i++) {
    const piece = pieces[i] as string;
    if (i === pieces.length - 1 && piece.includes('.')) {
      const v4 = parseIpv4(piece);
      if (v4 === undefined) return false;
      out.push(Math.floor(v4 / 65536), v4 % 65536);
    } else if (HEX_GROUP.test(piece)) {
      out.push(Number.parseInt(piece, 16));
    } else {
      return false;
    }
  }
  return true;
}

function parseIpv6(text: string): number[] | undefined {
  const zone = text.indexOf('%');
  const bare = zone >= 0 ? text.slice(0, zone) : text;
  const gap = bare.indexOf('::');
  const head: number[] = [];
  const tail: number[] = [];
  if (gap >= 0) {
    if (bare.indexOf('::', gap + 1) >= 0) return undefined;
    if (!parseGroups(bare.slice(0, gap), head) || !parseGroups(bare.slice(gap + 2), tail)) return undefined;
    if (head.length + tail.length > 7) return undefined;
    return [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  }
  if (!parseGroups(bare, head) || head.length !== 8) return undefined;
  return head;
}

/**
 * Parses an address as sockets and proxies write it: `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`,
 * `fe80::1%eth0`, `::ffff:192.0.2.1`, and with a port (`192.0.2.1:8080`, `[2001:db8::1]:443`).
 * Returns `undefined` for anything else (`unknown`, obfuscated `_hidden` identifiers, garbage).
 */
export function parseIp(input: string): IpAddress | undefined {
  let text = input.trim();
  if (text.length === 0 || text.length > 64) return undefined;
  if (text.charCodeAt(0) === 91 /* [ */) {
    const end = text.indexOf(']');
    if (end < 0) return undefined;
    const rest = text.slice(end + 1);
    if (rest !== '' && !/^:\d{1,5}$/.test(rest)) return undefined;
    text = text.slice(1, end);
  }
  const v4 = parseIpv4(text);
  if (v4 !== undefined) return { version: 4, value: v4 };
  const colon = text.indexOf(':');
  if (colon < 0) return undefined;
  if (text.indexOf(':', colon + 1) < 0) {
    // One colon: an IPv4 address with a port (some proxies write `X-Forwarded-For: 192.0.2.1:5000`).
    const withoutPort = parseIpv4(text.slice(0, colon));
    return withoutPort !== undefined && /^\d{1,5}$/.test(text.slice(colon + 1))
      ? { version: 4, value: withoutPort }
      : undefined;
  }
  const groups = parseIpv6(text);
  if (groups === undefined) return undefined;
  if (groups[0] === 0 && groups[1] === 0 && groups[2] === 0 && groups[3] === 0 && groups[4] === 0) {
    if (groups[5] === 0xffff) {
      return { version: 4, value: (groups[6] as number) * 65536 + (groups[7] as number) };
    }
  }
  return { version: 6, groups };
}

function formatIpv4(value: number): string {
  return `${value >>> 24}.${(value >>> 16) & 255}.${(value >>> 8) & 255}.${value & 255}`;
}

/** RFC 5952 text: lower case, the longest run of two or more zero groups (the first on a tie) as `::`. */
function formatIpv6(groups: readonly number[]): string {
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

/** Text of an address (canonical form). */
export function formatIp(address: IpAddress): string {
  return address.version === 4 ? formatIpv4(address.value) : formatIpv6(address.groups);
}

function maskIpv4(value: number, prefix: number): number {
  if (prefix >= 32) return value;
  if (prefix <= 0) return 0;
  return (value - (value % 2 ** (32 - prefix))) >>> 0;
}

function maskIpv6(groups: readonly number[], prefix: number): number[] {
  const out = groups.slice();
  for (let i = 0; i < 8; i++) {
    const bits = prefix - i * 16;
    if (bits >= 16) continue;
    out[i] = bits <= 0 ? 0 : (out[i] as number) & ((0xffff << (16 - bits)) & 0xffff);
  }
  return out;
}

/**
 * The rate-limit key of an address: the address itself, or its network when a prefix length groups it.
 * IPv6 is grouped by /64 by default because one subscriber usually holds a whole /64 (often larger) and
 * can rotate through its 2^64 addresses at will; keying single addresses would let it escape any limit.
 */
export function addressKey(address: IpAddress, ipv4PrefixLength: number, ipv6PrefixLength: number): string {
  if (address.version === 4) {
    return ipv4PrefixLength >= 32
      ? formatIpv4(address.value)
      : `${formatIpv4(maskIpv4(address.value, ipv4PrefixLength))}/${ipv4PrefixLength}`;
  }
  return ipv6PrefixLength >= 128
    ? formatIpv6(address.groups)
    : `${formatIpv6(maskIpv6(address.groups, ipv6PrefixLength))}/${ipv6PrefixLength}`;
}

/** A network to trust, as a version and a prefix of that version's bits. */
export interface Cidr {
  readonly text: string;
  readonly network: IpAddress;
  readonly prefix: number;
}

/** Named sets of networks accepted wherever CIDRs are. */
export const NAMED_NETWORKS: Readonly<Record<string, readonly string[]>> = {
  loopback: ['127.0.0.0/8', '::1/128'],
  private: ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7'],
  linklocal: ['169.254.0.0/16', 'fe80::/10'],
};

/** Parses `10.0.0.0/8`, `2001:db8::/32`, a bare address, or a name of {@link NAMED_NETWORKS}. */
export function parseCidrs(input: string, option: string): Cidr[] {
  const named = NAMED_NETWORKS[input];
  if (named !== undefined) return named.flatMap((cidr) => parseCidrs(cidr, option));
  const slash = input.indexOf('/');
  const network = parseIp(slash < 0 ? input : input.slice(0, slash));
  if (network === undefined) {
    throw invalid(
      'ERR_INVALID_OPTION',
      option,
      input,
      `an address, a CIDR or one of ${Object.keys(NAMED_NETWORKS).join(', ')}`,
    );
  }
  const bits = network.version === 4 ? 32 : 128;
  const prefixText = slash < 0 ? String(bits) : input.slice(slash + 1);
  const prefix = /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : Number.NaN;
  if (!(prefix >= 0 && prefix <= bits)) {
    throw new FloodgateError('ERR_INVALID_OPTION', `${option} has an invalid prefix length: ${JSON.stringify(input)}`, {
      option,
    });
  }
  return [{ text: input, network, prefix }];
}

/** True when `address` lies inside `cidr`. */
export function inCidr(address: IpAddress, cidr: Cidr): boolean {
  const network = cidr.network;
  if (address.version === 4) {
    return network.version === 4 && maskIpv4(address.value, cidr.prefix) === maskIpv4(network.value, cidr.prefix);
  }
  if (network.version !== 6) return false;
  const a = maskIpv6(address.groups, cidr.prefix);
  const b = maskIpv6(network.groups, cidr.prefix);
  for (let i = 0; i < 8; i++) if (a[i] !== b[i]) return false;
  return true;
}
