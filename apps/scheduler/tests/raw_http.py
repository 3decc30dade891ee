"""Reading HTTP/1.1 requests off a raw socket, for the tests' hand-made servers.

Those servers answer byte for byte what a test needs (a body cut mid-chunk, a
connection held silent), which no HTTP server library will send; they only
need each request read whole so the next one on a kept-alive connection starts
where it should.
"""

from __future__ import annotations

from typing import BinaryIO


def read_request(stream: BinaryIO) -> str | None:
    """The method of the next request on the connection, its headers and body read;
    None once the client has closed it."""
    request_line = stream.readline().decode()
    if not request_line:
        return None
    length = 0
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    stream.read(length)
    return request_line.split(" ")[0]
