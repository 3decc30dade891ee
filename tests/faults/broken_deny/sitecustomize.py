"""A deliberately broken gpu-scheduler: under --gpu-sharing=deny it sees no GPU as held.

Python imports `sitecustomize` at start-up from the first directory of sys.path that has one;
test_gpu_oracle_sees_a_broken_deny.py puts this directory first in PYTHONPATH of one scheduler
process, so that process, and no other, runs with the ledger's conflict checks emptied. The
GPU oracle must then report GPUs held twice: an oracle that stays quiet here proves nothing.
"""

from gpu_scheduler.scheduling import ledger


def _no_conflicts(self, uid, node, devices):
    return []


ledger.GpuLedger.conflicts = _no_conflicts
ledger.GpuLedger.spelling_conflicts = _no_conflicts
print("sitecustomize: GpuLedger conflict checks disabled (a deliberately broken build)", flush=True)
