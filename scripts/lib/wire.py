#!/usr/bin/env python3
"""The client's token instants against the wire (used by scripts/bench-fidelity.sh, WIRE=1).

Reads a loopback capture (`tcpdump -i lo --time-stamp-precision=nano -w PCAP`) of a
run against the mock over HTTP/1.1 or HTTP/2, plain or over TLS 1.3 (decrypted with the
mock's `SSLKEYLOGFILE`: a record's bytes count from the segment that completed the
record, which is when the client could first decrypt them), rebuilds each connection's
byte streams,
finds in them every request (by its x-request-id) and the packet that carried each of
its content tokens, and compares with what the client logged (`--request-log`) and
what the mock's `--truth` stamped:

  * client − wire: the client's first content token against the capture's instant of
    the packet that completed that chunk. On loopback the capture and the kernel's
    receive stamp are taken microseconds apart, so this is the client's own error,
    whatever the mock did: a mock behind its schedule still sent what it sent;
  * the client's ITL std (the report's) against the std of the gaps between the tokens'
    packets;
  * mock − wire: how long after its own stamp the mock's bytes left (its HTTP/2 layer
    writes a stream's frame from another task, so its truth is early there);
  * the first tokens the client read more than 1 ms late, and when in the run they came.

Usage: wire.py PCAP PORT TRANSPORT KEYLOG REQUEST_LOG TRUTH REPORT STREAMS AT_STREAMS \
               MEAN_TARGET P99_TARGET ITL_TARGET
TRANSPORT is http, h2c, https or h2; KEYLOG the key log file for https and h2 (else -).
Prints one line and exits 0, also where it cannot judge (the line says NOT MEASURED and
why); exits 2 on arguments it cannot use.
"""

import bisect
import collections
import hashlib
import hmac
import json
import math
import statistics
import struct
import sys


def say(text):
    """The level's wire line; the script ends with it."""
    print(f"{'':>6}  against the wire: {text}")
    sys.exit(0)


def unexpected(kind, value, _traceback):
    """Anything not foreseen below is a line, not a traceback: the level's figures stand."""
    say(f"wire.py could not read this run ({kind.__name__}: {value}): NOT MEASURED")


sys.excepthook = unexpected

USAGE = ("usage: wire.py PCAP PORT TRANSPORT KEYLOG REQUEST_LOG TRUTH REPORT STREAMS "
         "AT_STREAMS MEAN_TARGET P99_TARGET ITL_TARGET")
try:
    (pcap, port, transport, keylog, log_path, truth_path, report_path, streams, at_streams,
     mean_target, p99_target, itl_target) = sys.argv[1:]
    port, streams, at_streams = int(port), int(streams), int(at_streams)
    mean_target, p99_target, itl_target = float(mean_target), float(p99_target), float(itl_target)
    if transport not in ("http", "h2c", "https", "h2"):
        raise ValueError(f"TRANSPORT {transport!r} is not http, h2c, https or h2")
except ValueError as e:
    print(f"error: {e if sys.argv[1:] else 'no arguments'}; {USAGE}", file=sys.stderr)
    sys.exit(2)
TOKEN = b'"content":"'  # one per content token chunk (the fidelity run has one token a chunk)
LATE_MS = 1.0  # a first token later than this against the wire is listed with when it came


def packets(path):
    """(client port, direction, seq, time, payload) of each TCP segment with data."""
    raw = open(path, "rb").read()
    if len(raw) < 24 or struct.unpack("<I", raw[:4])[0] != 0xA1B23C4D:
        say("the capture is not a nanosecond pcap: NOT MEASURED")
    if struct.unpack("<I", raw[20:24])[0] != 1:
        say("the capture's link type is not Ethernet (tcpdump -i lo): NOT MEASURED")
    off = 24
    while off + 16 <= len(raw):
        sec, nsec, incl, orig = struct.unpack("<IIII", raw[off:off + 16])
        off += 16
        pkt = raw[off:off + incl]
        off += incl
        if incl < orig:
            say("the capture cut packets short (its snapshot length): NOT MEASURED")
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
            continue  # not IPv4
        ip = pkt[14:]
        tcp = ip[(ip[0] & 15) * 4:]
        sport, dport, seq = struct.unpack(">HHI", tcp[:8])
        payload = tcp[(tcp[12] >> 4) * 4:]
        if not payload:
            continue
        t = sec + nsec * 1e-9
        if sport == port:
            yield dport, "s2c", seq, t, payload
        elif dport == port:
            yield sport, "c2s", seq, t, payload


