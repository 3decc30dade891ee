"""A deliberately broken gpu-scheduler for the KinD volume test (test_kind_cluster.py with
VOLUMES_BROKEN=1), loaded into the installed scheduler's pods from a ConfigMap through
PYTHONPATH (Python imports `sitecustomize` at start-up from the first directory of sys.path
that has one), as tests/faults/binder_hooks/ is into processes on the host.

It never writes `volume.kubernetes.io/selected-node` on a claim and reports the write as done,
as a scheduler without VolumeBinding's PreBind would: no provisioner makes the volume of a
WaitForFirstConsumer claim, so the pod waits for it for ever and the test must fail saying so.
"""

from gpu_scheduler.scheduler import schedule_one

# The name the scheduler calls; an AttributeError here (the scheduler then fails to start, and
# the test with it) says the hook no longer breaks anything and must follow the code.
assert callable(schedule_one.select_node)


def _never_selected(client, select, timeout=None):
    return None


schedule_one.select_node = _never_selected
print("sitecustomize: no claim gets volume.kubernetes.io/selected-node (a deliberately broken build)", flush=True)
