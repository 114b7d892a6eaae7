// HPACK (RFC 7541) for the hand-written HTTP/2 server: a decoder for request header blocks and two encoder
// helpers for response header blocks. The decoder runs once per gRPC call, so it allocates nothing per
// field but the strings it returns: integers and strings are read in place from the block, Huffman codes go
// through a nibble-driven state machine into one shared scratch buffer, and the dynamic table is a ring of
// strings. The encoder never indexes into the dynamic table, so it never has to track the peer's table.

import { Buffer } from 'node:buffer';

/** A header block that breaks RFC 7541: the connection must end with COMPRESSION_ERROR. */
export class HpackError extends Error {
  override readonly name = 'HpackError';
}

/** The static table of RFC 7541 Appendix A: index 1..61 at [0..60]. */
export const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC_TABLE.length;
// Indexed by the HPACK index itself (slot 0 unused), so a lookup is one array read with no subtraction.
const STATIC_NAMES = ['', ...STATIC_TABLE.map((entry) => entry[0])];
const STATIC_VALUES = ['', ...STATIC_TABLE.map((entry) => entry[1])];
/** First static index of each name, for the encoder's indexed names. */
const STATIC_NAME_INDEX = new Map<string, number>();
for (let i = STATIC_COUNT; i >= 1; i--) STATIC_NAME_INDEX.set(STATIC_NAMES[i] as string, i);

/**
 * The Huffman code of RFC 7541 Appendix B, symbol 0..256 (256 is EOS): each code right-aligned, as the
 * RFC's "code as hex aligned to LSB" column, and its length in bits. The code is canonical (codes of one
 * length are consecutive in symbol order), which the tests check along with its completeness.
 */
export const HUFFMAN_CODES: readonly number[] = [
  0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6, 0xfffffe7, 0xfffffe8, 0xffffea, 0x3ffffffc,
  0xfffffe9, 0xfffffea, 0x3ffffffd, 0xfffffeb, 0xfffffec, 0xfffffed, 0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1,
  0xffffff2, 0x3ffffffe, 0xffffff3, 0xffffff4, 0xffffff5, 0xffffff6, 0xffffff7, 0xffffff8, 0xffffff9, 0xffffffa,
  0xffffffb, 0x14, 0x3f8, 0x3f9, 0xffa, 0x1ff9, 0x15, 0xf8, 0x7fa, 0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18,
  0x0, 0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20, 0xffb, 0x3fc, 0x1ffa, 0x21, 0x5d,
  0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70,
  0x71, 0x72, 0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0, 0x1ffc, 0x3ffc, 0x22, 0x7ffd, 0x3, 0x23, 0x4, 0x24, 0x5, 0x25, 0x26,
  0x27, 0x6, 0x74, 0x75, 0x28, 0x29, 0x2a, 0x7, 0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7ffe,
  0x7fc, 0x3ffd, 0x1ffd, 0xffffffc, 0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8, 0x3fffd3, 0x3fffd4, 0x3fffd5, 0x7fffd9,
  0x3fffd6, 0x7fffda, 0x7fffdb, 0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb, 0x7fffdf, 0xffffec, 0xffffed, 0x3fffd7,
  0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3, 0x7fffe4, 0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6,
  0x7fffe7, 0xffffef, 0x3fffda, 0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde, 0x7fffea, 0x3fffdd,
  0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb, 0x7fffec, 0x1fffe0, 0x1fffe1, 0x3fffe0, 0x1fffe2, 0x7fffed,
  0x3fffe1, 0x7fffee, 0x7fffef, 0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4, 0x7ffff0, 0x3fffe5, 0x3fffe6, 0x7ffff1,
  0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7, 0x7ffff2, 0x3fffe8, 0x1ffffec, 0x3ffffe2, 0x3ffffe3, 0x3ffffe4,
  0x7ffffde, 0x7ffffdf, 0x3ffffe5, 0xfffff1, 0x1ffffed, 0x7fff2, 0x1fffe3, 0x3ffffe6, 0x7ffffe0, 0x7ffffe1, 0x3ffffe7,
  0x7ffffe2, 0xfffff2, 0x1fffe4, 0x1fffe5, 0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4, 0x7ffffe5, 0xfffec,
  0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3, 0x3fffea, 0x3fffeb, 0x1ffffee, 0x1ffffef,
  0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4, 0x3ffffeb, 0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9,
  0x7ffffea, 0x7ffffeb, 0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef, 0x7fffff0, 0x3ffffee, 0x3fffffff,
];
/** Length in bits of each code of {@link HUFFMAN_CODES}. */
export const HUFFMAN_LENGTHS: readonly number[] = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
  28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6,
  5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23,
  22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22,
  23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26,
  20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27,
  27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27,
  27, 27, 27, 26, 30,
];
const EOS = 256;

