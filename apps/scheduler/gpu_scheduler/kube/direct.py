"""Short requests to one apiserver over http.client, one kept-alive connection per thread.

The scheduler's hot path is two short requests per pod (its binding and its
Scheduled event), sent by a fixed set of worker threads to one host. Through
urllib3 each request also pays for its pool (a queue get and put, a liveness
check), its Retry bookkeeping and its response wrapper; http.client alone does
the same request for about 30% less CPU (`bench/client_cpu.py`). So each thread
keeps its own connection, and urllib3 stays for what needs it: watches (a
stream interrupted from another thread), proxies and unusual TLS settings
(KubeClient decides).

Failures are raised as the urllib3 errors urllib3 itself would raise, so one
retry policy (kube/client.py's _RETRIES) classifies both paths: no answer to a
connection attempt is a connect error (nothing was sent), a failure once the
request may have been sent is a read error, a TLS failure is neither.
"""

from __future__ import annotations

import http.client
import ssl
import threading

import urllib3
from urllib3.util.wait import wait_for_read


class _Connection(http.client.HTTPConnection):
    """A plain connection, or TLS with the context and server name it is given
    (http.client.HTTPSConnection cannot name a server other than the host it dials)."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, server_hostname: str) -> None:
        super().__init__(host, port)
        self._tls = context
        self._server_hostname = server_hostname

    def connect(self) -> None:
        super().connect()  # TCP, with TCP_NODELAY
        if self._tls is not None:
            self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_hostname)


class DirectTransport:
    """request() over this thread's connection to scheme://host:port."""

    def __init__(self, scheme: str, host: str, port: int, context: ssl.SSLContext | None, server_hostname: str) -> None:
        self._address = (host, port)
        self._context = context if scheme == "https" else None
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
        """Sends one request and reads its whole answer: (status, body)."""
        connection = self._connection(target, connect_timeout)
        try:
            connection.sock.settimeout(read_timeout)
            connection.request(method, target, body, headers)
            response = connection.getresponse()
            data = response.read()
        except TimeoutError as err:
            connection.close()
            raise urllib3.exceptions.ReadTimeoutError(None, target, f"no answer in {read_timeout:g} s") from err
        except (OSError, http.client.HTTPException) as err:
            # Sent, or maybe sent: the server may have acted on it.
            connection.close()
            raise urllib3.exceptions.ProtocolError("Connection aborted.", err) from err
        if response.will_close:
            connection.close()
        return response.status, data

    def _connection(self, target: str, connect_timeout: float) -> _Connection:
        """This thread's connection, open: a kept-alive one unless the server has closed
        it meanwhile (anything readable on an idle connection means it did), else a new one."""
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = _Connection(*self._address, self._context, self._server_hostname)
        elif connection.sock is not None and wait_for_read(connection.sock, timeout=0.0):
            connection.close()
        if connection.sock is None:
            connection.timeout = connect_timeout
            try:
                connection.connect()
            except ssl.SSLError as err:
                connection.close()
                raise urllib3.exceptions.SSLError(err) from err
            except TimeoutError as err:
                connection.close()
                raise urllib3.exceptions.ConnectTimeoutError(
                    None, f"{target}: no connection in {connect_timeout:g} s"
                ) from err
            except OSError as err:
                connection.close()
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
