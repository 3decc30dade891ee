"""The garbage collector's settings for the long-running processes (scheduler, webhook workers).

Almost everything these processes allocate (JSON documents, requests,
responses) is freed by reference counting the moment it is dropped; the
cyclic collector finds next to nothing, yet with Python's default thresholds
(a young collection every 700 allocations) it ran hundreds of times a second
under load and walked the scheduler's caches of pods and nodes in every full
collection: 3-5% of their CPU in `make bench` (perf: gc_collect_main,
visit_reachable, visit_decref). So what exists at start-up (modules, the app)
is frozen out of collection, and young collections run 20x less often.
"""

from __future__ import annotations

import gc

# Allocations between young collections (Python's default: 700); the older
# generations keep their default ratios.
YOUNG_THRESHOLD = 14_000


def tune_for_service() -> None:
    """Call once, after start-up's imports and before the serving loop."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
