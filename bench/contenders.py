"""Who is compared: the runners' keys, their labels in tables, and the client settings they run with. Pure."""

from __future__ import annotations

OURS = "ours"
KUBE_DEFAULTS = "kube_defaults"
KUBE_MATCHED = "kube_matched"
CEILING = "ceiling"
PYTHON_BINDER = "python_binder"

# KubeSchedulerConfiguration v1 defaults for clientConnection (what a plain
# kube-scheduler uses): every binding and every event is paced by them.
KUBE_DEFAULT_QPS = 50
KUBE_DEFAULT_BURST = 100
# gpu-scheduler's defaults (--kube-api-qps/--kube-api-burst), given to kube-scheduler for the matched run.
OUR_QPS = 500
OUR_BURST = 1000
# Bind concurrency: gpu-scheduler's --workers default; the Python binder posts as many bindings at once.
BIND_WORKERS = 16
# The Go ceiling's connections: the most binds per second on the 2-core machine (16: ~15% fewer, 64: ~35% fewer).
CEILING_WORKERS = 32

LABELS = {
    OURS: "gpu-scheduler",
    KUBE_DEFAULTS: f"kube-scheduler, defaults (qps {KUBE_DEFAULT_QPS}, burst {KUBE_DEFAULT_BURST})",
    KUBE_MATCHED: f"kube-scheduler, matched (qps {OUR_QPS}, burst {OUR_BURST})",
    CEILING: f"ceiling: bare binder in Go ({CEILING_WORKERS} connections)",
    PYTHON_BINDER: f"bare binder in Python ({BIND_WORKERS} threads)",
}

# For the plot's axis.
SHORT_LABELS = {
    OURS: "gpu-scheduler",
    KUBE_DEFAULTS: "kube-scheduler\ndefaults",
    KUBE_MATCHED: "kube-scheduler\nmatched",
    CEILING: "ceiling\n(Go binder)",
    PYTHON_BINDER: "Python\nbinder",
}

# Ratio name -> (numerator, denominator); each is taken per round, between runs made side by side.
RATIOS = {
    "ours_over_kube_matched": (OURS, KUBE_MATCHED),
    "ours_over_kube_defaults": (OURS, KUBE_DEFAULTS),
    "ours_over_ceiling": (OURS, CEILING),
    "ours_over_python_binder": (OURS, PYTHON_BINDER),
}