// The Huffman decoder is a state machine fed 4 bits at a time, as nghttp2's. A state is an internal node
// of the code tree (256 of them for 257 leaves; node 0 is the root), i.e. the bits read since the last
// symbol. Each transition packs the next state (bits 0-7), the symbol it completes (bits 8-15) and two
// flags. No code is shorter than 5 bits, so one nibble completes at most one symbol.
const HUFFMAN_EMIT = 1 << 16;
const HUFFMAN_FAIL = 1 << 17;
const HUFFMAN_TRANSITIONS = new Uint32Array(256 * 16);
/**
 * 1 for the states a string may end in (RFC 7541 §5.2): the root, or 1..7 bits that are all 1s, the only
 * padding allowed (a prefix of EOS shorter than a byte).
 */
const HUFFMAN_ACCEPTS = new Uint8Array(256);
{
  // Children of each internal node: a node id, or ~symbol for a leaf.
  const zero = new Int32Array(256);
  const one = new Int32Array(256);
  let nodes = 1;
  for (let symbol = 0; symbol <= EOS; symbol++) {
    const code = HUFFMAN_CODES[symbol] as number;
    const length = HUFFMAN_LENGTHS[symbol] as number;
    let node = 0;
    for (let bit = length - 1; bit > 0; bit--) {
      const children = (code >>> bit) & 1 ? one : zero;
      if (children[node] === 0) children[node] = nodes++;
      node = children[node] as number;
    }
    ((code & 1) === 1 ? one : zero)[node] = ~symbol;
  }
  for (let state = 0; state < 256; state++) {
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let transition = 0;
      for (let bit = 3; bit >= 0; bit--) {
        const child = ((nibble >>> bit) & 1 ? one[node] : zero[node]) as number;
        if (child >= 0) {
          node = child;
        } else if (~child === EOS) {
          transition = HUFFMAN_FAIL;
          break;
        } else {
          transition = HUFFMAN_EMIT | (~child << 8);
          node = 0;
        }
      }
      HUFFMAN_TRANSITIONS[(state << 4) | nibble] = transition | node;
    }
  }
  let node = 0;
  HUFFMAN_ACCEPTS[0] = 1;
  for (let depth = 1; depth <= 7; depth++) {
    node = one[node] as number;
    HUFFMAN_ACCEPTS[node] = 1;
  }
}

/** Where Huffman strings are decoded before becoming strings; grown on demand, shared by all decoders. */
let scratch = Buffer.allocUnsafe(1024);

/** `latin1Slice` is Buffer's own (undocumented, long-standing) latin1 decoder, minus toString's dispatch. */
type Latin1Buffer = Buffer & { latin1Slice(start: number, end: number): string };

function huffmanDecode(buf: Uint8Array, start: number, end: number, materialize: boolean): string {
  // Each symbol takes at least 5 bits.
  const most = Math.ceil(((end - start) * 8) / 5);
  if (scratch.length < most) scratch = Buffer.allocUnsafe(Math.max(most, scratch.length * 2));
  const out = scratch;
  let length = 0;
  let state = 0;
  for (let i = start; i < end; i++) {
    const byte = buf[i] as number;
    let transition = HUFFMAN_TRANSITIONS[(state << 4) | (byte >>> 4)] as number;
    if (transition & HUFFMAN_FAIL) throw new HpackError('EOS inside a Huffman-coded string');
    if (transition & HUFFMAN_EMIT) out[length++] = transition >>> 8;
    state = transition & 0xff;
    transition = HUFFMAN_TRANSITIONS[(state << 4) | (byte & 0xf)] as number;
    if (transition & HUFFMAN_FAIL) throw new HpackError('EOS inside a Huffman-coded string');
    if (transition & HUFFMAN_EMIT) out[length++] = transition >>> 8;
    state = transition & 0xff;
  }
  if (HUFFMAN_ACCEPTS[state] === 0) {
    throw new HpackError('Huffman padding longer than 7 bits or not all 1s');
  }
  return materialize ? (out as Latin1Buffer).latin1Slice(0, length) : '';
}

