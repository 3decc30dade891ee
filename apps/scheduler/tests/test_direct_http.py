"""The scheduler's own HTTP/1.1 for short requests (kube/direct.py): what it writes, and how it
reads answers, fed through a real socket pair byte for byte as a server may send them.

The answers' shapes are HTTP/1.1's (RFC 9112): kube-apiserver (Go's net/http) sets
Content-Length on an answer it has whole under 2 KB and uses chunked coding past that; the
rest (1xx, HTTP/1.0, a body to the close, trailers) it does not send but a proxy in between may.
"""

from __future__ import annotations

import http.client
import socket
import time

import pytest
from gpu_scheduler.kube import direct
from gpu_scheduler.kube.direct import read_answer, request_bytes


def answer_of(raw: bytes, *, method: str = "POST", close_after: bool = True, piece: int | None = None):
    """read_answer() on raw as the peer sent it (then closed its end unless close_after is
    False); piece: the most each read from the socket may return (1: every boundary split)."""
    ours, theirs = socket.socketpair()
    receive = direct.RECEIVE
    try:
        theirs.sendall(raw)
        if close_after:
            theirs.shutdown(socket.SHUT_WR)
        direct.RECEIVE = piece or receive
        return read_answer(direct._Answer(ours, time.monotonic() + 2), method)
    finally:
        direct.RECEIVE = receive
        ours.close()
        theirs.close()


OK_JSON = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5;name=value\r\n{"ok"\r\n6\r\n:true}\r\n0\r\nX-Trailer: 1\r\n\r\n'
)


@pytest.mark.parametrize("piece", [None, 1, 3])
def test_an_answer_with_a_length_is_read_whole_and_its_connection_kept(piece):
    assert answer_of(OK_JSON, close_after=False, piece=piece) == (201, b'{"ok":true}', True)


@pytest.mark.parametrize("piece", [None, 1, 2])
def test_a_chunked_answer_is_decoded_its_extensions_and_trailers_dropped(piece):
    assert answer_of(CHUNKED, close_after=False, piece=piece) == (200, b'{"ok":true}', True)


def test_interim_answers_are_skipped():
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + OK_JSON
    assert answer_of(raw, close_after=False) == (201, b'{"ok":true}', True)


def test_connection_close_and_http_1_0_end_the_connection():
    close = OK_JSON.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    assert answer_of(close)[2] is False
    assert answer_of(OK_JSON.replace(b"HTTP/1.1", b"HTTP/1.0"))[2] is False
    keep = OK_JSON.replace(b"HTTP/1.1", b"HTTP/1.0").replace(
        b"Content-Length", b"Connection: keep-alive\r\nContent-Length"
    )
    assert answer_of(keep, close_after=False)[2] is True


def test_a_body_without_length_or_chunks_runs_to_the_close():
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + b"x" * 50_000
    assert answer_of(raw) == (200, b"x" * 50_000, False)


def test_no_body_is_read_after_204_or_for_head():
    assert answer_of(b"HTTP/1.1 204 No Content\r\n\r\n", close_after=False) == (204, b"", True)
    assert answer_of(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", method="HEAD", close_after=False) == (
        200,
        b"",
        True,
    )


def test_bytes_past_the_answer_make_the_connection_unfit_for_the_next_request():
    assert answer_of(OK_JSON + b"HTTP/1.1 200 OK\r\n", close_after=False)[2] is False


def test_an_answer_cut_short_is_an_error_not_a_short_body():
    with pytest.raises(http.client.RemoteDisconnected):
        answer_of(OK_JSON[:-3])
    with pytest.raises(http.client.RemoteDisconnected):
        answer_of(CHUNKED[: CHUNKED.index(b"0\r\n")])


@pytest.mark.parametrize(
    "raw",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
    ],
)
def test_what_is_not_an_http_answer_is_an_error_naming_it(raw):
    with pytest.raises(http.client.BadStatusLine):
        answer_of(raw)


@pytest.mark.parametrize("size", [b"zz", b"-5", b"0x5", b"+5"])
def test_a_chunk_size_that_is_not_hex_digits_is_an_error(size):
    with pytest.raises(http.client.IncompleteRead):
        answer_of(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nhello\r\n0\r\n\r\n")


def test_a_head_without_end_is_refused_past_its_limit():
    with pytest.raises(http.client.LineTooLong):
        answer_of(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * (direct.MAX_HEAD // 6 + 1), close_after=False)


def test_a_silent_server_is_a_timeout_at_the_deadline():
    ours, theirs = socket.socketpair()
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            read_answer(direct._Answer(ours, time.monotonic() + 0.3), "POST")
        assert 0.25 < time.monotonic() - started < 2
    finally:
        ours.close()
        theirs.close()


def test_the_request_goes_out_in_one_piece_with_its_length():
    data = request_bytes(
        "POST", "/api/v1/namespaces/a/pods/b/binding", "10.0.0.1:6443", {"Accept": "application/json"}, b"{}"
    )
    assert data == (
        b"POST /api/v1/namespaces/a/pods/b/binding HTTP/1.1\r\nHost: 10.0.0.1:6443\r\n"
        b"Accept: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )
    # A POST without a body says so; a GET says nothing.
    assert b"Content-Length: 0\r\n" in request_bytes("POST", "/x", "h", {}, None)
    assert b"Content-Length" not in request_bytes("GET", "/x", "h", {}, None)


@pytest.mark.parametrize("target", ["/a b", "/a\r\nX: y", "/a\x00"])
def test_a_target_that_would_break_the_request_line_is_refused(target):
    with pytest.raises(ValueError, match="request target"):
        request_bytes("GET", target, "h", {}, None)


def test_a_header_value_that_would_start_a_header_of_its_own_is_refused():
    with pytest.raises(ValueError, match="Authorization"):
        request_bytes("GET", "/x", "h", {"Authorization": "Bearer t\r\nX-Evil: 1"}, None)


@pytest.mark.parametrize(
    ("scheme", "host", "port", "expected"),
    [
        ("https", "10.0.0.1", 443, "10.0.0.1"),
        ("https", "10.0.0.1", 6443, "10.0.0.1:6443"),
        ("http", "::1", 8080, "[::1]:8080"),
    ],
)
def test_the_host_header_names_the_port_only_when_it_is_not_the_schemes(scheme, host, port, expected):
    assert direct.DirectTransport(scheme, host, port, None, host)._host == expected
