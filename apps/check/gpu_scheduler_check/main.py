"""gpu-scheduler-check: log the node, CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER this pod got.

One line per tick on stdout, e.g.

    2025-01-01T12:00:00.000Z pod=train-2 node=node3 CUDA_VISIBLE_DEVICES=0,1,2 CUDA_DEVICE_ORDER=PCI_BUS_ID match=true

On a GPU node with NVML (the `nvml` extra) the line ends with the GPUs NVML
shows the container, in nvidia-smi's order (index:name:uuid@PCI bus id):
what the map's ordinals refer to, whatever CUDA_VISIBLE_DEVICES says; and
`meant=true` when every device of CUDA_VISIBLE_DEVICES (an ordinal, a GPU or a
MIG UUID) is among them, else `meant=false` and the devices that are not.

Diagnostics that are not ticks (NVML missing, a bad EXPECTED_PLACEMENT) go to
stderr, so `--once` prints exactly one line on stdout for report generators.

With `--state-dir DIR` (the chart's persistence: the pod's own volume) it counts its
starts in DIR/starts and says, once at start on stderr,

    2025-01-01T12:00:05.000Z volume /data: start 2 (1 before this one, written by node3)

so that a pod that came back shows whether its volume kept what it wrote.

Environment (set from the downward API in the pod spec):
  NODE_NAME           spec.nodeName; the hostname when unset
  POD_NAME            metadata.name; printed when set
  EXPECTED_PLACEMENT  metadata.annotations['gpu-scheduler/placement'], the JSON
                      the webhook recorded: {"index", "node", "cudaVisibleDevices"}
  NODE_ALIAS          the node's gpu-node-name label, if you set it yourself: the
                      downward API cannot read node labels, and the map may name a
                      node by that alias rather than by its name
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

UNSET = "<unset>"

log = logging.getLogger("gpu_scheduler_check")


@dataclass(frozen=True)
class Expected:
    index: object
    node: str
    devices: str


@dataclass(frozen=True)
class Observed:
    pod: str | None
    node: str
    node_alias: str | None
    devices: str | None
    device_order: str | None = None


def parse_expected(text: str) -> Expected:
    """Parse the placement annotation JSON; ValueError or TypeError says what is wrong."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ValueError(f"EXPECTED_PLACEMENT is not JSON ({err})") from None
    if not isinstance(value, dict):
        raise TypeError("EXPECTED_PLACEMENT must be a JSON object")
    node, devices = value.get("node"), value.get("cudaVisibleDevices")
    if not isinstance(node, str) or not isinstance(devices, str):
        raise TypeError(f'EXPECTED_PLACEMENT needs string fields "node" and "cudaVisibleDevices", got {text!r}')
    return Expected(index=value.get("index"), node=node, devices=devices)


def compare(observed: Observed, expected: Expected) -> str:
    """The `match=...` part of a tick line.

    Devices are always compared. The node is compared against the node name and
    NODE_ALIAS; a differing name without NODE_ALIAS cannot be judged, because the
    map may use a gpu-node-name alias, so that case says so instead of guessing.
    """
    wanted = f"expected node={expected.node} devices={expected.devices}"
    if observed.devices != expected.devices:
        return f"match=false {wanted}"
    if expected.node in (observed.node, observed.node_alias):
        return "match=true"
    if observed.node_alias is None:
        return (
            f"match=unknown {wanted} (devices match; node not compared: "
            f"{expected.node} may be a gpu-node-name alias, set NODE_ALIAS to compare)"
        )
    return f"match=false {wanted}"


def tick_line(observed: Observed, expected: Expected | None, gpus: list[Gpu] | None) -> str:
    parts = []
    if observed.pod:
        parts.append(f"pod={observed.pod}")
    if expected is not None:
        parts.append(f"index={expected.index}")
    parts.append(f"node={observed.node}")
    parts.append(f"CUDA_VISIBLE_DEVICES={UNSET if observed.devices is None else observed.devices}")
    parts.append(f"CUDA_DEVICE_ORDER={UNSET if observed.device_order is None else observed.device_order}")
    if expected is not None:
        parts.append(compare(observed, expected))
    if gpus is not None:
        parts.append(f"gpus={describe_gpus(gpus)}")
        if observed.devices is not None:
            missing = not_meant(observed.devices, gpus)
            parts.append(f"meant=false not_visible={','.join(missing)}" if missing else "meant=true")
    return " ".join(parts)


def observe(environ) -> Observed:
    return Observed(
        pod=environ.get("POD_NAME") or None,
        node=environ.get("NODE_NAME") or socket.gethostname(),
        node_alias=environ.get("NODE_ALIAS") or None,
        devices=environ.get("CUDA_VISIBLE_DEVICES"),
        device_order=environ.get("CUDA_DEVICE_ORDER"),
    )