/** Largest integer accepted in a header block; larger ones only serve to exhaust a decoder. */
const MAX_INTEGER = 0x7fffffff;
/** Continuation bytes of an integer: 5 carry 35 bits, more than {@link MAX_INTEGER} needs. */
const MAX_CONTINUATION_BYTES = 5;
/** Per-entry overhead of RFC 7541 §4.1, also the per-field overhead of RFC 9113's header list size. */
const ENTRY_OVERHEAD = 32;
const MAX_SETTING = 0xffffffff;

/** A field name of lowercase token characters: none of 0x00-0x20, A-Z, 0x7f-0xff, nor a colon (RFC 9113 §8.2.1). */
export function validName(name: string): boolean {
  if (name.length === 0) return false;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c <= 0x20 || (c >= 0x41 && c <= 0x5a) || c >= 0x7f || c === 0x3a) return false;
  }
  return true;
}

/** A field value without NUL, CR or LF, and without whitespace at either end (RFC 9113 §8.2.1). */
export function validValue(value: string): boolean {
  const n = value.length;
  if (n === 0) return true;
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(n - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) return false;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c === 0 || c === 0x0a || c === 0x0d) return false;
  }
  return true;
}

/**
 * A field RFC 9113 §8.2.1 allows: a valid value, and a valid name or one that starts with a colon (a
 * pseudo-header, which the request's own checks compare with the four there are).
 */
function wellFormed(name: string, value: string): boolean {
  return (name.charCodeAt(0) === 0x3a || validName(name)) && validValue(value);
}

/** Decodes the header blocks of one HTTP/2 connection's direction, keeping its dynamic table (§2.3.2). */
export class HpackDecoder {
  /** SETTINGS_HEADER_TABLE_SIZE this side announced: the bound of every size update. */
  private readonly maxTableSize: number;
  /** Current maximum size of the dynamic table, as the peer's last size update set it (§4.2). */
  private capacity: number;
  /** Sum of the sizes of the entries (§4.1). */
  private size = 0;
  private count = 0;
  // Ring of entries: slot `newest` holds dynamic index 62, the slot before it 63, and so on.
  private names: string[];
  private values: string[];
  /** Per entry: its name and value are well formed (see {@link wellFormed}), worked out once, at insertion. */
  private oks: boolean[];
  private mask: number;
  private newest: number;
  /** Read position in the block being decoded. */
  private pos = 0;
  /**
   * After {@link decode}: every field of the block is well formed (see {@link wellFormed}). False tells
   * nothing: the caller checks the fields itself. Entries of the tables are checked once, not at each use.
   */
  wellFormed = false;

  /** maxTableSize: SETTINGS_HEADER_TABLE_SIZE this side announced (default 4096). */
  constructor(maxTableSize = 4096) {
    if (!Number.isInteger(maxTableSize) || maxTableSize < 0 || maxTableSize > MAX_SETTING) {
      throw new RangeError(`maxTableSize must be an integer from 0 to ${MAX_SETTING}, got ${maxTableSize}`);
    }
    this.maxTableSize = maxTableSize;
    this.capacity = maxTableSize;
    this.names = new Array<string>(32).fill('');
    this.values = new Array<string>(32).fill('');
    this.oks = new Array<boolean>(32).fill(false);
    this.mask = 31;
    this.newest = 31;
  }