def reassemble(segments):
    """One direction's bytes in order and, for each byte offset, the segment end times."""
    base = segments[0][0]  # captured in time order; offsets modulo the sequence's wrap
    segments.sort(key=lambda s: (s[0] - base) % 2**32)
    data, ends, expect = bytearray(), [], None
    for seq, t, payload in segments:
        rel = (seq - base) % 2**32
        if expect is not None and rel < expect:
            continue  # a retransmission
        if expect is not None and rel > expect:
            return None, None  # a segment the capture lost
        data += payload
        ends.append((len(data), t))
        expect = rel + len(payload)
    return bytes(data), ends


def at(ends, offset):
    """When the byte before `offset` arrived: the time of the segment that held it."""
    i = bisect.bisect_left(ends, (offset, -math.inf))
    return ends[min(i, len(ends) - 1)][1]


# TLS 1.3: the suites' AEAD, key length and hash (RFC 8446 B.4).
SUITES = {0x1301: ("aes", 16, hashlib.sha256), 0x1302: ("aes", 32, hashlib.sha384),
          0x1303: ("chacha", 32, hashlib.sha256)}


def read_keylog(path):
    """client random -> {label: secret} from an NSS key log."""
    keys = collections.defaultdict(dict)
    for line in open(path):
        parts = line.split()
        if len(parts) == 3:
            keys[bytes.fromhex(parts[1])][parts[0]] = bytes.fromhex(parts[2])
    return keys


def expand_label(secret, label, length, digest):
    """HKDF-Expand-Label(secret, label, "", length)."""
    full = b"tls13 " + label
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + b"\x00"
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([i]), digest).digest()
        out, i = out + block, i + 1
    return out[:length]


class Direction:
    """One direction's record protection: the handshake keys, then the application's."""

    def __init__(self, secrets, suite):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
        kind, key_len, digest = SUITES[suite]
        aead = AESGCM if kind == "aes" else ChaCha20Poly1305
        self.keys = [(aead(expand_label(sec, b"key", key_len, digest)),
                      expand_label(sec, b"iv", 12, digest)) for sec in secrets]
        self.stage, self.seq = 0, 0

    def open(self, header, body):
        """The inner plaintext (content, type), or None if neither key opens it."""
        from cryptography.exceptions import InvalidTag
        while self.stage < len(self.keys):
            aead, iv = self.keys[self.stage]
            nonce = bytes(a ^ b for a, b in zip(iv, self.seq.to_bytes(12, "big")))
            try:
                inner = aead.decrypt(nonce, body, header).rstrip(b"\x00")
                self.seq += 1
                return inner[:-1], inner[-1]
            except InvalidTag:
                self.stage, self.seq = self.stage + 1, 0  # the handshake is over
        return None


def records(data):
    """(header, body, end offset) of each whole TLS record."""
    pos = 0
    while pos + 5 <= len(data):
        length = int.from_bytes(data[pos + 3:pos + 5], "big")
        if pos + 5 + length > len(data):
            return
        yield data[pos:pos + 5], data[pos + 5:pos + 5 + length], pos + 5 + length
        pos += 5 + length


def decrypt(c2s, s2c, s2c_ends, keylog):
    """Both directions' application bytes, and the server's with the instant each
    record's last segment arrived; None where the session cannot be opened."""
    hello = next(records(c2s), None)
    server_hello = next(records(s2c), None)
    if hello is None or server_hello is None or hello[1][0] != 1 or server_hello[1][0] != 2:
        return None
    secrets = keylog.get(hello[1][6:38])
    body = server_hello[1]
    suite = int.from_bytes(body[39 + body[38]:41 + body[38]], "big")
    if not secrets or suite not in SUITES:
        return None
    out = []
    for data, side in ((c2s, "CLIENT"), (s2c, "SERVER")):
        names = (f"{side}_HANDSHAKE_TRAFFIC_SECRET", f"{side}_TRAFFIC_SECRET_0")
        if any(n not in secrets for n in names):
            return None
        protection = Direction([secrets[n] for n in names], suite)
        plain, ends = bytearray(), []
        for header, payload, end in records(data):
            if header[0] != 23:
                continue  # the hellos and the compatibility ChangeCipherSpec
            opened = protection.open(header, payload)
            if opened is None:
                return None
            content, kind = opened
            if kind == 23 and protection.stage == 1:
                plain += content
                if side == "SERVER":
                    ends.append((len(plain), at(s2c_ends, end)))
        out.append((bytes(plain), ends))
    return out[0][0], out[1][0], out[1][1]


