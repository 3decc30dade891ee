"""A deliberately naive gpu-scheduler: for a line that asks for a count it takes the first node
(by name) with enough free GPUs, and there the lowest free ordinals: first fit, the baseline
of tests/faults/test_dynamic_placement.py and, with DYNAMIC_FIRST_FIT=1, the broken build its
quality assertions must fail against.

Python imports `sitecustomize` at start-up from the first directory of sys.path that has one;
the test puts this directory first in PYTHONPATH of one scheduler process only.
"""

from gpu_scheduler.scheduling import dynamic


def _first_free(free, count, closeness, busy=frozenset()):
    return tuple(sorted(free)[:count]), 0


dynamic.best_set = _first_free
# The order nodes are tried in (dynamic.in_rank_order sorts by it): by name alone.
dynamic.Candidate.packing = property(lambda self: (self.node.name,))
print("sitecustomize: dynamic placement is first fit (a deliberately naive build)", flush=True)
