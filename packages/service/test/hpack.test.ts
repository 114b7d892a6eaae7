import { Buffer } from 'node:buffer';
import { connect } from 'node:http2';
import { createServer, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  encodeIndexed,
  encodeLiteral,
  HpackDecoder,
  HpackError,
  HUFFMAN_CODES,
  HUFFMAN_LENGTHS,
  STATIC_TABLE,
} from '../src/grpc/hpack.js';

type Field = [string, string];

const hex = (text: string) => Buffer.from(text.replace(/\s+/g, ''), 'hex');

function pairs(flat: string[] | undefined): Field[] {
  if (flat === undefined) throw new Error('expected a header list, got undefined');
  const out: Field[] = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i] as string, flat[i + 1] as string]);
  return out;
}

/** An integer with an N-bit prefix after the pattern bits `first` (RFC 7541 §5.1), as bytes. */
function int(value: number, prefixBits: number, first = 0): number[] {
  const prefix = 2 ** prefixBits - 1;
  if (value < prefix) return [first | value];
  const out = [first | prefix];
  let rest = value - prefix;
  for (; rest >= 128; rest = Math.floor(rest / 128)) out.push((rest % 128) | 128);
  out.push(rest);
  return out;
}

/** Huffman-codes latin1 text with the table under test, padded with 1s; `extra` codes go after the text. */
function huffman(text: string, extra: number[] = []): number[] {
  let bits = '';
  const symbols = [...Buffer.from(text, 'latin1'), ...extra];
  for (const symbol of symbols) {
    bits += (HUFFMAN_CODES[symbol] as number).toString(2).padStart(HUFFMAN_LENGTHS[symbol] as number, '0');
  }
  bits += '1'.repeat((8 - (bits.length % 8)) % 8);
  return Array.from({ length: bits.length / 8 }, (_, i) => Number.parseInt(bits.slice(i * 8, i * 8 + 8), 2));
}

/** A string literal (§5.2), raw or Huffman-coded. */
function str(text: string, useHuffman = false): number[] {
  if (!useHuffman) return [...int(text.length, 7), ...Buffer.from(text, 'latin1')];
  const coded = huffman(text);
  return [...int(coded.length, 7, 0x80), ...coded];
}

/** The dynamic table, newest first, read through indexed references (which leave it unchanged). */
function dynamicTable(decoder: HpackDecoder): Field[] {
  const entries: Field[] = [];
  for (let index = 62; ; index++) {
    try {
      entries.push(...pairs(decoder.decode(Buffer.from(int(index, 7, 0x80)), Infinity)));
    } catch (error) {
      if (error instanceof HpackError) return entries;
      throw error;
    }
  }
}
const tableSize = (entries: Field[]) => entries.reduce((sum, [n, v]) => sum + n.length + v.length + 32, 0);

/** Counts the Huffman strings, dynamic table references and size updates of a block (a scan, no checks). */
function representations(block: Buffer) {
  const counts = { huffman: 0, dynamic: 0, updates: 0 };
  let pos = 0;
  const integer = (prefixBits: number) => {
    const prefix = 2 ** prefixBits - 1;
    let value = (block[pos++] as number) & prefix;
    for (let m = 1, byte = value === prefix ? 0x80 : 0; byte & 0x80; m *= 128) {
      byte = block[pos++] as number;
      value += (byte & 0x7f) * m;
    }
    return value;
  };
  const string = () => {
    if ((block[pos] as number) & 0x80) counts.huffman++;
    pos += integer(7);
  };
  const literal = (prefixBits: number) => {
    const index = integer(prefixBits);
    if (index === 0) string();
    else if (index > 61) counts.dynamic++;
    string();
  };
  while (pos < block.length) {
    const byte = block[pos] as number;
    if (byte & 0x80) counts.dynamic += integer(7) > 61 ? 1 : 0;
    else if (byte & 0x40) literal(6);
    else if (byte & 0x20) counts.updates += integer(5) >= 0 ? 1 : 0;
    else literal(4);
  }
  return counts;
}

