"""CPU per pod as work done, not as time passed.

CPU counted from "runner ready" to "last bind seen" measures the run's length
as much as its work: every process idles at some rate (the control plane at
up to half a core on this machine), so a slower run is charged more idle CPU,
and the work that follows the last bind (kwok marking the pods Running, the
watches fanning those updates out) is left out. So each run's CPU is counted
this way, for each group of processes (the runner, the webhook, the control
plane; each a pid and its descendants):

1. idle rate: the group's CPU over IDLE_SECONDS just before the run, in cores
   (0 for a group not running yet, as the runner of a drain before launch);
2. the window opens just before the first pod is created (or the runner is
   launched, for a drain) and closes when the groups have settled after the
   last bind: the first SETTLE_WINDOW_SECONDS after it in which all of them
   together use no more than their idle rates plus SETTLE_MARGIN_CORES, or
   after SETTLE_TIMEOUT_SECONDS (then "settled" is false);
3. the figure is the window's CPU minus idle rate x window length, per group.

The idle rates subtracted, the raw CPU, the window and how long settling took
go into the run's figures with it, so the report can show what was taken off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .processes import CpuMeter

IDLE_SECONDS = 2.0
SETTLE_WINDOW_SECONDS = 1.0
SETTLE_MARGIN_CORES = 0.1
SETTLE_TIMEOUT_SECONDS = 20.0
# `make bench-scale` (10,000 pods on 5,000 nodes): Settings.idle_s and Settings.settle_timeout_s. There
# the control plane stays at both cores for about 37 s after the last bind (kwok marking the pods
# Running), then drops to its rate at rest (0.27-0.31 cores, in bursts: the nodes' leases).
SCALE_IDLE_SECONDS = 10.0
SCALE_SETTLE_TIMEOUT_SECONDS = 120.0


class WorkMeter:
    def __init__(
        self,
        new_meter: Callable[[dict[str, list[int]]], CpuMeter] = CpuMeter,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        idle_seconds: float = IDLE_SECONDS,
        window: float = SETTLE_WINDOW_SECONDS,
        margin: float = SETTLE_MARGIN_CORES,
        timeout: float = SETTLE_TIMEOUT_SECONDS,
    ) -> None:
        self._new_meter, self._clock, self._sleep = new_meter, clock, sleep
        self._idle_seconds, self._window, self._margin, self._timeout = idle_seconds, window, margin, timeout
        self.idle_cores: dict[str, float] = {}
        self._meter: CpuMeter | None = None
        self._started = 0.0

    def measure_idle(self, groups: dict[str, list[int]]) -> None:
        """The groups' CPU rate, in cores, over the next idle_seconds (nothing else must start meanwhile)."""
        meter, started = self._new_meter(groups), self._clock()
        self._sleep(self._idle_seconds)
        used, elapsed = meter.used(), self._clock() - started
        self.idle_cores.update({group: used[group] / elapsed for group in groups})

    def start(self, groups: dict[str, list[int]]) -> None:
        """Opens the window (just before the first pod is created, or the runner launched)."""
        self._meter, self._started = self._new_meter(groups), self._clock()

    def finish(self) -> dict:
        """Waits until the groups have settled, closes the window; the run's CPU figures."""
        used = self._meter.used()
        idle = {group: self.idle_cores.get(group, 0.0) for group in used}
        quiet = sum(idle.values()) + self._margin
        last_at = settle_started = self._clock()
        settled = False
        trace = []  # the groups' rate in each settle window, in cores: how the work ebbed
        while last_at - settle_started < self._timeout and not any(math.isnan(v) for v in used.values()):
            self._sleep(self._window)
            now_used, now = self._meter.used(), self._clock()
            cores = (sum(now_used.values()) - sum(used.values())) / (now - last_at)
            used, last_at = now_used, now
            trace.append(round(cores, 3))
            if cores <= quiet and not any(math.isnan(v) for v in used.values()):
                settled = True
                break
        window = last_at - self._started
        return {
            "cpu_s": {group: round(used[group] - idle[group] * window, 3) for group in used},
            "cpu_raw_s": used,
            "idle_cores": {group: round(cores, 4) for group, cores in idle.items()},
            "cpu_window_s": round(window, 2),
            "settle_s": round(last_at - settle_started, 2),
            "settled": settled,
            "settle_timeout_s": self._timeout,
            "settle_trace_cores": trace,
            "idle_s": self._idle_seconds,
            "processes_gone": self._meter.gone(),
        }
