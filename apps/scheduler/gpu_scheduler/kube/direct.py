"""Short requests to one apiserver over a socket of our own, one kept-alive connection per thread.

The scheduler's hot path is two short requests per pod (its binding and its
Scheduled event), sent by a fixed set of worker threads to one host. Through
urllib3 each request also pays for its pool (a queue get and put, a liveness
check), its Retry bookkeeping and its response wrapper; through http.client,
for its header objects: it parses every answer's headers with the email
package into a Message, and sends the request line, headers and body in two
writes. What these requests need of HTTP/1.1 is small: one write of the
request, then a status line, three headers (Content-Length, Transfer-Encoding,
Connection) and the body. So each thread keeps its own socket and does just
that (`bench/client_cpu.py` has the figures), and urllib3 stays for what
needs more: watches (a stream interrupted from another thread), proxies and
unusual TLS settings (KubeClient decides).

Failures are raised as the urllib3 errors urllib3 itself would raise, so one
retry policy (kube/client.py's _RETRIES) classifies both paths: no answer to a
connection attempt is a connect error (nothing was sent), a failure once the
request may have been sent is a read error, a TLS failure is neither.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time

import urllib3
from urllib3.util.wait import wait_for_read

from gpu_scheduler.kube.chunked import CHUNK_SIZE_LINE

# The most a status line and headers may take; the apiserver's take a few hundred bytes.
MAX_HEAD = 64 * 1024
RECEIVE = 64 * 1024
# What may not appear in a request target or a header value: controls, and in the target a space
# (as http.client refuses): one would end the request line or start a header of its own.
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")
_BAD_VALUE = re.compile(r"[\r\n\x00]")
# Methods whose request has a body, or says it has none (Content-Length: 0), as http.client does.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class _Answer:
    """Bytes of one connection's answers as they arrive: what was received and not used yet,
    and more read from the socket, each read bounded by what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self.buffer = b""

    def more(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the answer did not come in time")
        self._sock.settimeout(left)
        data = self._sock.recv(RECEIVE)
        if not data:
            raise http.client.RemoteDisconnected("the server closed the connection before it answered in full")
        self.buffer += data

    def until(self, end: bytes, what: str) -> bytes:
        """The bytes up to end, which is read and dropped; what names them in the error when
        end does not come within MAX_HEAD bytes."""
        while (found := self.buffer.find(end)) < 0:
            if len(self.buffer) > MAX_HEAD:
                raise http.client.LineTooLong(f"{what} longer than {MAX_HEAD} bytes")
            self.more()
        data, self.buffer = self.buffer[:found], self.buffer[found + len(end) :]
        return data

    def take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self.more()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def chunked(self) -> bytes:
        """A body in chunked transfer coding, decoded; its trailers read and dropped."""
        parts = []
        while True:
            # The watches' decoder's reading of a size line (hex digits only: not "-5", not "0x5").
            size_line = CHUNK_SIZE_LINE.fullmatch(self.until(b"\r\n", "a chunk's size line"))
            if size_line is None:
                raise http.client.IncompleteRead(b"".join(parts))
            size = int(size_line.group(1), 16)
            if not size:
                break
            parts.append(self.take(size))
            if self.take(2) != b"\r\n":
                raise http.client.IncompleteRead(b"".join(parts))
        while self.until(b"\r\n", "a trailer"):
            pass  # trailers, up to the blank line
        return b"".join(parts)

    def to_close(self) -> bytes:
        """A body that ends where the server closes the connection."""
        while True:
            try:
                self.more()
            except http.client.RemoteDisconnected:
                data, self.buffer = self.buffer, b""
                return data


def read_answer(answer: _Answer, method: str) -> tuple[int, bytes, bool]:
    """(status, body, whether the connection may be used again) of the next answer; interim
    (1xx) answers are skipped."""
    while True:
        status_line, *lines = answer.until(b"\r\n\r\n", "an answer's head").decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise http.client.BadStatusLine(status_line)
        status = int(rest[:3])
        if status >= 200:
            break
    length, chunked, close = None, False, version == "HTTP/1.0"
    for line in lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value) if value.strip().isdigit() else -1
            if length < 0:
                raise http.client.BadStatusLine(f"Content-Length: {value.strip()}")
        elif name == "transfer-encoding":
            chunked = value.strip().lower().endswith("chunked")
        elif name == "connection":
            tokens = value.lower()
            close = "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens)
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif chunked:
        body = answer.chunked()
    elif length is not None:
        body = answer.take(length)
    else:
        body, close = answer.to_close(), True
    # Anything received past the answer belongs to none we asked for: the connection is not reused.
    return status, body, not close and not answer.buffer


