"""The agent's cycle: read NVML, then GET the Node and PATCH it when it publishes something else.

NVML is read first so that a node without it never talks to the API server
at all, and a read that fails publishes nothing: an inventory published
before stays, since losing the library says nothing about the GPUs.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from kubernetes.config.config_exception import ConfigException

from ..kube.client import ApiError, KubeClient
from ..scheduling.inventory import Inventory, InventoryError
from .nvml import NvmlReadError, NvmlUnavailable
from .publish import MERGE_PATCH, node_update, summary

log = logging.getLogger("gpu_scheduler.agent")

# One GET and one PATCH of one Node: an API server that takes longer is not answering.
API_TIMEOUT_SECONDS = 10.0


class Outcome(enum.Enum):
    PUBLISHED = "published"
    UNCHANGED = "unchanged"
    NO_NVML = "no NVML"
    FAILED = "failed"  # tried again at the next cycle
    FATAL = "fatal"  # no cycle can succeed: the cluster configuration cannot be loaded


class Agent:
    """One node's publisher. `read` reads NVML (nvml.read_inventory); `connect` makes the
    API client, at the first cycle that needs one; `retry_seconds` is the interval the
    log promises a retry in (None with --once: there is no retry)."""

    def __init__(
        self,
        node_name: str,
        read: Callable[[], Inventory],
        connect: Callable[[], KubeClient],
        retry_seconds: float | None,
    ) -> None:
        self.node_name = node_name
        self._read = read
        self._connect = connect
        self._client: KubeClient | None = None
        self._retry_seconds = retry_seconds
        self._warned_no_nvml = False

    def cycle(self) -> Outcome:
        inventory = self._read_nvml()
        if not isinstance(inventory, Inventory):
            return inventory
        if self._client is None:
            try:
                self._client = self._connect()
            except (ConfigException, OSError, ValueError) as err:
                log.error("cannot load the cluster configuration: %s; pass --kubeconfig or set KUBECONFIG", err)
                return Outcome.FATAL
        path = f"/api/v1/nodes/{self.node_name}"
        try:
            node = self._client.call("GET", path, timeout=API_TIMEOUT_SECONDS)
            update = node_update(node, inventory)
            if update is None:
                log.debug("node %s already publishes %s: nothing to write", self.node_name, summary(inventory))
                return Outcome.UNCHANGED
            self._client.call("PATCH", path, body=update.patch, content_type=MERGE_PATCH, timeout=API_TIMEOUT_SECONDS)
        except ApiError as err:
            if err.status == 404 and err.method == "GET":
                log.error(
                    "node %s not found: --node-name (NODE_NAME) must be this node's name, "
                    "as the downward API's spec.nodeName gives it%s",
                    self.node_name,
                    self._retry_note(),
                )
            else:
                log.warning("%s%s", err, self._retry_note())
            return Outcome.FAILED
        log.info("node %s publishes %s (%s)", self.node_name, summary(inventory), "; ".join(update.changes))
        return Outcome.PUBLISHED

    def _read_nvml(self) -> Inventory | Outcome:
        """The inventory to publish, or the Outcome of a cycle that has none."""
        try:
            inventory = self._read()
        except NvmlUnavailable as err:
            self._no_nvml(err)
            return Outcome.NO_NVML
        except NvmlReadError as err:
            log.error("%s; nothing published%s", err, self._retry_note())
            return Outcome.FAILED
        if self._warned_no_nvml:
            log.info("NVML is available now on node %s", self.node_name)
            self._warned_no_nvml = False
        try:
            # What the scheduler could not read back must not reach the Node.
            Inventory.from_annotation(inventory.to_annotation(), f"the inventory NVML gave on node {self.node_name}")
        except InventoryError as err:
            log.error("%s; nothing published%s", err, self._retry_note())
            return Outcome.FAILED
        return inventory

    def _no_nvml(self, err: NvmlUnavailable) -> None:
        # Once per absence: a node without a driver would otherwise warn every interval.
        if self._warned_no_nvml:
            log.debug("NVML still not available: %s", err)
            return
        log.warning(
            "NVML is not available on node %s: %s; nothing is published, and an inventory published "
            "before is left as it is%s",
            self.node_name,
            err,
            self._retry_note(),
        )
        self._warned_no_nvml = True

    def _retry_note(self) -> str:
        return "" if self._retry_seconds is None else f"; trying again in {self._retry_seconds:g} s"

    def loop(self, stop: threading.Event, interval: float) -> int:
        """Cycles until `stop` is set (0), or until one cannot succeed (1)."""
        while True:
            if self.cycle() is Outcome.FATAL:
                return 1
            if stop.wait(interval):
                return 0