def h1_requests(c2s):
    """Request ids in order on one HTTP/1.1 connection."""
    ids, pos = [], 0
    while True:
        end = c2s.find(b"\r\n\r\n", pos)
        if end < 0:
            return ids
        head = c2s[pos:end].decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        ids.append(fields.get("x-request-id"))
        pos = end + 4 + int(fields.get("content-length", "0"))


def h1_tokens(s2c, ends):
    """Per response in order, the arrival time of each content token."""
    out, pos = [], 0
    while True:
        end = s2c.find(b"\r\n\r\n", pos)
        if end < 0:
            return out
        head = s2c[pos:end].decode("latin-1").lower()
        pos, times = end + 4, []
        if "transfer-encoding: chunked" in head:
            while True:
                line_end = s2c.find(b"\r\n", pos)
                if line_end < 0:
                    return out
                try:
                    size = int(s2c[pos:line_end].split(b";")[0], 16)
                except ValueError:
                    return out  # not HTTP/1.1 chunking: the connection's answers end here
                data_end = line_end + 2 + size
                times += [at(ends, data_end)] * s2c[line_end + 2:data_end].count(TOKEN)
                pos = data_end + 2
                if size == 0:
                    break
        else:
            length = next((int(h.split(":")[1]) for h in head.split("\r\n")
                           if h.startswith("content-length:")), 0)
            pos += length
        out.append(times)


def h2_frames(data, start):
    pos = start
    while pos + 9 <= len(data):
        length = int.from_bytes(data[pos:pos + 3], "big")
        kind, stream = data[pos + 3], int.from_bytes(data[pos + 5:pos + 9], "big") & 0x7FFFFFFF
        if pos + 9 + length > len(data):
            return
        yield pos + 9 + length, kind, stream, data[pos + 9:pos + 9 + length]
        pos += 9 + length


def read_lines(path):
    """The JSON lines of a run's file, by request id."""
    out = {}
    for line in open(path):
        record = json.loads(line)
        if record.get("request_id"):
            out[record["request_id"]] = record  # a resent request: its last attempt
    return out


try:
    log = read_lines(log_path)
except (OSError, ValueError, AttributeError) as e:
    say(f"cannot read the request log {log_path} ({e}): NOT MEASURED")
try:
    truth = read_lines(truth_path)
except (OSError, ValueError, AttributeError):
    truth = {}  # the mock's part of the line is left out
# The measured requests, as the report's figures are (a warm-up's are left out there).
completed = {rid for rid, r in log.items()
             if r.get("status") == "completed" and r.get("first_content_time") is not None
             and r.get("phase", "measured") == "measured"}
if not completed:
    say("no completed measured request in the run's log: NOT MEASURED")
tls = None
if transport in ("https", "h2"):
    try:
        tls = read_keylog(keylog)
    except (OSError, ValueError) as e:
        say(f"no key log to decrypt the capture ({keylog}: {e}; the mock writes it where "
            "SSLKEYLOGFILE says, a build from before that does not): NOT MEASURED")

ids = {rid.encode() for rid in log}
id_lengths = {len(rid) for rid in ids}
flows = collections.defaultdict(list)
try:
    for cport, direction, seq, t, payload in packets(pcap):
        flows[(cport, direction)].append((seq, t, payload))
except (OSError, struct.error) as e:
    say(f"cannot read the capture {pcap} ({e}): NOT MEASURED")
if not flows:
    say(f"no traffic to or from port {port} in the capture: NOT MEASURED")
