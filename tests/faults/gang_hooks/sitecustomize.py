"""Fault hooks for test_gang_placement.py, loaded into one scheduler process through PYTHONPATH
(Python imports `sitecustomize` at start-up from the first directory of sys.path that has one),
as broken_deny/ is. Each is off unless its environment variable is set:

- GANG_HOOK_SLOW_BINDS=<seconds>: after each binding of a gang's pod, wait this long, so that a
  kill -9 lands between two bindings of one gang (Kubernetes binds one pod at a time: a
  scheduler can always die there; this makes it happen on cue);
- GANG_HOOK_ONE_BY_ONE=1: a deliberately broken build that sees no gang, so it binds a gang's
  pods one by one as each can go, as before gangs existed. The test's oracle must fail against it.
"""

import os
import time

from gpu_scheduler.placement.gang import is_gang_member
from gpu_scheduler.scheduler import schedule_one, state
from gpu_scheduler.scheduling import gangs

_slow = float(os.environ.get("GANG_HOOK_SLOW_BINDS") or 0)
if _slow:
    _binding_cycle = schedule_one.ScheduleOne._binding_cycle

    def _slow_binding_cycle(self, uid, pod, decision, started):
        bound = _binding_cycle(self, uid, pod, decision, started)
        if is_gang_member((pod.get("metadata") or {}).get("annotations")):
            time.sleep(_slow)
        return bound

    schedule_one.ScheduleOne._binding_cycle = _slow_binding_cycle
    print(f"sitecustomize: {_slow:g} s after each binding of a gang's pod (a test hook)", flush=True)

if os.environ.get("GANG_HOOK_ONE_BY_ONE") == "1":
    # Neither the decision nor the pending gangs (whose GPUs deny would reserve) see a gang.
    state.gang_of = lambda pod: None
    gangs.gang_of = lambda pod: None
    print("sitecustomize: gangs ignored, their pods bound one by one (a deliberately broken build)", flush=True)