  /**
   * Decodes one complete header block (all HEADERS+CONTINUATION fragments concatenated), updating the
   * dynamic table. Returns the fields as a flat array [name0, value0, name1, value1, ...] of latin1 strings,
   * or `undefined` when the decoded header list would exceed `maxListSize` (RFC 9113 size: sum of
   * name.length + value.length + 32 per field). Even then it processes the whole block, so the dynamic
   * table stays in sync with the peer's encoder; it only stops collecting fields.
   * Throws HpackError on malformed input.
   */
  decode(block: Uint8Array, maxListSize: number): string[] | undefined {
    const buf = (
      block instanceof Buffer ? block : Buffer.from(block.buffer, block.byteOffset, block.byteLength)
    ) as Latin1Buffer;
    const end = buf.length;
    let fields: string[] | undefined = [];
    let listSize = 0;
    let first = true;
    let ok = true;
    this.pos = 0;
    while (this.pos < end) {
      const byte = buf[this.pos] as number;
      let name: string;
      let value: string;
      if (byte >= 0x80) {
        // §6.1 Indexed Header Field
        const index = this.integer(buf, 0x7f);
        if (index === 0) throw new HpackError('indexed header field with index 0');
        if (index <= STATIC_COUNT) {
          name = STATIC_NAMES[index] as string;
          value = STATIC_VALUES[index] as string;
        } else {
          const slot = this.slot(index);
          name = this.names[slot] as string;
          value = this.values[slot] as string;
          ok &&= this.oks[slot] as boolean;
        }
      } else if (byte >= 0x40) {
        // §6.2.1 Literal Header Field with Incremental Indexing: the strings are made even when the list
        // is over its limit, since the table needs them.
        name = this.name(buf, 0x3f, true);
        value = this.string(buf, true);
        const good = wellFormed(name, value);
        ok &&= good;
        this.insert(name, value, good);
      } else if (byte >= 0x20) {
        // §6.3 Dynamic Table Size Update, allowed only before the first field (§4.2)
        if (!first) throw new HpackError('dynamic table size update after the first header field');
        const capacity = this.integer(buf, 0x1f);
        if (capacity > this.maxTableSize) {
          throw new HpackError(`dynamic table size update to ${capacity} above the ${this.maxTableSize} allowed`);
        }
        this.capacity = capacity;
        this.evictTo(capacity);
        continue;
      } else {
        // §6.2.2 without indexing (0000) and §6.2.3 never indexed (0001): the same for a decoder
        const materialize = fields !== undefined;
        name = this.name(buf, 0x0f, materialize);
        value = this.string(buf, materialize);
        if (materialize && ok) ok = wellFormed(name, value);
      }
      first = false;
      if (fields !== undefined) {
        listSize += name.length + value.length + ENTRY_OVERHEAD;
        if (listSize > maxListSize) fields = undefined;
        else fields.push(name, value);
      }
    }
    this.wellFormed = ok;
    return fields;
  }

  /** Reads an integer with an N-bit prefix (§5.1), `prefix` being 2^N - 1. */
  private integer(buf: Uint8Array, prefix: number): number {
    let pos = this.pos;
    if (pos >= buf.length) throw new HpackError('truncated integer');
    let value = (buf[pos++] as number) & prefix;
    if (value === prefix) {
      let multiplier = 1;
      let byte: number;
      let bytes = 0;
      do {
        if (pos >= buf.length) throw new HpackError('truncated integer');
        if (++bytes > MAX_CONTINUATION_BYTES) throw new HpackError('integer longer than 32 bits');
        byte = buf[pos++] as number;
        value += (byte & 0x7f) * multiplier;
        multiplier *= 128;
      } while (byte >= 0x80);
      if (value > MAX_INTEGER) throw new HpackError(`integer ${value} above ${MAX_INTEGER}`);
    }
    this.pos = pos;
    return value;
  }

  /** Reads a string literal (§5.2); `materialize` false checks it without making a string. */
  private string(buf: Latin1Buffer, materialize: boolean): string {
    const huffman = ((buf[this.pos] as number) & 0x80) !== 0;
    const length = this.integer(buf, 0x7f);
    const start = this.pos;
    const end = start + length;
    if (end > buf.length) throw new HpackError('string literal past the end of the header block');
    this.pos = end;
    if (huffman) return huffmanDecode(buf, start, end, materialize);
    return materialize ? buf.latin1Slice(start, end) : '';
  }

  /** Reads the name of a literal field: an index with the given prefix, or a string literal if it is 0. */
  private name(buf: Latin1Buffer, prefix: number, materialize: boolean): string {
    const index = this.integer(buf, prefix);
    if (index === 0) return this.string(buf, materialize);
    if (index <= STATIC_COUNT) return STATIC_NAMES[index] as string;
    return this.names[this.slot(index)] as string;
  }

  /** The ring slot of a dynamic table index (62 is the newest entry). */
  private slot(index: number): number {
    const age = index - STATIC_COUNT - 1;
    if (age >= this.count) {
      throw new HpackError(`index ${index} beyond the ${STATIC_COUNT + this.count} of the tables`);
    }
    return (this.newest - age) & this.mask;
  }

