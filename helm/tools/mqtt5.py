"""A minimal MQTT 5 request/response client (stdlib only) for the chart rehearsal.

One connection subscribes to its response topic and publishes requests at QoS 1 with a
response topic, correlation data, user properties and a message expiry, like any statestore
client. (mosquitto_rr would be the tool, but Debian's 2.0.11 publishes an empty payload; and
a separate mosquitto_sub plus mosquitto_pub cannot work under use_username_as_clientid, where
the second connection of a user takes over the first.)
"""

import socket
import struct
import time

# Property ids by encoding (MQTT 5 §2.2.2.2).
_BYTE = {0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A}
_TWO = {0x13, 0x21, 0x22, 0x23}
_FOUR = {0x02, 0x11, 0x18, 0x27}
_VARINT = {0x0B}
_STRING = {0x03, 0x08, 0x12, 0x15, 0x1A, 0x1C, 0x1F}
_BINARY = {0x09, 0x16}
_PAIR = {0x26}


def _varint(n):
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(b)) + b


def _packet(first, body):
    return bytes([first]) + _varint(len(body)) + body


def _props(raw):
    """(id, value) pairs of a property block."""
    out, i = [], 0
    while i < len(raw):
        pid = raw[i]
        i += 1
        if pid in _BYTE:
            out.append((pid, raw[i]))
            i += 1
        elif pid in _TWO:
            out.append((pid, struct.unpack_from("!H", raw, i)[0]))
            i += 2
        elif pid in _FOUR:
            out.append((pid, struct.unpack_from("!I", raw, i)[0]))
            i += 4
        elif pid in _VARINT:
            n, shift = 0, 0
            while True:
                b = raw[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            out.append((pid, n))
        elif pid in _STRING or pid in _BINARY:
            (n,) = struct.unpack_from("!H", raw, i)
            out.append((pid, raw[i + 2 : i + 2 + n]))
            i += 2 + n
        elif pid in _PAIR:
            (n,) = struct.unpack_from("!H", raw, i)
            k = raw[i + 2 : i + 2 + n]
            i += 2 + n
            (m,) = struct.unpack_from("!H", raw, i)
            out.append((pid, (k.decode(), raw[i + 2 : i + 2 + m].decode())))
            i += 2 + m
        else:
            raise ValueError(f"unknown MQTT property 0x{pid:02x}")
    return out


class Client:
    def __init__(self, host, port, username, password, client_id=None, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.next_id = 1
        flags = 0x02 | (0x80 if username else 0) | (0x40 if password else 0)
        body = _str("MQTT") + bytes([5, flags]) + struct.pack("!H", 30) + _varint(0)
        body += _str(client_id or username or "rehearsal")
        if username:
            body += _str(username)
        if password:
            body += _str(password)
        self.sock.sendall(_packet(0x10, body))
        first, body = self._read()
        if first >> 4 != 2 or body[1] != 0:
            raise ConnectionError(f"CONNACK reason 0x{body[1]:02x}")

    def _read(self):
        while True:
            if len(self.buf) >= 2:
                n, mult, i = 0, 1, 1
                while i < len(self.buf):
                    b = self.buf[i]
                    n += (b & 0x7F) * mult
                    mult *= 128
                    i += 1
                    if not b & 0x80:
                        if len(self.buf) >= i + n:
                            first, body = self.buf[0], self.buf[i : i + n]
                            self.buf = self.buf[i + n :]
                            return first, body
                        break
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.buf += chunk

    def _id(self):
        pid = self.next_id
        self.next_id = pid % 65535 + 1
        return pid

    def subscribe(self, topic):
        pid = self._id()
        self.sock.sendall(_packet(0x82, struct.pack("!H", pid) + _varint(0) + _str(topic) + b"\x01"))
        while True:
            first, body = self._read()
            if first >> 4 == 9:
                (plen,) = body[2:3]
                codes = body[3 + plen :]
                if codes != b"\x01":
                    raise ConnectionError(f"SUBACK {codes.hex()} for {topic}")
                return

    def publish(self, topic, payload, properties):
        """QoS 1; properties: list of (id, value). Returns the PUBACK reason code."""
        props = b""
        for pid, value in properties:
            if pid in _FOUR:
                props += bytes([pid]) + struct.pack("!I", value)
            elif pid in _PAIR:
                props += bytes([pid]) + _str(value[0]) + _str(value[1])
            else:
                props += bytes([pid]) + _str(value)
        pid = self._id()
        self.sock.sendall(_packet(0x32, _str(topic) + struct.pack("!H", pid) + _varint(len(props)) + props + payload))
        return pid

    def request(self, topic, payload, response_topic, correlation, user_properties, timeout, expiry=10):
        """Publishes once and waits up to `timeout` for the response with this correlation
        data; returns (user properties, payload) or None."""
        props = [(0x08, response_topic), (0x09, correlation), (0x02, expiry)]
        props += [(0x26, kv) for kv in user_properties]
        self.publish(topic, payload, props)
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                first, body = self._read()
            except (TimeoutError, socket.timeout):
                return None
            finally:
                self.sock.settimeout(5.0)
            if first >> 4 != 3:
                continue  # PUBACK of our request
            qos = (first >> 1) & 3
            (tlen,) = struct.unpack_from("!H", body)
            i = 2 + tlen
            if qos:
                (pid,) = struct.unpack_from("!H", body, i)
                i += 2
                self.sock.sendall(_packet(0x40, struct.pack("!H", pid)))
            plen, shift = 0, 0
            while True:
                b = body[i]
                i += 1
                plen |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            props = _props(body[i : i + plen])
            if (0x09, correlation) in props:
                return [v for k, v in props if k == 0x26], body[i + plen :]
            if time.monotonic() > deadline:
                return None

    def close(self):
        try:
            self.sock.sendall(_packet(0xE0, b"\x00"))
        finally:
            self.sock.close()
