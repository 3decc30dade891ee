"""The grammar of the gpu-scheduling-map annotation.

    <index>=<node>:<devices>      one entry per line: the node and devices the pod gets
    <index>=<node>:<devices>|*[<selector>]  ... or, once its node is gone or NotReady for
                                  the scheduler's --failover-after-seconds, as many GPUs on a
                                  node the selector admits (opt-in failover)
    <index>=*[<selector>]:gpus=<n> n GPUs the scheduler chooses (placement.requests)
    *=*[<selector>]:gpus=<n>      the same for every pod without a line of its own
    # comment                     full-line comments and blank lines are ignored

Parsing is strict: every line is either ignored on purpose (blank, comment) or
becomes an entry, and every violation is reported with its line number. Errors
are collected over the whole text so that one round trip fixes them all.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from .errors import (
    DuplicateDeviceError,
    DuplicateIndexError,
    EmptyMapError,
    InvalidDeviceError,
    InvalidIndexError,
    InvalidMapError,
    InvalidNodeError,
    MalformedEntryError,
    MapLineError,
    MapTooLargeError,
    MigDeviceError,
    MixedSpellingError,
    quote,
)
from .numbers import MAX_DEVICE_ORDINAL, MAX_INDEX, bounded_int, shown
from .requests import ANY_INDEX, GpuRequest, is_request, parse_request

# Kubernetes refuses more than 256 KiB of annotations on one object, so no
# valid map is larger; the webhook sees a pod before that check and must not
# spend seconds and megabytes on a 3 MiB one.
MAX_MAP_BYTES = 256 * 1024
# Errors kept with their text; past this they are only counted.
MAX_ERRORS_KEPT = 100
MAX_NODE_NAME = 253
MAX_LABEL_VALUE = 63
# The whitespace a line and its fields are stripped of: Unicode's White_Space,
# as Go's strings.TrimSpace has it, which is what CEL's trim() strips in the
# admission policy (charts/gpu-scheduler/templates/_placement-cel.tpl). Python's
# own str.strip() also strips \x1c-\x1f, which would make "\x1c0=node1:0" a
# valid line here and an invalid one there.
SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)

_INDEX = re.compile(r"[0-9]+")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DEVICE_ORDINAL = re.compile(r"[0-9]+")
_UUID = r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
# GPU-<uuid>; MIG-<uuid> (R470+) or the older MIG-GPU-<uuid>/<gi>/<ci>.
_DEVICE_UUID = re.compile(rf"GPU-{_UUID}|MIG-{_UUID}|MIG-GPU-{_UUID}/[0-9]+/[0-9]+")


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One line of the map: the pod with `index` goes to `node` with `devices`."""

    index: int
    node: str
    devices: tuple[str, ...]
    line: int
    # Where the pod may go instead once its node is gone or NotReady long enough: as many GPUs
    # on a node this request admits (`|*[<selector>]` after the devices); None: it waits.
    fallback: GpuRequest | None = None

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(self.devices)


