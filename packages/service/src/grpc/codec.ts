// Protocol Buffers encoding of the few messages the gRPC API speaks, written by hand: decoding straight
// into the engine's request and encoding straight from its outcomes costs a fraction of a generic codec
// (no intermediate objects, no reflection). Field numbers are those of the .proto files in ../../proto;
// a test checks both directions against a generic codec loaded from those files.

/** A message that is not valid Protocol Buffers, or not the expected shape. */
export class DecodeError extends Error {
  override readonly name = 'DecodeError';
}

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_SGROUP = 3;
const WIRE_EGROUP = 4;
const WIRE_I32 = 5;

/** Largest field number Protocol Buffers allows (2^29 - 1). */
const MAX_FIELD = 536_870_911;
/** Deepest nesting of groups skipped, as protobuf's own default recursion limit. */
const MAX_GROUP_DEPTH = 100;

/**
 * Reads a buffer field by field. `end` is the end of the message being read: {@link enter} narrows it to
 * a submessage, so no read of a nested field can run past the submessage into its parent.
 */
class Reader {
  pos: number;
  end: number;
  /** Field number of the last {@link tag}. */
  field = 0;
  /** Wire type of the last {@link tag}. */
  wire = 0;

  constructor(
    readonly buf: Buffer,
    start: number,
    end: number,
  ) {
    this.pos = start;
    this.end = end;
  }

  /** A varint as a number (exact up to 2^53; larger values lose precision, as any JS number would). */
  varint(): number {
    const buf = this.buf;
    let result = 0;
    let multiplier = 1;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new DecodeError('truncated varint');
      const byte = buf[this.pos++] as number;
      result += (byte & 0x7f) * multiplier;
      if (byte < 0x80) return result;
      multiplier *= 128;
    }
    throw new DecodeError('varint longer than 10 bytes');
  }

  /** Reads a tag into {@link field} and {@link wire}; returns the tag. Field number 0 is invalid. */
  tag(): number {
    const tag = this.varint();
    const field = Math.floor(tag / 8);
    if (field === 0) throw new DecodeError('field number 0');
    if (field > MAX_FIELD) throw new DecodeError(`field number ${field} out of range`);
    this.field = field;
    this.wire = tag & 7;
    return tag;
  }

  /** The bounds of a length-delimited field. */
  length(): number {
    const length = this.varint();
    const end = this.pos + length;
    if (end > this.end) throw new DecodeError('length-delimited field past the end of its message');
    return end;
  }

  /** Reads a length-delimited field as a submessage: returns the end to restore with {@link leave}. */
  enter(): number {
    const outer = this.end;
    this.end = this.length();
    return outer;
  }

  /** Back to the enclosing message, once the submessage is read to its exact end. */
  leave(outer: number): void {
    if (this.pos !== this.end) throw new DecodeError('field past the end of its submessage');
    this.end = outer;
  }

  string(): string {
    const end = this.length();
    const s = this.buf.toString('utf8', this.pos, end);
    this.pos = end;
    return s;
  }

  /** Skips the value of the field whose tag was just read (an unknown field). */
  skip(depth = 0): void {
    switch (this.wire) {
      case WIRE_VARINT:
        this.varint();
        return;
      case WIRE_I64:
        this.pos += 8;
        break;
      case WIRE_LEN:
        this.pos = this.length();
        return;
      case WIRE_SGROUP:
        this.skipGroup(this.field, depth + 1);
        return;
      case WIRE_EGROUP:
        throw new DecodeError(`end-group tag of field ${this.field} without a start-group`);
      case WIRE_I32:
        this.pos += 4;
        break;
      default:
        throw new DecodeError(`invalid wire type ${this.wire}`);
    }
    if (this.pos > this.end) throw new DecodeError('truncated field');
  }

  /** Skips a (deprecated) group up to the end-group tag of the same field, nested groups included. */
  private skipGroup(field: number, depth: number): void {
    if (depth > MAX_GROUP_DEPTH) throw new DecodeError(`groups nested more than ${MAX_GROUP_DEPTH} deep`);
    for (;;) {
      if (this.pos >= this.end) throw new DecodeError(`group of field ${field} without an end-group tag`);
      this.tag();
      if (this.wire === WIRE_EGROUP) {
        if (this.field !== field) {
          throw new DecodeError(`end-group tag of field ${this.field} inside the group of field ${field}`);
        }
        return;
      }
      this.skip(depth);
    }
  }
}

/** A descriptor entry as decoded. */
export interface EntryMessage {
  key: string;
  value: string;
}

/** One descriptor as decoded (Envoy's RateLimitDescriptor). */
export interface DescriptorMessage {
  entries: EntryMessage[];
  /** True when the descriptor carries Envoy's `limit` override (its fields may still be 0). */
  hasLimit: boolean;
  /** Envoy's `limit` override: 0 when absent. */
  requestsPerUnit: number;
  /** RateLimitUnit enum number: 0 when absent. */
  unit: number;
  /** The descriptor's own `hits_addend`, `undefined` when absent (0 is meaningful: check only). */
  hitsAddend: number | undefined;
}

/** Envoy's RateLimitRequest as decoded. */
export interface RateLimitRequestMessage {
  domain: string;
  descriptors: DescriptorMessage[];
  /** 0 when absent. */
  hitsAddend: number;
}