def request_bytes(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request, line, headers and body in one piece, so that it goes out in one write."""
    if _BAD_TARGET.search(target):
        raise ValueError(f"a request target with a control character or a space: {target!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if _BAD_VALUE.search(value):
            raise ValueError(f"header {name}'s value has a line break or NUL")
        lines.append(f"{name}: {value}")
    if body is not None or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body else head


class _Connection:
    """A socket to the apiserver, TLS with the context and server name it is given; a
    socket opened with TCP_NODELAY (the request goes out in one write: nothing to wait for)."""

    def __init__(self, address: tuple[str, int], context: ssl.SSLContext | None, server_hostname: str) -> None:
        self._address = address
        self._tls = context
        self._server_hostname = server_hostname
        self.sock: socket.socket | None = None

    def connect(self, timeout: float) -> None:
        sock = socket.create_connection(self._address, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._server_hostname)
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class DirectTransport:
    """request() over this thread's connection to scheme://host:port."""

    def __init__(self, scheme: str, host: str, port: int, context: ssl.SSLContext | None, server_hostname: str) -> None:
        self._address = (host, port)
        self._context = context if scheme == "https" else None
        # As http.client writes it: the port only when it is not the scheme's own.
        name = f"[{host}]" if ":" in host else host
        self._host = name if port == (443 if scheme == "https" else 80) else f"{name}:{port}"
        self._server_hostname = server_hostname
        self._local = threading.local()

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: dict[str, str],
        connect_timeout: float,
        read_timeout: float,
    ) -> tuple[int, bytes]:
        """Sends one request and reads its whole answer within read_timeout: (status, body)."""
        data = request_bytes(method, target, self._host, headers, body)
        connection = self._connection(target, connect_timeout)
        try:
            connection.sock.settimeout(read_timeout)
            connection.sock.sendall(data)
            status, answer, reusable = read_answer(_Answer(connection.sock, time.monotonic() + read_timeout), method)
        except TimeoutError as err:
            connection.close()
            raise urllib3.exceptions.ReadTimeoutError(None, target, f"no answer in {read_timeout:g} s") from err
        except (OSError, http.client.HTTPException) as err:
            # Sent, or maybe sent: the server may have acted on it.
            connection.close()
            raise urllib3.exceptions.ProtocolError("Connection aborted.", err) from err
        if not reusable:
            connection.close()
        return status, answer

    def _connection(self, target: str, connect_timeout: float) -> _Connection:
        """This thread's connection, open: a kept-alive one unless the server has closed
        it meanwhile (anything readable on an idle connection means it did), else a new one."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = _Connection(self._address, self._context, self._server_hostname)
        elif connection.sock is not None and wait_for_read(connection.sock, timeout=0.0):
            connection.close()
        if connection.sock is None:
            try:
                connection.connect(connect_timeout)
            except ssl.SSLError as err:
                raise urllib3.exceptions.SSLError(err) from err
            except TimeoutError as err:
                raise urllib3.exceptions.ConnectTimeoutError(
                    None, f"{target}: no connection in {connect_timeout:g} s"
                ) from err
            except OSError as err:
                raise urllib3.exceptions.NewConnectionError(None, f"{target}: cannot connect: {err}") from err
        return connection


def tls_context(
    *,
    verify: bool,
    ca_file: str | None,
    ca_data: str | None,
    cert_file: str | None,
    key_file: str | None,
    check_hostname: bool,
) -> ssl.SSLContext:
    """The client TLS context urllib3 would make of a kubeconfig's settings."""
    context = urllib3.util.ssl_.create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
    if verify:
        if ca_file or ca_data:
            context.load_verify_locations(cafile=ca_file, cadata=ca_data)
        else:
            context.load_default_certs()
    context.check_hostname = verify and check_hostname
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context
