"""How the API client uses its connections (kube/direct.py), against a real HTTP server on a
local socket: one kept-alive connection per thread, and a connection the server has closed
while idle is never used for a request that must not be sent twice."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from gpu_scheduler.kube.client import ApiError, KubeClient
from kubernetes.client import Configuration

ANSWER = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class AnsweringServer:
    """Answers every request with 200 and a small JSON body; records (connection number,
    method) of each request. close_after_answer: closes each connection once it has
    answered, as a server whose idle timeout has passed does."""

    def __init__(self, *, close_after_answer: bool = False) -> None:
        self.requests: list[tuple[int, str]] = []
        self.connections = 0
        self._close_after_answer = close_after_answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._answer, args=(connection, self.connections), daemon=True).start()

    def _answer(self, connection: socket.socket, number: int) -> None:
        with connection, connection.makefile("rb") as stream:
            while request_line := stream.readline().decode():
                length = 0
                while (line := stream.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                stream.read(length)
                self.requests.append((number, request_line.split(" ")[0]))
                connection.sendall(ANSWER)
                if self._close_after_answer:
                    return

    def close(self) -> None:
        self._listener.close()


def client_of(server: AnsweringServer) -> KubeClient:
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{server.port}"
    return KubeClient(configuration, pool_size=2)


@pytest.fixture
def server():
    running = AnsweringServer()
    yield running
    running.close()


@pytest.fixture
def closing_server():
    running = AnsweringServer(close_after_answer=True)
    yield running
    running.close()


def test_a_thread_sends_its_requests_over_one_kept_alive_connection(server):
    client = client_of(server)
    for _ in range(5):
        assert client.call("POST", "/api/v1/namespaces/ml/events", body={"kind": "Event"}) == {"ok": True}
    assert server.requests == [(1, "POST")] * 5
    assert server.connections == 1


def test_each_thread_has_its_own_connection(server):
    client = client_of(server)
    barrier = threading.Barrier(4)

    def send_two() -> None:
        barrier.wait()
        for _ in range(2):
            client.call("GET", "/api/v1/nodes")

    threads = [threading.Thread(target=send_two) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert server.connections == 4
    assert sorted(server.requests) == sorted((n, "GET") for n in range(1, 5) for _ in range(2))


def test_a_connection_the_server_closed_while_idle_is_not_used_for_a_post(closing_server):
    # The POST must go out once, on a new connection, and be answered: had it been written to
    # the closed one, it would have failed as "maybe stored" and never been sent again.
    client = client_of(closing_server)
    assert client.call("GET", "/api/v1/nodes") == {"ok": True}
    time.sleep(0.2)  # the server's FIN arrives
    assert client.call("POST", "/api/v1/namespaces/ml/pods/a-0/binding", body={}) == {"ok": True}
    assert closing_server.requests == [(1, "GET"), (2, "POST")]


def test_a_refused_connection_is_an_error_naming_the_request():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    configuration = Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    with pytest.raises(ApiError) as raised:
        KubeClient(configuration).request("POST", "/api/v1/namespaces/ml/pods/a-0/binding", body={}, timeout=5)
    assert raised.value.status == 0
    assert "/api/v1/namespaces/ml/pods/a-0/binding" in str(raised.value)
    assert "refused" in str(raised.value).lower()
