import { describe, expect, it } from 'vitest';
import { isFloodgateError } from '../../src/errors.js';
import { addressKey, formatIp, inCidr, parseCidrs, parseIp } from '../../src/http/address.js';
import { clientAddress, compileTrustProxy, forwardedFor, type TrustProxy } from '../../src/http/client-address.js';

const text = (input: string) => {
  const address = parseIp(input);
  return address === undefined ? undefined : formatIp(address);
};

describe('parseIp', () => {
  it.each([
    ['192.0.2.1', '192.0.2.1'],
    [' 192.0.2.1 ', '192.0.2.1'],
    ['192.0.2.1:8080', '192.0.2.1'],
    ['::ffff:192.0.2.1', '192.0.2.1'],
    ['::FFFF:c000:0201', '192.0.2.1'],
    ['[::ffff:192.0.2.1]:443', '192.0.2.1'],
    ['2001:DB8::1', '2001:db8::1'],
    ['2001:db8:0:0:0:0:0:1', '2001:db8::1'],
    ['[2001:db8::1]', '2001:db8::1'],
    ['[2001:db8::1]:4711', '2001:db8::1'],
    ['fe80::1%eth0', 'fe80::1'],
    ['::1', '::1'],
    ['::', '::'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'],
    ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1'],
    ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'],
    ['64:ff9b::192.0.2.33', '64:ff9b::c000:221'],
  ])('%s is %s', (input, expected) => {
    expect(text(input)).toBe(expected);
  });

  it.each([
    '',
    'unknown',
    '_hidden',
    '256.0.0.1',
    '1.2.3',
    '1.2.3.4.5',
    '2001:db8::1::1',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4:5:6:7::8',
    'g::1',
    '[2001:db8::1',
    '[2001:db8::1]x',
    '12345::1',
    '192.0.2.1:http',
  ])('%j is not an address', (input) => {
    expect(parseIp(input)).toBeUndefined();
  });
});

describe('addressKey', () => {
  const key = (input: string, v4 = 32, v6 = 64) => addressKey(parseIp(input) ?? expect.unreachable(), v4, v6);

  it('groups IPv6 by /64 by default, so rotating inside a subscriber network keeps one key', () => {
    expect(key('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(key('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(key('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(key('::1')).toBe('::/64');
  });

  it('honours other prefix lengths, down to single addresses', () => {
    expect(key('2001:db8:1:2:3:4:5:6', 32, 128)).toBe('2001:db8:1:2:3:4:5:6');
    expect(key('2001:db8:1:2:3:4:5:6', 32, 48)).toBe('2001:db8:1::/48');
    expect(key('2001:db8:1:2:3:4:5:6', 32, 56)).toBe('2001:db8:1::/56');
    expect(key('2001:db8:1:ff:3:4:5:6', 32, 60)).toBe('2001:db8:1:f0::/60');
    expect(key('192.0.2.77', 24)).toBe('192.0.2.0/24');
    expect(key('192.0.2.77', 0)).toBe('0.0.0.0/0');
    expect(key('255.255.255.255', 31)).toBe('255.255.255.254/31');
  });

  it('gives an IPv4 client the same key over IPv4 and IPv4-mapped IPv6', () => {
    expect(key('::ffff:203.0.113.7')).toBe(key('203.0.113.7'));
    expect(key('203.0.113.7')).toBe('203.0.113.7');
  });
});

describe('CIDRs', () => {
  const within = (address: string, cidr: string) =>
    parseCidrs(cidr, 'cidr').some((c) => inCidr(parseIp(address) ?? expect.unreachable(), c));

  it('match addresses of their network and version only', () => {
    expect(within('10.1.2.3', '10.0.0.0/8')).toBe(true);
    expect(within('11.1.2.3', '10.0.0.0/8')).toBe(false);
    expect(within('172.31.255.255', 'private')).toBe(true);
    expect(within('172.32.0.0', 'private')).toBe(false);
    expect(within('::ffff:127.0.0.1', 'loopback')).toBe(true);
    expect(within('::1', 'loopback')).toBe(true);
    expect(within('::2', 'loopback')).toBe(false);
    expect(within('fd12::1', 'private')).toBe(true);
    expect(within('fe80::1%lo', 'linklocal')).toBe(true);
    expect(within('2001:db8::1', '2001:db8::/32')).toBe(true);
    expect(within('2001:db9::1', '2001:db8::/32')).toBe(false);
    expect(within('192.0.2.1', '192.0.2.1')).toBe(true);
    expect(within('10.0.0.1', '::/0')).toBe(false);
  });

  it('reject bad input naming the option', () => {
    for (const bad of ['10.0.0.0/33', '::/129', 'nowhere', '10.0.0.0/x', '10.0.0.0/']) {
      try {
        parseCidrs(bad, 'trustProxy.cidrs[0]');
        expect.unreachable();
      } catch (error) {
        expect(isFloodgateError(error) && error.code === 'ERR_INVALID_OPTION').toBe(true);
        expect(isFloodgateError(error) && error.option).toBe('trustProxy.cidrs[0]');
      }
    }
  });
});

describe('forwardedFor', () => {
  it('reads the for= node of each element, quoted or not, in any case', () => {
    expect(
      forwardedFor(
        'for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711", proto=https, for=unknown',
      ),
    ).toEqual(['192.0.2.60', '[2001:db8:cafe::17]:4711', '', 'unknown']);
    expect(forwardedFor('for="_gazonk"')).toEqual(['_gazonk']);
    expect(forwardedFor('for="a,b", for=198.51.100.1')).toEqual(['a,b', '198.51.100.1']);
    expect(forwardedFor('for="a\\"b", for="c\\\\", for=1.2.3.4')).toEqual(['a"b', 'c\\', '1.2.3.4']);
  });

  it('does not let an unterminated quoted string swallow the elements on its right', () => {
    // The client wrote `for=6.6.6.6, for="x`; two proxies appended well-formed elements after it.
    expect(forwardedFor('for=6.6.6.6, for="x, for=5.6.7.8, for=198.51.100.9')).toEqual(['', '5.6.7.8', '198.51.100.9']);
    expect(forwardedFor('for="x, for="[2001:db8::1]:80", for=10.0.0.1')).toEqual(['', '[2001:db8::1]:80', '10.0.0.1']);
    expect(forwardedFor('"')).toEqual(['']);
  });
});

describe('clientAddress', () => {
  const client = (peer: string | undefined, forwarded: string | undefined, trust?: TrustProxy) => {
    const address = clientAddress(peer, forwarded, compileTrustProxy(trust));
    return address === undefined ? undefined : formatIp(address);
  };

  it('is the peer without a trusted-proxy setting, whatever the headers say', () => {
    expect(client('203.0.113.5', '198.51.100.1')).toBe('203.0.113.5');
    expect(client('::ffff:203.0.113.5', undefined)).toBe('203.0.113.5');
    expect(client(undefined, '198.51.100.1')).toBeUndefined();
  });

  it('counts hops from the right', () => {
    const one = { hops: 1 };
    expect(client('10.0.0.2', '198.51.100.1', one)).toBe('198.51.100.1');
    // A client prepending its own entries does not move the pick: the proxy appended the real one.
    expect(client('10.0.0.2', '1.1.1.1, 2.2.2.2, 198.51.100.1', one)).toBe('198.51.100.1');
    expect(client('10.0.0.2', '1.1.1.1, 198.51.100.1, 10.0.0.1', { hops: 2 })).toBe('198.51.100.1');
    // Fewer entries than hops: the leftmost is as far as the chain goes.
    expect(client('10.0.0.2', '198.51.100.1', { hops: 3 })).toBe('198.51.100.1');
    expect(client('10.0.0.2', '', one)).toBe('10.0.0.2');
    expect(client('10.0.0.2', undefined, one)).toBe('10.0.0.2');
  });

  it('with CIDRs, ignores the header of an untrusted peer and skips trusted entries', () => {
    const trust = { cidrs: ['10.0.0.0/8', 'loopback'] };
    expect(client('203.0.113.5', '198.51.100.1', trust)).toBe('203.0.113.5');
    expect(client('10.0.0.2', '198.51.100.1', trust)).toBe('198.51.100.1');
    expect(client('10.0.0.2', '1.1.1.1, 198.51.100.1, 10.0.0.7, 127.0.0.1', trust)).toBe('198.51.100.1');
    expect(client('10.0.0.2', '10.0.0.9, 10.0.0.7', trust)).toBe('10.0.0.9');
    expect(client('::1', '2001:db8::1', trust)).toBe('2001:db8::1');
  });

  it('stands in the nearest valid address on the right for an entry that is not one', () => {
    expect(client('10.0.0.2', 'unknown', { hops: 1 })).toBe('10.0.0.2');
    expect(client('10.0.0.2', '198.51.100.1, garbage, 10.0.0.1', { cidrs: ['10.0.0.0/8'] })).toBe('10.0.0.1');
  });

  it('keeps the count of proxy-appended entries when a client sends an unterminated quote', () => {
    // client 5.6.7.8 -> CDN (appends 5.6.7.8) -> load balancer 10.0.0.1 (appends the CDN) -> app
    const xff = { hops: 2 };
    expect(client('10.0.0.1', '6.6.6.6, 5.6.7.8, 198.51.100.9', xff)).toBe('5.6.7.8');
    expect(client('10.0.0.1', '6.6.6.6, ", 5.6.7.8, 198.51.100.9', xff)).toBe('5.6.7.8');
    expect(client('10.0.0.1', '9.9.9.1, "x, 5.6.7.8, 198.51.100.9', xff)).toBe('5.6.7.8');
    // X-Forwarded-For has no quoting: commas inside quotes still separate entries.
    expect(client('10.0.0.1', '"1.1.1.1, 5.6.7.8", 198.51.100.9', xff)).toBe('198.51.100.9');
    expect(client('10.0.0.1', '6.6.6.6, ", 5.6.7.8', { hops: 1 })).toBe('5.6.7.8');
    const fwd = { hops: 2, header: 'forwarded' as const };
    expect(client('10.0.0.1', 'for=6.6.6.6, for=5.6.7.8, for=198.51.100.9', fwd)).toBe('5.6.7.8');
    expect(client('10.0.0.1', 'for=6.6.6.6, for="x, for=5.6.7.8, for=198.51.100.9', fwd)).toBe('5.6.7.8');
    expect(client('10.0.0.1', 'for="6.6.6.6, for=5.6.7.8, for=198.51.100.9', fwd)).toBe('5.6.7.8');
    expect(client('10.0.0.1', 'for=6.6.6.6, for="x, for=5.6.7.8', { hops: 1, header: 'forwarded' })).toBe('5.6.7.8');
    // Nothing but the malformed client part: the nearest trusted entry, here the peer.
    expect(client('10.0.0.1', 'for="6.6.6.6, 7.7.7.7', fwd)).toBe('10.0.0.1');
    // With CIDRs the malformed part is never the client: the nearest entry a trusted proxy wrote is.
    const cidrs = { cidrs: ['10.0.0.0/8'], header: 'forwarded' as const };
    expect(client('10.0.0.1', 'for=6.6.6.6, for="x, for=5.6.7.8, for=10.0.0.7', cidrs)).toBe('5.6.7.8');
    expect(client('10.0.0.1', 'for="x, for=10.0.0.7', cidrs)).toBe('10.0.0.7');
  });

  it('reads RFC 7239 Forwarded when told to', () => {
    const trust = { hops: 1, header: 'forwarded' as const };
    expect(client('10.0.0.2', 'for=192.0.2.60;proto=https', trust)).toBe('192.0.2.60');
    expect(client('10.0.0.2', 'for=1.1.1.1, for="[2001:db8:cafe::17]:4711"', trust)).toBe('2001:db8:cafe::17');
    expect(client('10.0.0.2', 'for=_hidden', trust)).toBe('10.0.0.2');
  });

  it('rejects unclear settings', () => {
    for (const bad of [
      { hops: 0 },
      { hops: 1.5 },
      { cidrs: [] },
      { hops: 1, cidrs: ['loopback'] },
      {},
      { hops: 1, header: 'x-real-ip' },
    ]) {
      expect(() => compileTrustProxy(bad as TrustProxy)).toThrow(/trustProxy/);
    }
    expect(compileTrustProxy(false)).toBeUndefined();
  });
});
