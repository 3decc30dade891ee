"""Whether this replica may bind: the leader Lease, or no election at all.

With --leader-elect the replica binds while it holds the Lease: winning it
opens the workers' gate, losing it (it could not renew in time) closes the
gate at once and sets `lost`, on which the process exits so that its
Deployment restarts it as a standby. Without election it binds from the moment
it starts leading. Handing the Lease back at shutdown is the process's
(process.stop_binding), since it must wait for the bindings in flight first.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable

from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.leader import LeaderElector


class Leadership:
    def __init__(
        self, args: argparse.Namespace, client: KubeClient, identity: str, set_leading: Callable[[bool], None]
    ) -> None:
        self.lost = threading.Event()
        self._set_leading = set_leading
        self.elector: LeaderElector | None = None
        if args.leader_elect:
            self.elector = LeaderElector(
                client,
                namespace=args.leader_elect_resource_namespace,
                name=args.leader_elect_resource_name,
                identity=identity,
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period,
                on_started_leading=lambda: set_leading(True),
                on_stopped_leading=self._lose,
            )
        self.may_bind = self.elector.is_leader if self.elector else (lambda: True)

    def start(self) -> None:
        if self.elector is not None:
            self.elector.start()
        else:
            self._set_leading(True)

    def alive(self) -> bool:
        return self.elector is None or self.elector.alive()

    def _lose(self) -> None:
        self._set_leading(False)
        self.lost.set()
