"""kube-scheduler's NodePorts filter, on plain data: a container's hostPort may be taken on a
node by one pod at a time.

A host port is (protocol, host IP, port), as kube-scheduler's HostPortInfo keeps it: an empty
protocol is TCP and an empty host IP is 0.0.0.0. Two ports conflict when protocol and port are
equal and either IP is 0.0.0.0 or both are the same IP. The ports a pod takes are those of its
containers and of its sidecars (init containers with restartPolicy Always, which run for the
pod's whole life); other init containers have ended before the containers start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

NODE_PORTS = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
ALL_IPS = "0.0.0.0"

# (protocol, host IP, port), sanitized as kube-scheduler sanitizes them
HostPort = tuple[str, str, int]


def _port_number(value: object) -> int:
    # The API server validates ports (1-65535); anything else is read as no host port.
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if 0 < value < 65536 else 0


def host_ports(spec: Mapping) -> tuple[HostPort, ...]:
    """The host ports the pod's containers and sidecars take, sanitized; () for most pods."""
    containers = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
    sidecars = [c for c in containers if c.get("restartPolicy") == "Always"]
    ports: list[HostPort] = []
    for container in (*sidecars, *(c for c in spec.get("containers") or () if isinstance(c, Mapping))):
        for port in container.get("ports") or ():
            if not isinstance(port, Mapping):
                continue
            number = _port_number(port.get("hostPort"))
            if number:
                ports.append((str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ALL_IPS), number))
    return tuple(ports)


class UsedPorts:
    """The host ports the pods on one node take: (protocol, port) -> how many pods take it on
    each host IP. Counted, so that two pods given one port (bound by another scheduler, say)
    free it only when both are gone."""

    __slots__ = ("_by_port",)

    def __init__(self) -> None:
        self._by_port: dict[tuple[str, int], Counter[str]] = {}

    def add(self, ports: Iterable[HostPort]) -> None:
        for protocol, ip, port in ports:
            self._by_port.setdefault((protocol, port), Counter())[ip] += 1

    def remove(self, ports: Iterable[HostPort]) -> None:
        for protocol, ip, port in ports:
            ips = self._by_port.get((protocol, port))
            if ips is None:
                continue
            ips[ip] -= 1
            if ips[ip] <= 0:
                del ips[ip]
            if not ips:
                del self._by_port[(protocol, port)]

    def conflicts(self, wanted: Iterable[HostPort]) -> bool:
        """Whether any wanted port is taken (kube-scheduler's HostPortInfo.CheckConflict)."""
        for protocol, ip, port in wanted:
            ips = self._by_port.get((protocol, port))
            if not ips:
                continue
            if ip == ALL_IPS or ALL_IPS in ips or ip in ips:
                return True
        return False

    def empty(self) -> bool:
        return not self._by_port


EMPTY_PORTS = UsedPorts()
