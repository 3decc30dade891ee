"""A deliberately broken gpu-scheduler, loaded into one scheduler process through PYTHONPATH
(Python imports `sitecustomize` at start-up from the first directory of sys.path that has one),
as broken_deny/ is: BINDER_HOOK_TWICE=1 sends every binding a second time once the first was
answered, and reports the first answer. It patches gpu_scheduler.kube.binder.bind only. The
pod's place is right and kube-apiserver refuses the second (409 "already assigned"), so "no pod
has two successful bindings" cannot see it; the audit log's resent_after_settled must
(test_control_plane_restarts.py with RESTARTS_BROKEN=1).
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