class SchedulingMap(Mapping[int, MapEntry]):
    """A parsed, valid map: pod index -> entry. Immutable, so it can be shared.

    It keeps each entry as a row of plain values, (node, devices joined by commas,
    line), and makes the MapEntry when it is asked for: a pod needs its own line of
    a map of hundreds, and tuples of strings and ints are invisible to the garbage
    collector, which walks every MapEntry a cache holds in each full collection.
    """

    __slots__ = ("_rows", "fallbacks", "requests")

    def __init__(
        self, rows: dict[int, tuple[str, str, int]], requests: Mapping[int | None, GpuRequest] | None = None
    ) -> None:
        self._rows = rows
        # The lines that leave node and devices to the scheduler, by index (None: `*`, the line
        # of every pod without one of its own). Not among the Mapping's entries, which are
        # the pinned lines.
        self.requests: Mapping[int | None, GpuRequest] = requests or {}
        # The fallbacks of pinned lines that have one, by index (few maps have any).
        self.fallbacks: dict[int, GpuRequest] = {}

    @classmethod
    def of(cls, entries: Iterable[MapEntry], requests: Iterable[GpuRequest] = ()) -> SchedulingMap:
        entries = list(entries)
        parsed = cls({e.index: (e.node, ",".join(e.devices), e.line) for e in entries}, {r.index: r for r in requests})
        parsed.fallbacks = {e.index: e.fallback for e in entries if e.fallback is not None}
        return parsed

    def line_for(self, index: int | None) -> MapEntry | GpuRequest | None:
        """The line that places the pod of this index (None: a pod without one): its own
        pinned line or request, else the map's `*` line, else None."""
        if index is not None:
            row = self._rows.get(index)
            if row is not None:
                return self[index]
            request = self.requests.get(index)
            if request is not None:
                return request
        return self.requests.get(None)

    def __getitem__(self, index: int) -> MapEntry:
        node, devices, line = self._rows[index]
        fallback = self.fallbacks.get(index) if self.fallbacks else None
        return MapEntry(index, node, tuple(devices.split(",")), line, fallback)

    def __contains__(self, index: object) -> bool:
        return index in self._rows

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return f"SchedulingMap({list(self.values())!r}, {list(self.requests.values())!r})"

    def to_json(self) -> dict[str, dict[str, object]]:
        """The map as `gpu-scheduler map validate` prints it."""
        pinned: dict[str, dict[str, object]] = {
            str(e.index): {
                "node": e.node,
                "devices": list(e.devices),
                "cuda_visible_devices": e.cuda_visible_devices,
                **({"fallback_node_selector": e.fallback.selector_text} if e.fallback else {}),
            }
            for e in self.values()
        }
        for request in self.requests.values():
            key = ANY_INDEX if request.index is None else str(request.index)
            pinned[key] = {"node": "*", "node_selector": request.selector_text, "gpus": request.count}
        return pinned


def _parse_index(line: int, text: str, token: str) -> int:
    if not _INDEX.fullmatch(token):
        raise InvalidIndexError(line, text, f"index {quote(token)} in {quote(text)} is not a non-negative integer")
    index = bounded_int(token, MAX_INDEX)
    if index is None:
        raise InvalidIndexError(line, text, f"index {shown(token)} in {quote(text)} is larger than {MAX_INDEX}")
    return index


def is_node_reference(token: str) -> bool:
    """A node name (DNS-1123 subdomain) or an alias (a label value)."""
    if len(token) <= MAX_NODE_NAME and _DNS1123_SUBDOMAIN.fullmatch(token):
        return True
    return may_be_alias(token)


def may_be_alias(token: str) -> bool:
    """Whether a map's node could be an alias, a label value; if not, it can only be a node's name."""
    return len(token) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.fullmatch(token))


def _parse_node(line: int, text: str, token: str) -> str:
    if not token:
        raise InvalidNodeError(line, text, f"missing node name before ':' in {quote(text)}")
    if not is_node_reference(token):
        raise InvalidNodeError(
            line,
            text,
            f"node {quote(token)} in {quote(text)} is neither a Kubernetes node name "
            f"(lowercase DNS-1123 subdomain, at most {MAX_NODE_NAME} characters) "
            f"nor an alias label value (at most {MAX_LABEL_VALUE} characters)",
        )
    return token


# How a device is written. Without an inventory of a node's GPUs nothing here
# can tell whether GPU 0, a GPU-<uuid> and a MIG-<uuid> name the same GPU (or
# MIG-<uuid> and MIG-GPU-<uuid>/1/0 the same MIG device), so devices are only
# ever compared with devices written the same way.
ORDINAL = "ordinal"
GPU_UUID = "GPU UUID"
MIG_UUID = "MIG UUID"
MIG_INSTANCE = "MIG-GPU-<uuid>/<gi>/<ci>"  # MIG devices as drivers before R470 name them


def device_spelling(device: str) -> str:
    """ORDINAL, GPU_UUID, MIG_UUID or MIG_INSTANCE: how a device (a valid token, or its
    identity) is written."""
    prefix = device[:8].upper()
    if prefix == "MIG-GPU-":
        return MIG_INSTANCE
    if prefix.startswith("MIG-"):
        return MIG_UUID
    if prefix.startswith("GPU-"):
        return GPU_UUID
    return ORDINAL


def is_device(token: str) -> bool:
    """Whether the map would accept `token` as a device: an ordinal CUDA can take, or a
    GPU-/MIG- UUID. For devices read from elsewhere (a container's environment)."""
    if _DEVICE_ORDINAL.fullmatch(token):
        return bounded_int(token, MAX_DEVICE_ORDINAL) is not None
    return bool(_DEVICE_UUID.fullmatch(token))


