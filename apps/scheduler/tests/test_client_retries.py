"""Which requests the API client sends again, against a real HTTP server on a local socket.

A request that may have reached the apiserver is sent again only if doing it twice does what
doing it once does: a POST of a binding whose answer was lost may have been stored, and the
scheduler must learn that it does not know (issue 16, point 4).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import urllib3
from gpu_scheduler.kube.client import ApiError, KubeClient
from kubernetes.client import Configuration


class UnansweringServer:
    """Reads each HTTP request whole, counts it, and answers nothing: it closes the
    connection at once (hang_up) or holds it open until the test ends."""

    def __init__(self, *, hang_up: bool) -> None:
        self.requests: list[str] = []
        self._hang_up = hang_up
        self._held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._read_requests, args=(connection,), daemon=True).start()

    def _read_requests(self, connection: socket.socket) -> None:
        with connection.makefile("rb") as stream:
            request_line = stream.readline().decode()
            if not request_line:
                return
            length = 0
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            stream.read(length)
        self.requests.append(request_line.split(" ")[0])
        if self._hang_up:
            connection.close()
        else:
            self._held.append(connection)

    def close(self) -> None:
        self._listener.close()
        for connection in self._held:
            connection.close()


def client_of(server: UnansweringServer) -> KubeClient:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    return KubeClient(configuration, pool_size=2)


@pytest.fixture
def hanging_up():
    server = UnansweringServer(hang_up=True)
    yield server
    server.close()


@pytest.fixture
def silent():
    server = UnansweringServer(hang_up=False)
    yield server
    server.close()


def test_a_post_whose_connection_breaks_after_sending_is_sent_once(hanging_up):
    # Before the fix: sent 3 times (urllib3 retried reads of every method).
    with pytest.raises(ApiError) as raised:
        client_of(hanging_up).request("POST", "/api/v1/namespaces/ml/pods/a-0/binding", body={"kind": "Binding"})
    assert raised.value.status == 0
    assert hanging_up.requests == ["POST"]


def test_a_patch_whose_connection_breaks_after_sending_is_sent_once(hanging_up):
    with pytest.raises(ApiError):
        client_of(hanging_up).request("PATCH", "/api/v1/namespaces/ml/pods/a-0/status", body={})
    assert hanging_up.requests == ["PATCH"]


def test_a_get_whose_connection_breaks_is_tried_again(hanging_up):
    with pytest.raises(ApiError):
        client_of(hanging_up).request("GET", "/api/v1/pods")
    assert hanging_up.requests == ["GET", "GET", "GET"]  # the first try and two read retries


def test_a_post_unanswered_in_time_is_sent_once_and_given_up_at_its_timeout(silent):
    started = time.monotonic()
    with pytest.raises(ApiError) as raised:
        client_of(silent).request("POST", "/api/v1/namespaces/ml/pods/a-0/binding", body={}, timeout=0.5)
    assert raised.value.status == 0
    assert silent.requests == ["POST"]
    assert time.monotonic() - started < 1.2


def test_the_timeout_bounds_the_whole_request_retries_included(silent):
    # The SIGTERM drain and the leader lease rely on a bind ending within its timeout. Before,
    # each retry got the whole timeout again: a GET here took 3 x 0.5 s.
    started = time.monotonic()
    with pytest.raises(ApiError):
        client_of(silent).request("GET", "/api/v1/pods", timeout=0.5)
    assert time.monotonic() - started < 1.2


def test_a_connection_that_could_not_be_opened_is_tried_again_whatever_the_method():
    # Nothing was sent, so even a POST may go again (a refused or timed-out connect).
    from gpu_scheduler.kube.client import _RETRIES

    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")
    assert _RETRIES.increment("POST", "/binding", error=refused).connect == _RETRIES.connect - 1
    broken = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
    with pytest.raises(urllib3.exceptions.ProtocolError):
        _RETRIES.increment("POST", "/binding", error=broken)
    assert _RETRIES.increment("GET", "/pods", error=broken).read == _RETRIES.read - 1