/** Decodes `envoy.service.ratelimit.v3.RateLimitRequest`. */
export function decodeRateLimitRequest(buf: Buffer): RateLimitRequestMessage {
  const r = new Reader(buf, 0, buf.length);
  const message: RateLimitRequestMessage = { domain: '', descriptors: [], hitsAddend: 0 };
  while (r.pos < r.end) {
    const tag = r.tag();
    if (tag === 10) message.domain = r.string();
    else if (tag === 18) message.descriptors.push(decodeDescriptor(r));
    else if (tag === 24) message.hitsAddend = r.varint() % 2 ** 32;
    else r.skip();
  }
  return message;
}

/** Reads a RateLimitDescriptor, the reader on its length. */
function decodeDescriptor(r: Reader): DescriptorMessage {
  const d: DescriptorMessage = { entries: [], hasLimit: false, requestsPerUnit: 0, unit: 0, hitsAddend: undefined };
  const outer = r.enter();
  while (r.pos < r.end) {
    const tag = r.tag();
    if (tag === 10) {
      const parent = r.enter();
      const entry: EntryMessage = { key: '', value: '' };
      while (r.pos < r.end) {
        const t = r.tag();
        if (t === 10) entry.key = r.string();
        else if (t === 18) entry.value = r.string();
        else r.skip();
      }
      r.leave(parent);
      d.entries.push(entry);
    } else if (tag === 18) {
      d.hasLimit = true;
      const parent = r.enter();
      while (r.pos < r.end) {
        const t = r.tag();
        if (t === 8) d.requestsPerUnit = r.varint() % 2 ** 32;
        else if (t === 16) d.unit = r.varint();
        else r.skip();
      }
      r.leave(parent);
    } else if (tag === 26) {
      const parent = r.enter();
      let value = 0;
      while (r.pos < r.end) {
        const t = r.tag();
        if (t === 8) value = r.varint();
        else r.skip();
      }
      r.leave(parent);
      d.hitsAddend = value;
    } else {
      r.skip();
    }
  }
  r.leave(outer);
  return d;
}

/** Decodes `grpc.health.v1.HealthCheckRequest`: the service name. */
export function decodeHealthCheckRequest(buf: Buffer): string {
  const r = new Reader(buf, 0, buf.length);
  let service = '';
  while (r.pos < r.end) {
    const tag = r.tag();
    if (tag === 10) service = r.string();
    else r.skip();
  }
  return service;
}

/** Appends Protocol Buffers fields to a growing buffer. */
export class Writer {
  private buf: Buffer;
  pos = 0;

  constructor(size = 1024) {
    this.buf = Buffer.allocUnsafe(size);
  }

  /** Starts a new message, reusing the buffer. */
  reset(): this {
    this.pos = 0;
    return this;
  }

  private ensure(bytes: number): void {
    if (this.pos + bytes <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + bytes));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  varint(value: number): void {
    this.ensure(10);
    const buf = this.buf;
    let v = value;
    while (v >= 0x80) {
      buf[this.pos++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    buf[this.pos++] = v;
  }

  /** A varint field, left out when 0 (proto3 default). */
  uint(field: number, value: number): void {
    if (value === 0) return;
    this.varint(field * 8);
    this.varint(value);
  }

  /** A string field, left out when empty. */
  string(field: number, value: string): void {
    if (value.length === 0) return;
    this.varint(field * 8 + WIRE_LEN);
    const bytes = Buffer.byteLength(value);
    this.varint(bytes);
    this.ensure(bytes);
    this.buf.write(value, this.pos, bytes, 'utf8');
    this.pos += bytes;
  }

  /** Opens a nested message field; returns a mark for {@link close}. */
  open(field: number): number {
    this.varint(field * 8 + WIRE_LEN);
    this.ensure(1);
    return this.pos++;
  }

  /** Closes a nested message: writes its length, moving the body when the length needs more than a byte. */
  close(mark: number): void {
    const length = this.pos - mark - 1;
    if (length < 0x80) {
      this.buf[mark] = length;
      return;
    }
    let extra = 0;
    for (let v = length; v >= 0x80; v = Math.floor(v / 0x80)) extra++;
    this.ensure(extra);
    this.buf.copyWithin(mark + 1 + extra, mark + 1, this.pos);
    let at = mark;
    let v = length;
    while (v >= 0x80) {
      this.buf[at++] = (v % 0x80) | 0x80;
      v = Math.floor(v / 0x80);
    }
    this.buf[at] = v;
    this.pos += extra;
  }

  /**
   * The message framed for gRPC (a zero compression flag and a 4-byte big-endian length) in a new
   * buffer of its own: the writer is reused while the transport may still hold the bytes.
   */
  framed(): Buffer {
    const out = Buffer.allocUnsafe(this.pos + 5);
    out[0] = 0;
    out.writeUInt32BE(this.pos, 1);
    this.buf.copy(out, 5, 0, this.pos);
    return out;
  }

  /** The message, unframed, as a view of this writer's buffer: valid until the next write or reset. */
  view(): Buffer {
    return this.buf.subarray(0, this.pos);
  }

  /** The message, unframed, in a new buffer. */
  bytes(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.pos));
  }
}
