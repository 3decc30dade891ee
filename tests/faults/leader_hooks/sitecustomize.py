"""Deliberately broken leader elections, loaded into the scheduler replicas of the leader tests
through PYTHONPATH (Python imports `sitecustomize` at start-up from the first directory of
sys.path that has one), as broken_deny/ is. The audit-log oracles of those tests must fail
against each. Off unless its environment variable is set; both patch
gpu_scheduler.kube.leader.LeaderElector, the election's own class, and nothing of the
scheduler around it:

- LEADER_HOOK_NO_RENEW_DEADLINE=<seconds>: is_leader() ignores the renew deadline (true until
  the election loop itself notices the loss), and the loop's first Lease request after a gap
  longer than the renew deadline (a freeze) hangs this long first. A leader thawed past its
  lease then binds until that request returns: what the deadline exists to prevent.
- LEADER_HOOK_ALWAYS_LEADS=1: every replica leads from the start, whoever holds the Lease: the
  standby binds beside the leader.
"""

import os
import time

from gpu_scheduler.kube import leader

_slow = float(os.environ.get("LEADER_HOOK_NO_RENEW_DEADLINE") or 0)
if _slow:
    _renew = leader.LeaderElector._try_acquire_or_renew
    _last_call: dict[int, float] = {}

    def _slow_after_a_gap(self):
        now = time.monotonic()
        previous = _last_call.get(id(self))
        _last_call[id(self)] = now
        if previous is not None and now - previous > self._renew_deadline:
            time.sleep(_slow)
        return _renew(self)

    leader.LeaderElector.is_leader = lambda self: self._leader
    leader.LeaderElector._try_acquire_or_renew = _slow_after_a_gap
    print(
        f"sitecustomize: renew deadline ignored, the first Lease request after a freeze hangs {_slow:g} s "
        "(a deliberately broken build)",
        flush=True,
    )

if os.environ.get("LEADER_HOOK_ALWAYS_LEADS") == "1":
    _start = leader.LeaderElector.start

    def _lead_at_once(self):
        self._on_started()
        _start(self)

    leader.LeaderElector.start = _lead_at_once
    leader.LeaderElector.is_leader = lambda self: True
    print("sitecustomize: leads from the start, whoever holds the Lease (a deliberately broken build)", flush=True)