wire = {}  # request id -> arrival time of each content token
lost = unopened = 0
for (cport, direction), segments in flows.items():
    if direction != "c2s" or (cport, "s2c") not in flows:
        continue
    c2s, _ = reassemble(segments)
    s2c, ends = reassemble(flows[(cport, "s2c")])
    if c2s is None or s2c is None:
        lost += 1
        continue
    if tls is not None:
        opened = decrypt(c2s, s2c, ends, tls)
        if opened is None:
            unopened += 1
            continue
        c2s, s2c, ends = opened
    if transport in ("h2c", "h2"):
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        by_stream = {}
        for _, kind, stream, payload in h2_frames(c2s, len(preface)):
            if kind == 1:  # HEADERS: the id is a literal (no Huffman) after its length
                for i, length in enumerate(payload):
                    rid = payload[i + 1:i + 1 + length]
                    if length in id_lengths and rid in ids:
                        by_stream[stream] = rid.decode()
                        break
        for end, kind, stream, payload in h2_frames(s2c, 0):
            if kind == 0 and stream in by_stream:
                wire.setdefault(by_stream[stream], []).extend([at(ends, end)] * payload.count(TOKEN))
    else:
        for rid, times in zip(h1_requests(c2s), h1_tokens(s2c, ends)):
            if rid:
                wire[rid] = times
if lost:
    say(f"the capture lost segments of {lost} connection(s) (raise tcpdump's -B): NOT MEASURED")
found = {rid for rid in completed if wire.get(rid)}
if len(found) < len(completed):
    why = (f"{unopened} TLS session(s) could not be opened with {keylog} (TLS 1.3 and the "
           "mock's SSLKEYLOGFILE needed)" if unopened else
           "a capture stopped early, or request ids the client compressed")
    say(f"the capture holds {len(found)} of the {len(completed)} requests the client "
        f"completed ({why}): NOT MEASURED")

client_err, mock_err, wire_gaps = [], [], []
late_at = []  # when on the wire the first tokens the client read over LATE_MS late came
for rid in found:
    times, r, t = wire[rid], log[rid], truth.get(rid)
    client_err.append((r["first_content_time"] - times[0]) * 1e3)
    if client_err[-1] > LATE_MS:
        late_at.append(times[0])
    wire_gaps += [(b - a) * 1e3 for a, b in zip(times, times[1:])]
    if t is not None:
        first = next((c["time"] for c in t.get("chunks", []) if c.get("content", 0) > 0), None)
        if first is not None:
            mock_err.append((times[0] - first) * 1e3)

def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]


try:
    itl = json.load(open(report_path))["benchmarks"][0]["metrics"]["itl"]["successful"]
except (OSError, ValueError, KeyError, IndexError, TypeError):
    itl = {}  # the ITL part is left out, and said so
mean = statistics.fmean(client_err)
ttft = (f"client − wire TTFT mean {mean:.3f} ms, p99 {p99(client_err):.3f} ms, worst "
        f"{max(client_err):.3f} ms over {len(client_err)} measured requests")
if streams == at_streams:
    ok = mean <= mean_target and p99(client_err) <= p99_target
    ttft += f" (targets ≤ {mean_target:g} / ≤ {p99_target:g} ms: {'PASS' if ok else 'MISS'})"
line = ttft
if "std" not in itl or not wire_gaps:
    line += f"; no ITL std to compare (the report {report_path} has none)"
else:
    diff = abs(itl["std"] - statistics.pstdev(wire_gaps))
    line += (f"; ITL std {itl['std']:.3f} ms against the wire's {statistics.pstdev(wire_gaps):.3f} ms, "
             f"off by {diff:.3f} ms (target ≤ {itl_target:g} ms: {'PASS' if diff <= itl_target else 'MISS'})")
if late_at:
    # When in the run they fell tells a start-up burst (the client opening its
    # connections, TLS handshakes included) from a client behind all along.
    start = min(times[0] for times in wire.values() if times)  # a warm-up's included
    line += (f"; {len(late_at)} first tokens over {LATE_MS:g} ms late, from "
             f"+{min(late_at) - start:.3f} to +{max(late_at) - start:.3f} s after the run's first")
if unopened:
    line += f"; {unopened} TLS session(s) not opened (none held a completed request)"
if mock_err:
    line += (f"; the mock's stamp was {statistics.fmean(mock_err):.3f} ms (p99 {p99(mock_err):.3f} ms) "
             f"before its bytes left")
else:
    line += f"; no line of the mock's truth ({truth_path}) to compare its stamps with"
say(line)