def device_identity(device: str) -> str:
    """The device a valid token names, in one spelling: "01" and "1" are GPU 1,
    and a UUID is the same in any letter case. Compare devices by this, never
    by the token as written. (String arithmetic, not int(): a token may have
    thousands of digits.)"""
    if _DEVICE_ORDINAL.fullmatch(device):
        return device.lstrip("0") or "0"
    return device.lower()


def _parse_devices(line: int, text: str, token: str) -> tuple[str, ...]:
    if not token.strip(SPACE):
        raise InvalidDeviceError(line, text, f"no devices after ':' in {quote(text)}")
    devices: list[str] = []
    seen: set[str] = set()
    for raw in token.split(","):
        device = raw.strip(SPACE)
        if not device:
            raise InvalidDeviceError(line, text, f"empty device in {quote(text)} (stray comma?)")
        if _DEVICE_ORDINAL.fullmatch(device):
            if bounded_int(device, MAX_DEVICE_ORDINAL) is None:
                raise InvalidDeviceError(
                    line,
                    text,
                    f"device {shown(device)} in {quote(text)} is larger than {MAX_DEVICE_ORDINAL}, "
                    "the largest CUDA device ordinal",
                )
            identity = device_identity(device)
        elif _DEVICE_UUID.fullmatch(device):
            identity = device_identity(device)
        else:
            raise InvalidDeviceError(
                line,
                text,
                f"device {quote(device)} in {quote(text)} is neither a non-negative integer "
                "nor a GPU-<uuid> / MIG-<uuid> identifier",
            )
        if identity in seen:
            raise DuplicateDeviceError(line, text, f"device {device} appears twice in {quote(text)}")
        seen.add(identity)
        devices.append(device)
    _check_mig(line, text, devices)
    _check_one_spelling(line, text, devices)
    return tuple(devices)


def _check_one_spelling(line: int, text: str, devices: list[str]) -> None:
    """GPU 0 and GPU-<uuid> may be one GPU, and nothing here can tell: a line that
    mixes the two may give its pod one GPU twice, and the scheduler's ledger could
    not compare it with other pods' devices. (A MIG device stands alone on its
    line: _check_mig.)"""
    ordinals = [device for device in devices if device_spelling(device) == ORDINAL]
    uuids = [device for device in devices if device_spelling(device) == GPU_UUID]
    if ordinals and uuids:
        raise MixedSpellingError(
            line,
            text,
            f"{quote(text)} names GPU {ordinals[0]} by its ordinal and {uuids[0]} by its UUID, which may be "
            "one GPU twice (nothing here knows a node's GPUs); write every device of a line the same way "
            "(all ordinals or all UUIDs)",
        )


def _check_mig(line: int, text: str, devices: list[str]) -> None:
    """One CUDA process enumerates a single MIG device and nothing beside it
    (NVIDIA's MIG user guide, "CUDA device enumeration"): a line that gives a
    pod more would promise devices the pod cannot use."""
    migs = [device for device in devices if device.startswith("MIG-")]
    if len(migs) > 1:
        raise MigDeviceError(
            line,
            text,
            f"{quote(text)} lists {len(migs)} MIG devices; one CUDA process sees at most one MIG device, "
            "so give each pod a single MIG device",
        )
    if migs and len(devices) > 1:
        raise MigDeviceError(
            line,
            text,
            f"{quote(text)} puts MIG device {migs[0]} beside whole GPUs; one CUDA process sees at most one "
            "MIG device and no GPU beside it, so give the pod either that MIG device alone or whole GPUs",
        )