/** A seeded PRNG (mulberry32), so a failing random case can be replayed. */
function random(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const below = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]) => items[below(items.length)] as T;
  /**
   * Latin1 text: lowercase letters (which nghttp2 Huffman-codes), sometimes sprinkled with other bytes from
   * 0x21 to 0xff (still shorter Huffman-coded), sometimes made of them only (then sent raw).
   */
  const text = (maxLength: number) => {
    const mode = next();
    const other = mode < 0.5 ? 0 : mode < 0.85 ? 0.15 : 1;
    let out = '';
    for (let i = below(maxLength + 1); i > 0; i--) {
      const code = next() < other ? 0x21 + below(0xff - 0x20) : 0x61 + below(26);
      out += code === 0x7f ? '~' : String.fromCharCode(code);
    }
    return out;
  };
  return { next, below, pick, text };
}

describe('HPACK Huffman code (RFC 7541 Appendix B)', () => {
  it('is a complete prefix code of 257 symbols: the Kraft sum is exactly 1', () => {
    expect(HUFFMAN_CODES).toHaveLength(257);
    expect(HUFFMAN_LENGTHS).toHaveLength(257);
    // Scaled by 2^30, the longest length, the sum is exact in integers.
    expect(HUFFMAN_LENGTHS.reduce((sum, length) => sum + 2 ** (30 - length), 0)).toBe(2 ** 30);
  });

  it('is the canonical code of its lengths, so codes and lengths agree symbol by symbol', () => {
    const order = [...HUFFMAN_LENGTHS.keys()].sort(
      (a, b) => (HUFFMAN_LENGTHS[a] as number) - (HUFFMAN_LENGTHS[b] as number) || a - b,
    );
    const canonical: number[] = [];
    let code = 0;
    let length = HUFFMAN_LENGTHS[order[0] as number] as number;
    for (const symbol of order) {
      const next = HUFFMAN_LENGTHS[symbol] as number;
      code *= 2 ** (next - length);
      length = next;
      canonical[symbol] = code++;
    }
    expect(canonical).toEqual(HUFFMAN_CODES);
    expect(code).toBe(2 ** 30);
  });

  it('has EOS as 30 1s and the RFC examples and 5-bit symbols', () => {
    expect([HUFFMAN_CODES[256], HUFFMAN_LENGTHS[256]]).toEqual([0x3fffffff, 30]);
    expect([HUFFMAN_CODES[47], HUFFMAN_LENGTHS[47]]).toEqual([0x18, 6]); // '/', the RFC's own example
    const fiveBits = [...HUFFMAN_LENGTHS.keys()].filter((symbol) => HUFFMAN_LENGTHS[symbol] === 5);
    expect(String.fromCharCode(...fiveBits)).toBe('012aceiost');
    expect(Math.min(...HUFFMAN_LENGTHS)).toBe(5);
  });
});

