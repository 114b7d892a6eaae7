import { addressKey, type IpAddress, parseIp } from './address.js';
import { clientAddress, compileTrustProxy } from './client-address.js';
import { type MaybePromise, prefixLength, type RateLimitOptions, type RequestAccess } from './options.js';
import { type Shared, warnOnce } from './warnings.js';

/** Most client addresses whose keys a middleware remembers. */
const ADDRESS_KEYS_CACHED = 10_000;

/** The key of requests whose client address is unknown: they share it (limiting more, never less). */
const UNKNOWN_ADDRESS_KEY = 'unknown';

/** Headers a proxy writes; arriving while no proxy is trusted, they suggest a misconfiguration. */
const PROXY_HEADERS = ['x-forwarded-for', 'forwarded', 'x-real-ip'] as const;

/**
 * The key of a request: the `key` option's, or by default the client address (under `trustProxy`, or the
 * framework's own trusted-proxy setting) grouped per prefix length. Validates the options it reads.
 */
export function requestKey<Req>(
  options: RateLimitOptions<Req>,
  access: RequestAccess<Req>,
  shared: Shared,
): (request: Req) => MaybePromise<string> {
  const trust = compileTrustProxy(options.trustProxy);
  const ipv6Prefix = prefixLength(options.ipv6PrefixLength, 'ipv6PrefixLength', 128, 64);
  const ipv4Prefix = prefixLength(options.ipv4PrefixLength, 'ipv4PrefixLength', 32, 32);
  if (options.key !== undefined) return options.key;
  const keys = new AddressKeys(ipv4Prefix, ipv6Prefix);
  const unknownAddress = (): string => {
    warnOnce(
      shared,
      'FLOODGATE_UNKNOWN_ADDRESS',
      `the client address of a request is unknown (a Unix socket, a runtime that does not pass it, Hono's app.request()): such requests share the key ${JSON.stringify(UNKNOWN_ADDRESS_KEY)}. Pass \`key\`, \`trustProxy\` when a proxy forwards the address, or on Hono \`getConnInfo\` from your runtime's adapter.`,
    );
    return UNKNOWN_ADDRESS_KEY;
  };
  if (trust !== undefined) {
    // floodgate's own rules read the forwarded header.
    return (request) => {
      const peer = access.peer(request);
      const forwarded = access.header(request, trust.header);
      const memo = forwarded === undefined ? peer : `${peer}\n${forwarded}`;
      const known = memo === undefined ? undefined : keys.known(memo);
      if (known !== undefined) return known;
      const address = clientAddress(peer, forwarded, trust);
      return address === undefined ? unknownAddress() : keys.remember(memo, address);
    };
  }
  // No object: the framework's own setting decides, unless `false` pins the socket's peer.
  const followFramework = options.trustProxy === undefined;
  const frameworkAddress = followFramework ? access.address : undefined;
  return (request) => {
    if (followFramework && !shared.proxyChecked) noteProxyHeaders(request, access, shared);
    const text = frameworkAddress?.(request) || access.peer(request);
    if (text === undefined || text === '') return unknownAddress();
    const known = keys.known(text);
    if (known !== undefined) return known;
    const address: IpAddress | undefined = parseIp(text);
    if (address !== undefined) return keys.remember(text, address);
    // What the framework names is not an address (a client's garbage under a trust-everything
    // setting): the peer, the proxy that passed it on, stands in, which limits more, never less.
    const peer = access.peer(request);
    const stand = peer === undefined || peer === text ? undefined : parseIp(peer);
    return stand === undefined ? unknownAddress() : keys.remember(undefined, stand);
  };
}

/** Clients send many requests: their addresses' keys are remembered (a bounded map, emptied when full). */
class AddressKeys {
  private readonly keys = new Map<string, string>();
  constructor(
    private readonly ipv4Prefix: number,
    private readonly ipv6Prefix: number,
  ) {}

  known(memo: string): string | undefined {
    return this.keys.get(memo);
  }

  /** The key of `address`, remembered under `memo` (unless none, or too long to be worth it). */
  remember(memo: string | undefined, address: IpAddress): string {
    const key = addressKey(address, this.ipv4Prefix, this.ipv6Prefix);
    if (memo === undefined || memo.length > 256) return key;
    if (this.keys.size >= ADDRESS_KEYS_CACHED) this.keys.clear();
    this.keys.set(memo, key);
    return key;
  }
}

/**
 * Headers a proxy writes, arriving while nothing is trusted: every client behind that proxy would share
 * its address. Looked for until the framework is seen to trust a proxy, or the warning went out.
 */
function noteProxyHeaders<Req>(request: Req, access: RequestAccess<Req>, shared: Shared): void {
  for (const name of PROXY_HEADERS) {
    if (access.header(request, name) === undefined) continue;
    shared.proxyChecked = true;
    if (access.trustsProxy?.(request) === true) return;
    warnOnce(
      shared,
      'FLOODGATE_UNTRUSTED_PROXY',
      `a request came with ${name} but no proxy is trusted, so clients are keyed by the socket's peer: behind a proxy they all share its address. Set your framework's trusted-proxy setting (Express app.set('trust proxy', n), Fastify trustProxy, Koa app.proxy) or floodgate's trustProxy; trustProxy: false keeps the peer and silences this warning.`,
    );
    return;
  }
}