  /** Adds an entry, evicting the oldest ones to make room (§4.4). */
  private insert(name: string, value: string, ok: boolean): void {
    const entrySize = name.length + value.length + ENTRY_OVERHEAD;
    if (entrySize > this.capacity) {
      this.evictTo(0);
      return;
    }
    this.evictTo(this.capacity - entrySize);
    if (this.count === this.names.length) this.grow();
    const slot = (this.newest + 1) & this.mask;
    this.names[slot] = name;
    this.values[slot] = value;
    this.oks[slot] = ok;
    this.newest = slot;
    this.count++;
    this.size += entrySize;
  }

  /** Evicts the oldest entries until the table's size is at most `size` (§4.3). */
  private evictTo(size: number): void {
    while (this.size > size) {
      const slot = (this.newest - this.count + 1) & this.mask;
      const name = this.names[slot] as string;
      const value = this.values[slot] as string;
      this.size -= name.length + value.length + ENTRY_OVERHEAD;
      // Cleared so that evicted strings do not outlive their entry.
      this.names[slot] = '';
      this.values[slot] = '';
      this.count--;
    }
  }

  /** Doubles the ring, moving the entries to slots 0..count-1, oldest first. */
  private grow(): void {
    const length = this.names.length * 2;
    const names = new Array<string>(length).fill('');
    const values = new Array<string>(length).fill('');
    const oks = new Array<boolean>(length).fill(false);
    for (let age = this.count - 1, i = 0; age >= 0; age--, i++) {
      const slot = (this.newest - age) & this.mask;
      names[i] = this.names[slot] as string;
      values[i] = this.values[slot] as string;
      oks[i] = this.oks[slot] as boolean;
    }
    this.names = names;
    this.values = values;
    this.oks = oks;
    this.mask = length - 1;
    this.newest = this.count - 1;
  }
}

function integerLength(value: number, prefix: number): number {
  if (value < prefix) return 1;
  let length = 2;
  for (let rest = value - prefix; rest >= 0x80; rest = Math.floor(rest / 128)) length++;
  return length;
}

/** Writes an integer with an N-bit prefix (§5.1, `prefix` = 2^N - 1) after the pattern bits `first`. */
function writeInteger(out: Buffer, offset: number, first: number, value: number, prefix: number): number {
  if (value < prefix) {
    out[offset++] = first | value;
    return offset;
  }
  out[offset++] = first | prefix;
  let rest = value - prefix;
  while (rest >= 0x80) {
    out[offset++] = (rest % 128) | 0x80;
    rest = Math.floor(rest / 128);
  }
  out[offset++] = rest;
  return offset;
}

function checkLatin1(what: string, text: string): void {
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) > 0xff) {
      throw new RangeError(`${what} ${JSON.stringify(text)} has a character above U+00FF at ${i}`);
    }
  }
}

/**
 * Encodes a header field as a literal header field without indexing (§6.2.2), with the name's static index
 * when it has one, with no Huffman coding and no dynamic table. Name and value are latin1: one char a byte.
 */
export function encodeLiteral(name: string, value: string): Buffer {
  checkLatin1('header name', name);
  checkLatin1('header value', value);
  const index = STATIC_NAME_INDEX.get(name);
  const nameLength = index === undefined ? integerLength(name.length, 0x7f) + name.length : 0;
  const length = integerLength(index ?? 0, 0x0f) + nameLength + integerLength(value.length, 0x7f) + value.length;
  const out = Buffer.allocUnsafe(length);
  let offset = writeInteger(out, 0, 0x00, index ?? 0, 0x0f);
  if (index === undefined) {
    offset = writeInteger(out, offset, 0x00, name.length, 0x7f);
    offset += out.write(name, offset, 'latin1');
  }
  offset = writeInteger(out, offset, 0x00, value.length, 0x7f);
  out.write(value, offset, 'latin1');
  return out;
}

/** Encodes an indexed header field (§6.1) of the static table, e.g. `encodeIndexed(8)` for `:status: 200`. */
export function encodeIndexed(index: number): Buffer {
  if (!Number.isInteger(index) || index < 1 || index > STATIC_COUNT) {
    throw new RangeError(`index must be a static table index from 1 to ${STATIC_COUNT}, got ${index}`);
  }
  const out = Buffer.allocUnsafe(1);
  out[0] = 0x80 | index;
  return out;
}