describe('HpackDecoder: RFC 7541 Appendix C', () => {
  it('C.2.1 literal header field with indexing', () => {
    const decoder = new HpackDecoder();
    const block = hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572');
    expect(pairs(decoder.decode(block, Infinity))).toEqual([['custom-key', 'custom-header']]);
    expect(dynamicTable(decoder)).toEqual([['custom-key', 'custom-header']]);
    expect(tableSize(dynamicTable(decoder))).toBe(55);
  });

  it('C.2.2 literal header field without indexing', () => {
    const decoder = new HpackDecoder();
    expect(pairs(decoder.decode(hex('040c 2f73 616d 706c 652f 7061 7468'), Infinity))).toEqual([
      [':path', '/sample/path'],
    ]);
    expect(dynamicTable(decoder)).toEqual([]);
  });

  it('C.2.3 literal header field never indexed', () => {
    const decoder = new HpackDecoder();
    const block = hex('1008 7061 7373 776f 7264 0673 6563 7265 74');
    expect(pairs(decoder.decode(block, Infinity))).toEqual([['password', 'secret']]);
    expect(dynamicTable(decoder)).toEqual([]);
  });

  it('C.2.4 indexed header field', () => {
    const decoder = new HpackDecoder();
    expect(pairs(decoder.decode(hex('82'), Infinity))).toEqual([[':method', 'GET']]);
    expect(dynamicTable(decoder)).toEqual([]);
  });

  const requests: Field[][] = [
    [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
    ],
    [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ],
    [
      [':method', 'GET'],
      [':scheme', 'https'],
      [':path', '/index.html'],
      [':authority', 'www.example.com'],
      ['custom-key', 'custom-value'],
    ],
  ];
  const requestTables: Field[][] = [
    [[':authority', 'www.example.com']],
    [
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ],
    [
      ['custom-key', 'custom-value'],
      ['cache-control', 'no-cache'],
      [':authority', 'www.example.com'],
    ],
  ];
  const requestSizes = [57, 110, 164];

  it.each([
    [
      'C.3 requests without Huffman coding',
      [
        '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '8286 84be 5808 6e6f 2d63 6163 6865',
        '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
      ],
    ],
    [
      'C.4 requests with Huffman coding',
      [
        '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
        '8286 84be 5886 a8eb 1064 9cbf',
        '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
      ],
    ],
  ])('%s: three requests on one connection, the dynamic table after each', (_, blocks) => {
    const decoder = new HpackDecoder();
    blocks.forEach((block, i) => {
      expect(pairs(decoder.decode(hex(block), Infinity))).toEqual(requests[i]);
      expect(dynamicTable(decoder)).toEqual(requestTables[i]);
      expect(tableSize(dynamicTable(decoder))).toBe(requestSizes[i]);
    });
  });

  const date1 = ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'] as Field;
  const date2 = ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'] as Field;
  const location = ['location', 'https://www.example.com'] as Field;
  const cookie = ['set-cookie', 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1'] as Field;
  const responses: Field[][] = [
    [[':status', '302'], ['cache-control', 'private'], date1, location],
    [[':status', '307'], ['cache-control', 'private'], date1, location],
    [[':status', '200'], ['cache-control', 'private'], date2, location, ['content-encoding', 'gzip'], cookie],
  ];
  const responseTables: Field[][] = [
    [location, date1, ['cache-control', 'private'], [':status', '302']],
    [[':status', '307'], location, date1, ['cache-control', 'private']],
    [cookie, ['content-encoding', 'gzip'], date2],
  ];
  const responseSizes = [222, 222, 215];

  it.each([
    [
      'C.5 responses without Huffman coding',
      [
        `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d`,
        '4803 3330 37c1 c0bf',
        `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31`,
      ],
    ],
    [
      'C.6 responses with Huffman coding',
      [
        `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
        '4883 640e ffc1 c0bf',
        `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
      ],
    ],
  ])('%s: table size 256, so entries are evicted', (_, blocks) => {
    const decoder = new HpackDecoder(256);
    blocks.forEach((block, i) => {
      expect(pairs(decoder.decode(hex(block), Infinity))).toEqual(responses[i]);
      expect(dynamicTable(decoder)).toEqual(responseTables[i]);
      expect(tableSize(dynamicTable(decoder))).toBe(responseSizes[i]);
    });
  });
});

/** The bytes of a connection's client side, and its SETTINGS frame (RFC 9113 §6.5) to the client. */
async function captureHttp2Client(
  serverSettings: [id: number, value: number][],
  send: (request: (headers: Record<string, string | string[]>) => void) => number,
): Promise<Buffer[]> {
  const settings = Buffer.alloc(9 + 6 * serverSettings.length);
  settings.writeUIntBE(6 * serverSettings.length, 0, 3);
  settings[3] = 0x4;
  serverSettings.forEach(([id, value], i) => {
    settings.writeUInt16BE(id, 9 + 6 * i);
    settings.writeUInt32BE(value, 11 + 6 * i);
  });
  const blocks: Buffer[] = [];
  let expected = Infinity;
  let done = (): void => {};
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.write(settings);
    let pending = Buffer.alloc(0);
    let preface = false;
    let fragments: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      if (!preface) {
        if (pending.length < 24) return;
        expect(pending.subarray(0, 24).toString('latin1')).toBe('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
        pending = pending.subarray(24);
        preface = true;
      }
      while (pending.length >= 9) {
        const length = pending.readUIntBE(0, 3);
        if (pending.length < 9 + length) break;
        const [type, flags] = [pending[3] as number, pending[4] as number];
        let payload = pending.subarray(9, 9 + length);
        pending = pending.subarray(9 + length);
        if (type === 0x4 && (flags & 0x1) === 0) socket.write(Buffer.from([0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]));
        if (type !== 0x1 && type !== 0x9) continue;
        if (type === 0x1) {
          // HEADERS: PADDED (0x8) puts a pad length first and padding last, PRIORITY (0x20) 5 bytes first.
          const padding = flags & 0x8 ? (payload[0] as number) : 0;
          payload = payload.subarray((flags & 0x8 ? 1 : 0) + (flags & 0x20 ? 5 : 0), payload.length - padding);
        }
        fragments.push(payload);
        if (flags & 0x4) {
          blocks.push(Buffer.concat(fragments));
          fragments = [];
          if (blocks.length === expected) done();
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const session = connect(`http://127.0.0.1:${port}`);
  try {
    await new Promise<void>((resolve, reject) => {
      session.once('remoteSettings', () => resolve());
      session.once('error', reject);
    });
    expected = send((headers) => {
      session.request(headers, { endStream: true }).on('error', () => {});
    });
    if (blocks.length >= expected) done();
    await finished;
  } finally {
    session.destroy();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
  return blocks;
}

describe('HpackDecoder: interoperability with nghttp2 (node:http2 client)', () => {
  // nghttp2 Huffman-codes when that is shorter, indexes into the dynamic table, never indexes
  // authorization and short cookies, and splits blocks over 16 KB into CONTINUATION frames.
  it.each([4096, 256])('decodes random requests as sent, with a header table of %i', async (tableSize) => {
    const rnd = random(tableSize);
    const names = ['x-request-id', 'user-agent', 'accept', 'content-type', 'authorization', 'cookie', 'x-b3-spanid'];
    const sent: Field[][] = [];
    const blocks = await captureHttp2Client(
      [
        [0x1, tableSize], // SETTINGS_HEADER_TABLE_SIZE
        [0x3, 10_000], // SETTINGS_MAX_CONCURRENT_STREAMS
      ],
      (request) => {
        const repeated = Array.from({ length: 8 }, () => rnd.text(40));
        for (let i = 0; i < 400; i++) {
          const pseudo: Field[] = [
            [':method', rnd.pick(['GET', 'POST', 'PUT'])],
            [':path', `/${rnd.pick(['svc/Method', rnd.text(30)])}`],
            [':scheme', 'http'],
            [':authority', rnd.pick(['127.0.0.1', 'example.com', `h${rnd.below(5)}.local`])],
          ];
          const regular: [string, string[]][] = [];
          for (let n = rnd.below(8); n > 0; n--) {
            const name = rnd.next() < 0.7 ? rnd.pick(names) : `x-${rnd.text(12).replace(/[^a-z]/g, '')}z`;
            if (regular.some(([other]) => other === name)) continue;
            // Node sends an array as repeated fields, but refuses one for most standard names.
            const count = name.startsWith('x-') && rnd.next() < 0.2 ? 2 + rnd.below(2) : 1;
            const values = Array.from({ length: count }, () => {
              const kind = rnd.next();
              if (kind < 0.5) return rnd.pick(repeated);
              if (kind < 0.97) return rnd.text(60);
              return 'v'.repeat(rnd.next() < 0.3 ? 20_000 : 3000 + rnd.below(2000));
            });
            regular.push([name, values]);
          }
          const headers: Record<string, string | string[]> = Object.fromEntries([...pseudo, ...regular]);
          request(headers);
          sent.push([...pseudo, ...regular.flatMap(([name, values]) => values.map((v): Field => [name, v]))]);
        }
        return sent.length;
      },
    );
    expect(blocks).toHaveLength(sent.length);
    expect(blocks.some((block) => block.length > 16_384)).toBe(true);
    const decoder = new HpackDecoder(tableSize);
    // Node puts pseudo-header fields first but in an order of its own: compare them as a set.
    const normalize = (fields: Field[]) => [
      ...fields.filter(([name]) => name.startsWith(':')).sort(([a], [b]) => a.localeCompare(b)),
      ...fields.filter(([name]) => !name.startsWith(':')),
    ];
    blocks.forEach((block, i) => {
      const fields = pairs(decoder.decode(block, Infinity));
      expect(fields.slice(0, 4).every(([name]) => name.startsWith(':'))).toBe(true);
      expect(normalize(fields)).toEqual(normalize(sent[i] as Field[]));
    });
    // What the test exists for: nghttp2 used Huffman strings, the dynamic table and size updates.
    const used = blocks.map(representations).reduce((a, b) => ({
      huffman: a.huffman + b.huffman,
      dynamic: a.dynamic + b.dynamic,
      updates: a.updates + b.updates,
    }));
    expect(used.huffman).toBeGreaterThan(500);
    expect(used.dynamic).toBeGreaterThan(500);
    if (tableSize !== 4096) expect(used.updates).toBeGreaterThan(0);
  });
});

describe('HpackDecoder: malformed blocks', () => {
  const cases: [string, number[]][] = [
    ['index 0', [0x80]],
    ['an index beyond the static table with an empty dynamic table', [0xbe]],
    ['a literal whose name index is beyond the tables', [0x7e, 0x00]],
    ['an integer above 2^31 - 1', int(2 ** 31, 7, 0x80)],
    ['an integer with too many continuation bytes', [0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]],
    ['a truncated integer', [0xff, 0x80]],
    ['a truncated prefix-only integer', [0x40]],
    ['a string longer than the block', [0x40, 0x05, 0x61, 0x62]],
    ['a value longer than the block', [0x40, ...str('name'), 0x03, 0x61]],
    ['a missing value', [0x00, ...str('name')]],
    ['EOS inside a Huffman string', [0x00, 0x80 | huffman('a', [256]).length, ...huffman('a', [256]), 0x00]],
    ['EOS then a symbol in a Huffman string', [0x00, 0x85, ...huffman('', [256, 0x30]), 0x00]],
    ['Huffman padding longer than 7 bits', [0x00, 0x82, ...huffman('a'), 0xff, 0x00]],
    ['Huffman padding of 8 bits', [0x00, 0x86, ...huffman('00000000'), 0xff, 0x00]],
    ['Huffman padding of 0s', [0x00, 0x81, 0b00011000, 0x00]],
    ['a size update above SETTINGS_HEADER_TABLE_SIZE', int(4097, 5, 0x20)],
    ['a size update after a field', [0x82, 0x20]],
  ];
  it.each(cases)('throws HpackError on %s', (_, bytes) => {
    expect(() => new HpackDecoder().decode(Buffer.from(bytes), Infinity)).toThrow(HpackError);
  });

  it('accepts what those cases border on', () => {
    const decoder = new HpackDecoder();
    expect(pairs(decoder.decode(Buffer.from([0x00, ...str('a', true), 0x80]), Infinity))).toEqual([['a', '']]);
    expect(pairs(decoder.decode(Buffer.from([0x00, ...str('a'), ...int(0, 7)]), Infinity))).toEqual([['a', '']]);
    // Size updates before the first field, several of them, up to the announced size.
    const updates = [...int(0, 5, 0x20), ...int(4096, 5, 0x20), 0x82];
    expect(pairs(decoder.decode(Buffer.from(updates), Infinity))).toEqual([[':method', 'GET']]);
    // The largest integer accepted, as a size update to a decoder that announced more.
    expect(pairs(new HpackDecoder(2 ** 32 - 1).decode(Buffer.from(int(2 ** 31 - 1, 5, 0x20)), 0))).toEqual([]);
    expect(() => new HpackDecoder(2 ** 32 - 1).decode(Buffer.from(int(2 ** 31, 5, 0x20)), 0)).toThrow(HpackError);
  });

  it('treats a truncated value of 2^31 - 1 bytes as truncation, not as a length to allocate', () => {
    expect(() => new HpackDecoder().decode(Buffer.from([0x00, ...str('n'), ...int(2 ** 31 - 1, 7)]), 1e9)).toThrow(
      HpackError,
    );
  });

  it('rejects invalid constructor arguments with a RangeError naming the option', () => {
    expect(() => new HpackDecoder(-1)).toThrow(/maxTableSize/);
    expect(() => new HpackDecoder(1.5)).toThrow(RangeError);
  });
});

describe('HpackDecoder: header list size limit', () => {
  it('returns the list up to exactly maxListSize, undefined above', () => {
    const block = Buffer.from([0x00, ...str('a'), ...str('bc')]);
    expect(pairs(new HpackDecoder().decode(block, 35))).toEqual([['a', 'bc']]);
    expect(new HpackDecoder().decode(block, 34)).toBeUndefined();
  });

  it('keeps the dynamic table in sync after a list over the limit', () => {
    const decoder = new HpackDecoder();
    const big = 'b'.repeat(200);
    const block = [
      0x40,
      ...str('a'),
      ...str('1'),
      0x40,
      ...str('b'),
      ...str(big, true),
      0x40,
      ...str('c'),
      ...str('3'),
    ];
    expect(decoder.decode(Buffer.from(block), 100)).toBeUndefined();
    expect(pairs(decoder.decode(Buffer.from([0xbe, 0xbf, 0xc0]), 1000))).toEqual([
      ['c', '3'],
      ['b', big],
      ['a', '1'],
    ]);
  });

  it('still rejects a malformed block once over the limit', () => {
    const block = [0x40, ...str('a'), ...str('x'.repeat(100)), 0x00, ...str('b'), 0x81, 0x00];
    expect(() => new HpackDecoder().decode(Buffer.from(block), 10)).toThrow(HpackError);
  });

  it('answers 10,000 one-byte references to a 4,000-byte entry without copies', () => {
    // Work, not time, is asserted: no copy of the value per reference (time belongs to benchmarks).
    const decoder = new HpackDecoder();
    decoder.decode(Buffer.from([0x40, ...str('x'), ...str('y'.repeat(4000))]), Infinity);
    const block = Buffer.alloc(10_000, 0xbe);
    const heapBefore = process.memoryUsage().heapUsed;
    expect(decoder.decode(block, 65_536)).toBeUndefined();
    // 10,000 copies of the value would be 40 MB.
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(4_000_000);
    expect(pairs(decoder.decode(Buffer.from([0xbe]), 65_536))).toEqual([['x', 'y'.repeat(4000)]]);
  });
});

describe('encodeLiteral and encodeIndexed', () => {
  it('encode a literal without indexing, with the static name index when there is one', () => {
    expect(encodeLiteral('content-type', 'application/grpc')).toEqual(
      Buffer.from([0x0f, 31 - 15, ...str('application/grpc')]),
    );
    expect(encodeLiteral('grpc-status', '0')).toEqual(Buffer.from([0x00, ...str('grpc-status'), ...str('0')]));
    expect(encodeIndexed(8)).toEqual(Buffer.from([0x88]));
  });

  it('round-trip through HpackDecoder, leaving its dynamic table empty', () => {
    const fields: Field[] = [
      [':status', '200'],
      ['content-type', 'application/grpc'],
      ['grpc-status', '14'],
      ['grpc-message', `${'long '.repeat(100)}\u00e9\u00ff`],
      ['x-long-name-'.repeat(20), ''],
      [':authority', ''],
    ];
    const block = Buffer.concat([encodeIndexed(8), ...fields.slice(1).map(([n, v]) => encodeLiteral(n, v))]);
    const decoder = new HpackDecoder();
    expect(pairs(decoder.decode(block, Infinity))).toEqual(fields);
    expect(dynamicTable(decoder)).toEqual([]);
    STATIC_TABLE.forEach(([name, value], i) => {
      expect(pairs(decoder.decode(encodeIndexed(i + 1), Infinity))).toEqual([[name, value]]);
      expect(pairs(decoder.decode(encodeLiteral(name, 'v'), Infinity))).toEqual([[name, 'v']]);
    });
  });

  it('reject what HPACK cannot carry', () => {
    expect(() => encodeIndexed(0)).toThrow(RangeError);
    expect(() => encodeIndexed(62)).toThrow(RangeError);
    expect(() => encodeLiteral('x', '\u0100')).toThrow(/U\+00FF/);
  });
});

describe('HpackDecoder: against a reference encoder', () => {
  it('decodes random blocks of every representation, with size updates and evictions', () => {
    const rnd = random(7541);
    const maxTableSize = 512;
    const decoder = new HpackDecoder(maxTableSize);
    // The reference encoder's dynamic table, newest first.
    let table: Field[] = [];
    let capacity = maxTableSize;
    const evict = () => {
      while (tableSize(table) > capacity) table.pop();
    };
    const all = () => [...STATIC_TABLE, ...table];
    for (let b = 0; b < 500; b++) {
      const bytes: number[] = [];
      if (rnd.next() < 0.2) {
        for (let n = 1 + rnd.below(2); n > 0; n--) {
          capacity = rnd.below(maxTableSize + 1);
          bytes.push(...int(capacity, 5, 0x20));
        }
        evict();
      }
      const fields: Field[] = [];
      for (let f = rnd.below(12); f > 0; f--) {
        const known = all();
        const field: Field =
          rnd.next() < 0.5 && known.length > 0
            ? [rnd.pick(known)[0], rnd.next() < 0.5 ? rnd.pick(known)[1] : rnd.text(rnd.pick([5, 30, 300]))]
            : [rnd.text(10), rnd.text(rnd.pick([5, 30, 300]))];
        fields.push(field);
        const exact = known.findIndex(([n, v]) => n === field[0] && v === field[1]);
        const named = known.findIndex(([n]) => n === field[0]);
        const kind = rnd.below(4);
        if (kind === 0 && exact >= 0) {
          bytes.push(...int(exact + 1, 7, 0x80));
          continue;
        }
        const [prefixBits, first] = (
          [
            [6, 0x40],
            [4, 0x00],
            [4, 0x10],
          ] as const
        )[kind % 3] as readonly [number, number];
        if (named >= 0 && rnd.next() < 0.7) bytes.push(...int(named + 1, prefixBits, first));
        else bytes.push(first, ...str(field[0], rnd.next() < 0.5));
        bytes.push(...str(field[1], rnd.next() < 0.5));
        if (first === 0x40) {
          table = [field, ...table];
          evict();
        }
      }
      expect(pairs(decoder.decode(Buffer.from(bytes), Infinity))).toEqual(fields);
    }
    expect(dynamicTable(decoder)).toEqual(table);
  });
});

describe('HpackDecoder: wellFormed', () => {
  /** A literal field with incremental indexing and a new name (RFC 7541 §6.2.1), raw strings. */
  const indexed = (name: string, value: string) =>
    Buffer.from([0x40, name.length, ...Buffer.from(name, 'latin1'), value.length, ...Buffer.from(value, 'latin1')]);
  /** The same, without indexing (§6.2.2). */
  const plain = (name: string, value: string) =>
    Buffer.from([0x00, name.length, ...Buffer.from(name, 'latin1'), value.length, ...Buffer.from(value, 'latin1')]);

  it('is true for well-formed fields, from the static table, literals and entries reused by index', () => {
    const decoder = new HpackDecoder();
    decoder.decode(Buffer.concat([encodeIndexed(3), indexed('x-a', 'b c')]), 1 << 20);
    expect(decoder.wellFormed).toBe(true);
    // The entry just added is index 62.
    decoder.decode(Buffer.concat([Buffer.from([0x80 | 62]), plain('x-d', 'e')]), 1 << 20);
    expect(decoder.wellFormed).toBe(true);
  });

  it.each([
    ['a CR in a value', 'x-a', 'b\rc'],
    ['an LF in a value', 'x-a', 'b\nc'],
    ['a NUL in a value', 'x-a', 'b\0c'],
    ['a space ending a value', 'x-a', 'b '],
    ['a tab opening a value', 'x-a', '\tb'],
    ['an uppercase name', 'X-a', 'b'],
    ['a colon inside a name', 'x:a', 'b'],
    ['an empty name', '', 'b'],
  ])('is false for %s, and stays false each time its entry is reused by index', (_what, name, value) => {
    const decoder = new HpackDecoder();
    decoder.decode(indexed(name, value), 1 << 20);
    expect(decoder.wellFormed).toBe(false);
    decoder.decode(encodeIndexed(3), 1 << 20);
    expect(decoder.wellFormed).toBe(true);
    decoder.decode(Buffer.concat([encodeIndexed(3), Buffer.from([0x80 | 62])]), 1 << 20);
    expect(decoder.wellFormed).toBe(false);
    decoder.decode(plain(name, value), 1 << 20);
    expect(decoder.wellFormed).toBe(false);
  });
});
