"""A watch's lines, cut out of its chunked body (kube/chunked.py, WatchStream).

The decoder is checked against the plain meaning of chunked coding on any split of the
same body into chunks and into reads; the stream against a real HTTP server on a local
socket that sends a watch the way kube-apiserver does (one event per chunk, CRLFs,
the zero chunk at the end) and also in odd pieces, ends it, or cuts it mid-chunk.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest
from gpu_scheduler.kube.chunked import ChunkedLines, ChunkError
from gpu_scheduler.kube.client import ApiError, KubeClient
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import Configuration
from raw_http import read_request

# -- the decoder ----------------------------------------------------------------------------


def encode(chunks: list[bytes], extension: bytes = b"") -> bytes:
    return b"".join(b"%x%s\r\n%s\r\n" % (len(c), extension, c) for c in chunks if c) + b"0\r\n\r\n"


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def decode(feeds: list[bytes]) -> tuple[list[bytes], ChunkedLines]:
    decoder = ChunkedLines()
    lines = [line for feed in feeds for line in decoder.feed(feed)]
    return lines + decoder.rest(), decoder


lines_ = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8)


@settings(max_examples=400, deadline=None)
@given(
    lines=lines_,
    terminated=st.booleans(),
    chunk_cuts=st.lists(st.integers(0, 400), max_size=6),
    read_cuts=st.lists(st.integers(0, 600), max_size=10),
    extension=st.sampled_from([b"", b";name=value", b" ; x"]),
)
def test_any_split_into_chunks_and_reads_gives_the_same_lines(lines, terminated, chunk_cuts, read_cuts, extension):
    payload = b"\n".join(lines) + (b"\n" if terminated and lines else b"")
    body = encode(split_at(payload, chunk_cuts), extension)
    got, decoder = decode(split_at(body, read_cuts) + [b"trailer: ignored\r\n\r\n"])
    expected = payload.split(b"\n")
    if expected[-1] == b"":
        expected.pop()
    assert got == expected
    assert decoder.finished


def test_a_watch_as_the_apiserver_sends_it_one_event_a_chunk():
    events = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"p-{i}"}}}).encode() + b"\n" for i in range(3)
    ]
    got, decoder = decode([encode(events)])
    assert [json.loads(line)["object"]["metadata"]["name"] for line in got] == ["p-0", "p-1", "p-2"]
    assert decoder.finished


def test_nothing_is_returned_before_its_line_is_complete():
    decoder = ChunkedLines()
    assert decoder.feed(b"6\r\nab") == []
    assert decoder.feed(b"c\nd") == [b"abc"]
    assert decoder.feed(b"e\r\n") == []
    assert not decoder.finished
    assert decoder.feed(b"0\r\n\r\n") == []
    assert decoder.finished
    assert decoder.rest() == [b"de"]


@pytest.mark.parametrize(
    "body, message",
    [
        (b"zz\r\nab\r\n", "not a chunk size line: b'zz'"),
        (b"-1\r\n", "not a chunk size line: b'-1'"),
        (b"0x2\r\nab\r\n", "not a chunk size line"),
        (b"2\r\nabXY", "a chunk's data is not followed by CRLF (got b'XY')"),
        (b"1" * 2000, "no chunk size line within 1024 bytes"),
    ],
)
def test_a_body_that_is_not_chunked_coding_is_an_error_that_says_where(body, message):
    with pytest.raises(ChunkError) as raised:
        ChunkedLines().feed(body)
    assert message in str(raised.value)


# -- the stream, over a real socket -------------------------------------------------------------

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENTS = [
    json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": f"p-{i}"}}}).encode() + b"\n" for i in range(4)
]


class WatchServer:
    """Answers one watch request with `pieces`, sent one at a time with a pause between
    (so the client reads them separately), then closes the connection or, with hold=True,
    keeps it open saying nothing."""

    def __init__(self, pieces: list[bytes], hold: bool = False) -> None:
        self._pieces = pieces
        self._hold = hold
        self.released = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection, connection.makefile("rb") as stream:
            read_request(stream)
            for piece in self._pieces:
                connection.sendall(piece)
                self.released.wait(0.02)
            if self._hold:
                self.released.wait(10)

    def client(self, watch_decoder: bool = True) -> KubeClient:
        configuration = Configuration()
        configuration.host = f"http://127.0.0.1:{self.port}"
        return KubeClient(configuration, pool_size=1, watch_decoder=watch_decoder)

    def close(self) -> None:
        self.released.set()
        self._listener.close()


@pytest.fixture
def watch_server():
    servers: list[WatchServer] = []

    def make(pieces: list[bytes], hold: bool = False) -> WatchServer:
        servers.append(WatchServer(pieces, hold))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def names(lines) -> list[str]:
    return [json.loads(line)["object"]["metadata"]["name"] for line in lines if line.strip()]


# Both ways of reading a watch keep one contract: our decoder, and urllib3's line
# iterator that KubeClient(watch_decoder=False) and bodies our decoder does not take use.
BOTH_READERS = pytest.mark.parametrize("watch_decoder", [True, False], ids=["our-decoder", "urllib3"])


@BOTH_READERS
def test_a_watch_split_anywhere_by_the_network_gives_every_event_once(watch_server, watch_decoder):
    body = HEAD + encode(EVENTS)
    server = watch_server(split_at(body, list(range(len(HEAD) + 3, len(body), 37))))
    with server.client(watch_decoder).stream("/api/v1/pods", {"watch": "1"}, read_timeout=5) as lines:
        assert names(lines) == ["p-0", "p-1", "p-2", "p-3"]


@BOTH_READERS
def test_a_watch_cut_mid_chunk_is_an_unanswered_request_after_the_events_it_delivered(watch_server, watch_decoder):
    whole = encode(EVENTS[:2])[: -len(b"0\r\n\r\n")]
    cut = whole + b"%x\r\n" % len(EVENTS[2]) + EVENTS[2][:10]
    server = watch_server([HEAD, cut])
    seen = []
    client = server.client(watch_decoder)
    with pytest.raises(ApiError) as raised, client.stream("/api/v1/pods", {}, read_timeout=5) as lines:
        for line in lines:
            seen.append(line)
    assert names(seen) == ["p-0", "p-1"]
    assert raised.value.status == 0
    if watch_decoder:
        assert "the connection closed before the watch's last chunk" in str(raised.value)


@pytest.mark.parametrize(
    ("watch_decoder", "reader_says"), [(True, "not a chunk size line"), (False, "InvalidChunkLength")]
)
def test_a_stream_that_is_not_chunked_coding_is_an_unanswered_request(watch_server, watch_decoder, reader_says):
    # The message also says which reader the client used: the choice is honoured.
    server = watch_server([HEAD + b"nonsense\r\n"])
    client = server.client(watch_decoder)
    with pytest.raises(ApiError) as raised, client.stream("/api/v1/pods", {}, read_timeout=5) as lines:
        list(lines)
    assert raised.value.status == 0
    assert reader_says in str(raised.value)


@BOTH_READERS
def test_interrupt_ends_a_quiet_watch_at_once_without_an_error(watch_server, watch_decoder):
    server = watch_server([HEAD + encode(EVENTS[:1])[: -len(b"0\r\n\r\n")]], hold=True)
    seen = []
    with server.client(watch_decoder).stream("/api/v1/pods", {}, read_timeout=30) as lines:
        for line in lines:
            seen.append(line)
            threading.Timer(0.1, lines.interrupt).start()
    assert names(seen) == ["p-0"]
    assert lines.interrupted