def _parse_line(line: int, text: str) -> MapEntry | GpuRequest:
    index_part, eq, rest = text.partition("=")
    if not eq:
        raise MalformedEntryError(line, text, f"expected <index>=<node>:<devices>, got {quote(text)} (no '=')")
    node_part, colon, devices_part = rest.partition(":")
    if not colon:
        raise MalformedEntryError(
            line, text, f"expected <index>=<node>:<devices>, got {quote(text)} (no ':' after the node)"
        )
    index_part, node_part = index_part.strip(SPACE), node_part.strip(SPACE)
    every_pod = index_part == ANY_INDEX
    if is_request(node_part):
        index = None if every_pod else _parse_index(line, text, index_part)
        return parse_request(line, text, index, node_part, devices_part.strip(SPACE))
    if every_pod:
        raise InvalidIndexError(
            line,
            text,
            f"{quote(text)}: the line of every pod (`*`) must leave the node to the scheduler "
            "(`*=*:gpus=<count>`); one node's devices cannot go to every pod",
        )
    index = _parse_index(line, text, index_part)
    node = _parse_node(line, text, node_part)
    devices_part, bar, fallback_part = devices_part.partition("|")
    devices = _parse_devices(line, text, devices_part)
    fallback = None
    if bar:
        fallback_part = fallback_part.strip(SPACE)
        if not is_request(fallback_part):
            raise InvalidNodeError(
                line,
                text,
                f"{quote(fallback_part)} after '|' in {quote(text)}: a fallback is `*` (any node) or "
                "`*[<label selector>]`, where as many GPUs are chosen once the line's node is gone",
            )
        fallback = parse_request(line, text, index, fallback_part, f"gpus={len(devices)}")
    return MapEntry(index=index, node=node, devices=devices, line=line, fallback=fallback)


# The line almost every map is made of: an index, a lowercase node name and
# ordinals, no spaces. One regex match reads it (make bench: a 100-line map in
# about a third of the time of the checks below, which is what a webhook pays
# for each new map); anything else, aliases, UUIDs, spaces and every error,
# goes through _parse_line, which says what is wrong. Both read a line they
# both accept the same way (tests/test_map_grammar.py).
_PLAIN_LINE = re.compile(
    r"([0-9]{1,10})=([a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*):([0-9]{1,10}(?:,[0-9]{1,10})*)"
)


def _parse_plain_line(line: int, text: str) -> MapEntry | None:
    """The entry of a plain, valid line; None for any other line (left to _parse_line)."""
    match = _PLAIN_LINE.fullmatch(text)
    if match is None:
        return None
    index_text, node, devices_text = match.groups()
    index = int(index_text)
    if index > MAX_INDEX or len(node) > MAX_NODE_NAME:
        return None
    devices = tuple(devices_text.split(","))
    if len(devices) > 1 and len({device.lstrip("0") or "0" for device in devices}) < len(devices):
        return None  # a device twice: _parse_line names it
    # Only a 10-digit ordinal can pass MAX_DEVICE_ORDINAL (the regex allows no more digits).
    if len(devices_text) >= 10 and any(int(device) > MAX_DEVICE_ORDINAL for device in devices):
        return None
    return MapEntry(index=index, node=node, devices=devices, line=line)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    # split("\n") rather than splitlines(): the latter also breaks on \v, \f,
    # \x1c.. and U+2028, which would silently renumber or split a user's line.
    for number, raw in enumerate(text.split("\n"), start=1):
        yield number, raw[:-1] if raw.endswith("\r") else raw


# A map made only of plain lines, with no blank line, comment, space or CR and at most one
# newline at the end: what generated maps and most written ones are. One match over the
# whole text checks its structure (a node as _PLAIN_LINE has it), and then every line has
# exactly one '=' and one ':', so splitting on them reads every field in C. A 100-line map
# read line by line took about 390 us, most of a new map's admission; anything this reader
# does not accept goes line by line, which reads it alike or says what is wrong
# (tests/test_map_grammar.py).
_PLAIN_NODE = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_PLAIN_ENTRY = rf"[0-9]{{1,10}}={_PLAIN_NODE}:[0-9]{{1,10}}(?:,[0-9]{{1,10}})*"
_PLAIN_MAP = re.compile(rf"(?:{_PLAIN_ENTRY}\n)*{_PLAIN_ENTRY}\n?")


def _read_plain_map(text: str) -> SchedulingMap | None:
    """The map, when every line of `text` is a plain, valid entry; else None."""
    if _PLAIN_MAP.fullmatch(text) is None:
        return None
    fields = text.replace("=", "\n").replace(":", "\n").split("\n")
    if text.endswith("\n"):
        fields.pop()
    nodes, devices = fields[1::3], fields[2::3]
    indexes = list(map(int, fields[0::3]))
    if len(set(indexes)) != len(indexes) or max(indexes) > MAX_INDEX or max(map(len, nodes)) > MAX_NODE_NAME:
        return None  # an index twice or too large, a node name too long: _parse_line says which
    for listed in devices:
        # One ordinal of fewer than 10 digits is always valid; lists and long ones are checked.
        if ("," in listed or len(listed) >= 10) and _parse_plain_line(0, f"0=n:{listed}") is None:
            return None
    return SchedulingMap(dict(zip(indexes, zip(nodes, devices, range(1, len(indexes) + 1), strict=True), strict=True)))


