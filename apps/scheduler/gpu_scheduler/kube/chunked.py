"""The lines of a chunked HTTP body, cut out of whatever the connection has.

kube-apiserver sends each watch event as a chunk of its own. urllib3 reads a
chunked body a chunk at a time, with three reads (size line, data, the CRLF
after it) through several generator layers, and then splits the lines; in a
burst that was a fifth of the scheduler's Python CPU (py-spy, `make bench
BENCH_PROFILE=gil`). Here one read takes what the socket holds (in a burst,
often several events) and this decoder cuts chunks and lines out of it.

Pure: fed bytes, it returns lines; kube/client.py's WatchStream does the reading.
"""

from __future__ import annotations

import re

# A chunk's size line: hex digits, then optional ";extensions" (RFC 9112, 7.1.1).
CHUNK_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:[ \t]*;[^\r\n]*)?[ \t]*")
# A size line longer than this is not one (the apiserver's are a few bytes).
MAX_SIZE_LINE = 1024


class ChunkError(ValueError):
    """The body is not chunked transfer coding; str() says where it went wrong."""


class ChunkedLines:
    """Feeds of a chunked body in, the lines of its payload out.

    feed() returns the lines the new bytes complete, without their b"\\n"; a line
    may span chunks and a chunk may hold several lines. Once the last chunk (size 0)
    is seen, `finished` is true and rest() returns an unterminated last line, if any;
    anything after it (trailers) is ignored.
    """

    def __init__(self) -> None:
        self._raw = b""  # bytes received and not decoded yet
        self._left = 0  # data bytes still to come in the current chunk
        self._crlf = False  # the CRLF closing a chunk's data comes next
        self._partial = b""  # payload of a line not complete yet
        self.finished = False

    def feed(self, data: bytes) -> list[bytes]:
        raw = self._raw + data if self._raw else data
        pos, end = 0, len(raw)
        payload: list[bytes] = []
        while pos < end and not self.finished:
            if self._left:
                take = min(self._left, end - pos)
                payload.append(raw[pos : pos + take])
                pos += take
                self._left -= take
                self._crlf = not self._left
            elif self._crlf:
                if end - pos < 2:
                    break
                if raw[pos : pos + 2] != b"\r\n":
                    raise ChunkError(f"a chunk's data is not followed by CRLF (got {raw[pos : pos + 2]!r})")
                pos += 2
                self._crlf = False
            else:
                line_end = raw.find(b"\r\n", pos)
                if line_end < 0:
                    if end - pos > MAX_SIZE_LINE:
                        raise ChunkError(f"no chunk size line within {MAX_SIZE_LINE} bytes")
                    break
                size = CHUNK_SIZE_LINE.fullmatch(raw, pos, line_end)
                if size is None:
                    raise ChunkError(f"not a chunk size line: {raw[pos:line_end][:80]!r}")
                pos = line_end + 2
                self._left = int(size.group(1), 16)
                self.finished = not self._left
        self._raw = raw[pos:] if pos < end and not self.finished else b""
        return self._lines(payload)

    def _lines(self, payload: list[bytes]) -> list[bytes]:
        if not payload:
            return []
        data = self._partial + (payload[0] if len(payload) == 1 else b"".join(payload))
        *lines, self._partial = data.split(b"\n")
        return lines

    def rest(self) -> list[bytes]:
        """An unterminated last line, once the body is finished."""
        rest, self._partial = self._partial, b""
        return [rest] if rest else []
