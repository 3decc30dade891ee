"""A deliberately broken gpu-scheduler, loaded into one scheduler process through PYTHONPATH
(Python imports `sitecustomize` at start-up from the first directory of sys.path that has one),
as broken_deny/ is.

BINDER_HOOK_TWICE=1 sends every binding a second time once the first was answered, and reports
the first answer (it patches gpu_scheduler.kube.binder.bind only). The pod's place is right and
kube-apiserver refuses the second (409 "already assigned"), so "no pod has two successful
bindings" cannot see it; the audit log's resent_after_settled must (test_control_plane_restarts.py
with RESTARTS_BROKEN=1).

BINDER_HOOK_NO_ANNOTATIONS=1 binds without the devices annotations: every pod lands on its map's
node, and its containers that read the bind see no devices (test_bind_writes_the_devices.py with
BIND_BROKEN=1).
"""

import os

from gpu_scheduler.kube import binder

if os.environ.get("BINDER_HOOK_TWICE") == "1":
    _bind = binder.bind

    def _bind_twice(*args, **kwargs):
        first = _bind(*args, **kwargs)
        _bind(*args, **kwargs)
        return first

    binder.bind = _bind_twice
    print("sitecustomize: every binding sent twice (a deliberately broken build)", flush=True)

if os.environ.get("BINDER_HOOK_NO_ANNOTATIONS") == "1":
    _binding_body = binder.binding_body

    def _without_annotations(namespace, name, uid, node, annotations=None):
        return _binding_body(namespace, name, uid, node)

    binder.binding_body = _without_annotations
    print("sitecustomize: bindings without annotations (a deliberately broken build)", flush=True)
