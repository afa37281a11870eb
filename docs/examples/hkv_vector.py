"""A small client for hkv's vector commands (docs/protocol-extensions.md).

Values are Python lists of numbers packed as little-endian arrays of one element type.
Only the standard library: a socket and `struct`.
"""
import socket
import struct

FORMATS = {
    "u8": "B", "u16": "H", "u32": "I", "u64": "Q",
    "i8": "b", "i16": "h", "i32": "i", "i64": "q",
    "f32": "f", "f64": "d",
}


class VectorError(Exception):
    """hkv refused the operation (CLIENT_ERROR / SERVER_ERROR / ERROR); nothing changed."""


def pack(elem, values):
    return struct.pack("<%d%s" % (len(values), FORMATS[elem]), *values)


def unpack(elem, data):
    size = struct.calcsize(FORMATS[elem])
    return list(struct.unpack("<%d%s" % (len(data) // size, FORMATS[elem]), data))


class Vectors:
    def __init__(self, addr, timeout=5):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _reply(self, elem):
        """One reply: True (UPDATED), a RESULT string, a list (a value), None (NOT_FOUND)."""
        line = self._line()
        if line == b"UPDATED":
            return True
        if line == b"NOT_FOUND":
            return None
        if line.startswith(b"RESULT "):
            return line[7:].decode()
        if line.startswith(b"VALUE "):
            n = int(line.split()[3])
            data = self._exact(n + 2)[:n]
            if self._line() != b"END":
                raise ConnectionError("malformed value reply")
            return unpack(elem, data)
        raise VectorError(line.decode(errors="replace"))

    def _send(self, data):
        self.sock.sendall(data)

    def set(self, key, elem, values, flags=0, exptime=0):
        data = pack(elem, values)
        self._send(b"set %s %d %d %d\r\n%s\r\n" % (key.encode(), flags, exptime, len(data), data))
        line = self._line()
        if line != b"STORED":
            raise VectorError(line.decode(errors="replace"))

    def get(self, key, elem):
        self._send(b"get %s\r\n" % key.encode())
        line = self._line()
        if line == b"END":
            return None
        n = int(line.split()[3])
        data = self._exact(n + 2)[:n]
        self._line()  # END
        return unpack(elem, data)

    def update(self, key, elem, op, scalar, old=False):
        """`vupdate`: True, or with old=True the elements before the update; None if missing."""
        opt = b" old" if old else b""
        self._send(b"vupdate %s %s %s %s%s\r\n" % (key.encode(), elem.encode(), op.encode(),
                                                   str(scalar).encode(), opt))
        return self._reply(elem)

    def update_vector(self, key, elem, op, values, old=False):
        """`vupdatev`: element by element with `values` (as many as the value holds)."""
        data = pack(elem, values)
        opt = b" old" if old else b""
        self._send(b"vupdatev %s %s %s %d%s\r\n%s\r\n" % (key.encode(), elem.encode(), op.encode(),
                                                          len(data), opt, data))
        return self._reply(elem)

    def reduce(self, key, elem, op):
        """`vreduce`: the result as the server printed it (exact for integers)."""
        self._send(b"vreduce %s %s %s\r\n" % (key.encode(), elem.encode(), op.encode()))
        return self._reply(elem)

    def filter(self, key, elem, cmp, scalar):
        """`vfilter`: the elements that pass, in order."""
        self._send(b"vfilter %s %s %s %s\r\n" % (key.encode(), elem.encode(), cmp.encode(),
                                                 str(scalar).encode()))
        return self._reply(elem)
