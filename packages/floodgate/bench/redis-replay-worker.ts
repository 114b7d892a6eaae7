// One replaying client of the fleet benchmark (redis-replay.ts): sends a recording of the exact command
// bytes a real client sent (pre-encoded RESP, read from a file), pipelined on one socket, again and again,
// keeping at most IN_FLIGHT decisions outstanding, and counts the decisions whose replies came back between
// the parent's 'start' and 'stop'. It parses nothing but the reply framing, so it costs the machine far
// less than the client it stands for: the server is the bound.
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';

const [port, file, inFlightArg, offsetArg] = process.argv.slice(2);
const IN_FLIGHT = Number(inFlightArg);
const recording = readFileSync(file as string);
// The file: a header of u32 count, then per command u32 end offset and u32 decisions; then the bytes.
const count = recording.readUInt32LE(0);
const ends = new Uint32Array(count);
const decisions = new Uint32Array(count);
for (let i = 0; i < count; i++) {
  ends[i] = recording.readUInt32LE(4 + i * 8);
  decisions[i] = recording.readUInt32LE(8 + i * 8);
}
const bytes = recording.subarray(4 + count * 8);

const socket = connect({ port: Number(port), host: '127.0.0.1', noDelay: true });
/** Decisions of the commands sent and not yet answered, in order. */
const pending: number[] = [];
let pendingHead = 0;
let outstanding = 0;
let next = Number(offsetArg) % count;
let answered = 0;
let errors = 0;
let counting = false;
let counted = 0;
let stopped = false;

/** Sends the next commands (contiguous in the recording: one write) while the window has room. */
function fill(): void {
  if (stopped) return;
  const from = next;
  while (outstanding < IN_FLIGHT) {
    const d = decisions[next] as number;
    pending.push(d);
    outstanding += d;
    next++;
    if (next === count) break;
  }
  if (next !== from) socket.write(bytes.subarray(from === 0 ? 0 : (ends[from - 1] as number), ends[next - 1]));
  if (next === count) {
    next = 0;
    if (outstanding < IN_FLIGHT) fill();
  }
}

let buffer: Buffer = Buffer.alloc(0);
/** End of the RESP value at `at`, or -1 when it is not all there yet. */
function skip(at: number): number {
  if (at >= buffer.length) return -1;
  const type = buffer[at];
  if (type === 36 || type === 42) {
    // $<n> or *<n>: the length read digit by digit (cheaper than a string per reply).
    let p = at + 1;
    let n = 0;
    let sign = 1;
    if (buffer[p] === 45) {
      sign = -1;
      p++;
    }
    while (p < buffer.length && buffer[p] !== 13) n = n * 10 + ((buffer[p++] as number) - 48);
    if (p + 1 >= buffer.length) return -1;
    return rest(type, sign * n, p);
  }
  const eol = buffer.indexOf(13, at);
  if (eol === -1 || eol + 1 >= buffer.length) return -1;
  if (type === 43 || type === 58) return eol + 2; // + :
  if (type === 45) {
    errors++;
    return eol + 2;
  }
  throw new Error(`unexpected reply type ${String.fromCharCode(type as number)}`);
}

/** The end of a bulk string or an array of `n` whose length line ends at `eol`. */
function rest(type: number, n: number, eol: number): number {
  if (type === 36) {
    if (n < 0) return eol + 2;
    const end = eol + 2 + n + 2;
    return end <= buffer.length ? end : -1;
  }
  if (type === 42) {
    let p = eol + 2;
    for (let i = 0; i < n; i++) {
      p = skip(p);
      if (p === -1) return -1;
    }
    return p;
  }
  return -1;
}

socket.on('data', (chunk: Buffer) => {
  buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
  let at = 0;
  for (;;) {
    const errorsBefore = errors;
    const end = skip(at);
    if (end === -1) {
      errors = errorsBefore;
      break;
    }
    at = end;
    const d = pending[pendingHead++] as number;
    outstanding -= d;
    answered += d;
  }
  buffer = at === buffer.length ? Buffer.alloc(0) : buffer.subarray(at);
  if (pendingHead > 65_536) {
    pending.splice(0, pendingHead);
    pendingHead = 0;
  }
  fill();
});

process.on('message', (message: 'start' | 'stop') => {
  if (message === 'start') {
    counting = true;
    counted = answered;
  } else if (counting) {
    const decided = answered - counted;
    stopped = true;
    socket.destroy();
    process.send?.({ decided, errors }, () => process.exit(0));
  }
});
socket.once('connect', () => {
  fill();
  process.send?.('ready');
});
