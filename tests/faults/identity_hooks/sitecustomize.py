"""A deliberately broken gpu-scheduler for test_identities_of_the_chart.py, loaded into its
scheduler process through PYTHONPATH (Python imports `sitecustomize` at start-up from the first
directory of sys.path that has one), as broken_deny/ is: each API client it makes first lists
the Secrets of its namespace, outside the chart's RBAC, and says nothing of the 403. It patches
gpu_scheduler.kube.client.new_client only. The test's oracle (the API server's audit log) must
fail against it; a check of the scheduler's own log would not see it.
"""

import os

from gpu_scheduler.kube import client

_new_client = client.new_client


def _reads_secrets_first(*args, **kwargs):
    made = _new_client(*args, **kwargs)
    namespace = os.environ.get("POD_NAMESPACE", "default")
    try:
        made.request("GET", f"/api/v1/namespaces/{namespace}/secrets", timeout=5)
    except client.ApiError:
        pass  # no answer at all: nothing to hide
    return made


client.new_client = _reads_secrets_first
print("sitecustomize: each API client lists Secrets first, quietly (a deliberately broken build)", flush=True)