def parse_map_uncached(text: str) -> SchedulingMap:
    """Parse the annotation's text; raise InvalidMapError with every violation."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_MAP_BYTES:
        raise InvalidMapError(
            [
                MapTooLargeError(
                    1,
                    text[:40],
                    f"the map is {size} bytes; Kubernetes allows {MAX_MAP_BYTES} bytes "
                    "for all the annotations of an object together",
                )
            ]
        )
    plain = _read_plain_map(text)
    return plain if plain is not None else _parse_line_by_line(text)


def _parse_line_by_line(text: str) -> SchedulingMap:
    """Every line checked on its own, every error collected with its line number."""
    entries: dict[int, MapEntry] = {}
    requests: dict[int | None, GpuRequest] = {}
    errors: list[MapLineError] = []
    error_count = 0

    def reject(err: MapLineError) -> None:
        nonlocal error_count
        error_count += 1
        if len(errors) < MAX_ERRORS_KEPT:
            errors.append(err)

    for number, raw in _lines(text):
        stripped = raw.strip(SPACE)
        if not stripped or stripped.startswith("#"):
            continue
        entry = _parse_plain_line(number, stripped)
        if entry is None:
            try:
                entry = _parse_line(number, stripped)
            except MapLineError as err:
                reject(err)
                continue
        first = entries.get(entry.index) if entry.index is not None else None
        first = first or requests.get(entry.index)
        if first is not None:
            shown_index = ANY_INDEX if entry.index is None else entry.index
            reject(DuplicateIndexError(number, stripped, f"index {shown_index} is already given on line {first.line}"))
            continue
        if isinstance(entry, GpuRequest):
            requests[entry.index] = entry
        else:
            entries[entry.index] = entry
    if not entries and not requests and not errors:
        errors.append(EmptyMapError(1, text, "the map has no entry; write one <index>=<node>:<devices> per line"))
    if errors:
        raise InvalidMapError(errors, total=error_count)
    return SchedulingMap.of(entries.values(), requests.values())


# What one parsed entry holds in memory besides its line's text: its row (a tuple of the
# node, the devices and the line number) and its slot in the map's dict. Measured on
# CPython 3.11: 2,680 maps of 100 lines held 53.5 MB, 209 bytes an entry with its 14 bytes
# of text (as MapEntry objects they held 77 MB, 287 bytes an entry).
ENTRY_BYTES = 200


def parsed_size(text: str, parsed: SchedulingMap) -> int:
    """What a parsed map costs the cache: its text and its entries."""
    return len(text) + ENTRY_BYTES * (len(parsed) + len(parsed.requests))


class _ParsedMapCache:
    """Parsed maps by their text, least recently used first out, bounded by
    what they hold in memory (parsed_size) rather than their number: 512 maps
    of 256 KiB would be gigabytes, and a bound on their text alone lets many small
    maps hold far more than their text (docs/logs/benchmarks.md). Thread-safe (bind
    workers, the webhook's threads)."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._maps: OrderedDict[str, tuple[SchedulingMap, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, text: str) -> SchedulingMap:
        with self._lock:
            cached = self._maps.get(text)
            if cached is not None:
                self._maps.move_to_end(text)
                return cached[0]
        parsed = parse_map_uncached(text)  # invalid maps raise and are never cached
        size = parsed_size(text, parsed)
        with self._lock:
            if text not in self._maps and size <= self._max_bytes:
                self._maps[text] = (parsed, size)
                self._bytes += size
                while self._bytes > self._max_bytes:
                    _, (_, evicted) = self._maps.popitem(last=False)
                    self._bytes -= evicted
        return parsed

    @property
    def held_bytes(self) -> int:
        """The parsed_size of the maps held."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()
            self._bytes = 0


# Every pod of a StatefulSet carries the same annotation text: parse it once.
# 16 MiB is some 800 maps of 100 lines, 8 of 10,000, or the largest map Kubernetes
# admits (256 KiB of annotations) with its entries.
parse_map = _ParsedMapCache(max_bytes=16 * 1024 * 1024)
