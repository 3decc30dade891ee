"""The nodes a count line may go to, in the order it prefers them, kept as GPUs are held and freed.

A count line prefers nodes already in use, then the node left with the fewest free GPUs, then
the node's name (scheduling.dynamic). Looking at every node for every pod costs some
microseconds a node, which at 5,000 nodes is the whole of a pod's budget; this index keeps each
node with GPUs in a bucket by (untouched, free GPUs), names sorted within it, so that a
decision reads nodes in that order and stops at the first that takes the pod.

It is told of every change that can move a node: the ledger's (a GPU of the node held or
freed) and the node index's (a node that comes, goes or publishes other GPUs). GPUs kept for
pinned pods or gangs are not in it: a decision with any falls back to looking at every node.
Single-threaded, like the cache that owns it.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator

from .dynamic import forget_table, gpu_table, held_count
from .ledger import GpuLedger
from .nodes import NodeIndex, NodeInfo


class FreeIndex:
    def __init__(self, nodes: NodeIndex, ledger: GpuLedger) -> None:
        self._nodes = nodes
        self._ledger = ledger
        self._where: dict[str, tuple[bool, int]] = {}  # node -> (untouched, free GPUs)
        self._buckets: dict[tuple[bool, int], list[str]] = {}  # -> node names, sorted
        self._links: dict[str, int] = {}  # node -> the best link between two of its GPUs
        self._link_counts: Counter[int] = Counter()  # best link -> how many nodes have it

    def refresh(self, name: str) -> None:
        """The node changed, or what its pods hold did: it is put where it now belongs."""
        link = self._links.pop(name, None)
        if link is not None:
            self._link_counts[link] -= 1
            if not self._link_counts[link]:
                del self._link_counts[link]
        before = self._where.pop(name, None)
        if before is not None:
            bucket = self._buckets[before]
            del bucket[bisect.bisect_left(bucket, name)]
            if not bucket:
                del self._buckets[before]
        node = self._nodes.get(name)
        if node is None:
            forget_table(name)
            return
        table = gpu_table(node)
        if table is None:
            return
        busy = held_count(table, node, self._ledger)
        where = (busy == 0, table.total - busy)
        bisect.insort(self._buckets.setdefault(where, []), name)
        self._where[name] = where
        self._links[name] = table.best_link
        self._link_counts[table.best_link] += 1

    def best_link(self) -> int:
        """The best link between two GPUs of any node: no set of several can be better."""
        return max(self._link_counts, default=0)

    def in_packing_order(self, count: int) -> Iterator[NodeInfo]:
        """The nodes with at least `count` free GPUs: in use first, then the fewest free, then
        by name. Read while the cache does not change (under the scheduler's lock)."""
        for untouched in (False, True):
            frees = sorted(free for (fresh, free) in self._buckets if fresh == untouched and free >= count)
            for free in frees:
                for name in self._buckets[(untouched, free)]:
                    node = self._nodes.get(name)
                    if node is not None:
                        yield node

    def free(self, name: str) -> int | None:
        """The node's free GPUs as the index has them (None: not a node with GPUs): for tests."""
        where = self._where.get(name)
        return where[1] if where else None