def _text(value) -> str:
    # nvidia-ml-py returns bytes or str depending on its version.
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuLister:
    """Lists the GPUs NVML shows this container, or tells once why it can't.

    NVML ignores CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (only CUDA applies
    them) and numbers GPUs as nvidia-smi does, by PCI bus: the numbering the
    map's ordinals use. With the NVIDIA runtime, a container sees the GPUs of
    NVIDIA_VISIBLE_DEVICES or of its device-plugin request, renumbered from 0,
    which this list shows as it is (docs/gpus.md)."""

    def __init__(self):
        self._nvml = None
        try:
            import pynvml
        except ImportError as err:
            log.warning("NVML not available: GPU list skipped (%s)", err)
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:  # no driver or no GPU in this container
            log.warning("NVML not available: GPU list skipped (%s)", err)
            return
        self._nvml = pynvml

    def list(self) -> list[Gpu] | None:
        """The GPUs NVML shows, in its order; None without NVML."""
        if self._nvml is None:
            return None
        nvml = self._nvml
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name, uuid = _text(nvml.nvmlDeviceGetName(handle)), _text(nvml.nvmlDeviceGetUUID(handle))
            bus = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            gpus.append(Gpu(i, name, uuid, bus, tuple(self._mig_uuids(handle))))
        return gpus

    def _mig_uuids(self, handle) -> list[str]:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            if current != 1:
                return []
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        except (nvml.NVMLError, AttributeError):  # no MIG on this GPU, or an nvidia-ml-py without it
            return []
        uuids = []
        for slot in range(slots):
            try:
                uuids.append(_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))))
            except nvml.NVMLError:  # an empty slot
                continue
        return uuids


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    bus_id: str
    mig_uuids: tuple[str, ...] = ()


def describe_gpus(gpus: list[Gpu]) -> str:
    return ",".join(f"{g.index}:{g.name}:{g.uuid}@{g.bus_id}" for g in gpus) or "none"


def not_meant(devices: str | None, gpus: list[Gpu]) -> list[str]:
    """The devices of CUDA_VISIBLE_DEVICES that are none of the GPUs (or their MIG devices)
    NVML shows: an ordinal beyond them, or a UUID of a device this container does not have."""
    if not devices:
        return []
    uuids = {g.uuid.lower() for g in gpus} | {m.lower() for g in gpus for m in g.mig_uuids}
    missing = []
    for device in (d.strip() for d in devices.split(",")):
        if device.isdigit():
            if int(device) >= len(gpus):
                missing.append(device)
        elif device.lower() not in uuids:
            missing.append(device)
    return missing


STARTS_FILE = "starts"


def count_start(state_dir: str, node: str) -> tuple[int, str | None]:
    """Adds this start to the count in `state_dir`/starts ("<count> <node>"); returns the new
    count and the node that wrote the previous one (None on the volume's first start). The
    count is written beside and renamed, so a pod killed mid-write keeps the previous one."""
    path = os.path.join(state_dir, STARTS_FILE)
    before, by = 0, None
    try:
        with open(path, encoding="utf-8") as f:
            count, _, by = f.read().strip().partition(" ")
        before = int(count)
    except FileNotFoundError:
        pass
    except ValueError as err:
        raise ValueError(f"{path} does not hold a count of starts: {err}") from None
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{before + 1} {node}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return before + 1, by or None


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="gpu-scheduler-check",
        description="Log this pod's node, CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, and whether "
        "they match the placement the gpu-scheduler webhook recorded.",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help="seconds between log lines (default 10)",
    )
    parser.add_argument("--once", action="store_true", help="print one line and exit")
    parser.add_argument(
        "--state-dir",
        help="a directory that outlives the container (the pod's volume): count this start there and log it",
    )
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval must be positive, got {args.interval}")
    return args


def setup_logging() -> logging.Logger:
    """Ticks go to stdout with a UTC timestamp; diagnostics go to stderr."""
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(message)s", "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    ticks = logging.getLogger("gpu_scheduler_check.ticks")
    ticks.propagate = False
    out = logging.StreamHandler(sys.stdout)
    out.setFormatter(formatter)
    ticks.addHandler(out)
    ticks.setLevel(logging.INFO)
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(formatter)
    log.addHandler(err)
    log.setLevel(logging.INFO)
    return ticks


def main(argv=None) -> int:
    args = parse_args(argv)
    ticks = setup_logging()

    # Block the stop signals and wait for them with sigtimedwait: the wait ends
    # the moment one arrives (exit 0 at once), one that arrives mid-tick stays
    # pending for the next wait, and no handler runs at an arbitrary point (a
    # handler calling Event.set can deadlock on the lock Event.wait holds).
    # Blocked signals are delivered even to PID 1, which ignores default ones.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)

    expected = None
    if os.environ.get("EXPECTED_PLACEMENT"):
        try:
            expected = parse_expected(os.environ["EXPECTED_PLACEMENT"])
        except (ValueError, TypeError) as err:
            log.warning("%s; match not checked", err)
    gpus = GpuLister()
    if args.state_dir:
        try:
            count, by = count_start(args.state_dir, observe(os.environ).node)
        except (OSError, ValueError) as err:
            log.warning("volume %s: this start not counted (%s)", args.state_dir, err)
        else:
            before = f"{count - 1} before this one, written by {by}" if by else "the first on this volume"
            log.info("volume %s: start %d (%s)", args.state_dir, count, before)

    while True:
        ticks.info(tick_line(observe(os.environ), expected, gpus.list()))
        if args.once or signal.sigtimedwait(stop_signals, args.interval) is not None:
            return 0


if __name__ == "__main__":
    sys.exit(main())
