"""Who is compared: the runners' keys, their labels in tables, and the client settings they run with. Pure."""

from __future__ import annotations

# gpu-scheduler in bind mode: its pods carry, in every container, the env entry that reads
# CUDA_VISIBLE_DEVICES through a downward-API fieldRef from the annotation the scheduler writes in the
# Binding (gpu_scheduler.placement.bind_env_entry), so they are created with no admission call at all:
# the same scheduler under its own schedulerName, which no webhook or policy of the bench matches.
OURS_BIND = "ours_bind"
# Issue 50's count lines: gpu-scheduler choosing node and GPU for pods whose map is COUNT_MAP (`*=*:gpus=1`,
# workload.dynamic_pods; bind mode, no admission call), against kube-scheduler matched (default profile)
# placing the same number of pods that request nvidia.com/gpu: 1 over the same nodes' capacity.
OURS_DYNAMIC = "ours_dynamic"
KUBE_GPUS = "kube_gpus"
KUBE_DEFAULTS = "kube_defaults"
KUBE_MATCHED = "kube_matched"
KUBE_PINNED = "kube_pinned"
# kube-scheduler matched (default profile) placing the very pods of OURS_BIND, the bind mode's env entries in
# every container included: what those entries (and not the scheduler) cost the control plane. No target
# reads it; its ratios say how much of bind mode's gap to KUBE_MATCHED the larger pods make.
KUBE_SAME_PODS = "kube_same_pods"
CEILING = "ceiling"
PYTHON_BINDER = "python_binder"
# The runs of record up to 2026-12-07 also hold "ours" (its pods admitted by the webhook of the removed
# admission.mode webhook) and "ours_policy" (placed by the removed policy mode's CEL): runners no more.
RUNNERS = (
    OURS_BIND,
    KUBE_DEFAULTS,
    KUBE_MATCHED,
    KUBE_PINNED,
    KUBE_SAME_PODS,
    CEILING,
    PYTHON_BINDER,
    OURS_DYNAMIC,
    KUBE_GPUS,
)
ALL_RUNNERS = RUNNERS
# The runners that are gpu-scheduler (its /metrics, its profile).
GPU_SCHEDULER_RUNNERS = (OURS_BIND, OURS_DYNAMIC)
KUBE_RUNNERS = (KUBE_DEFAULTS, KUBE_MATCHED, KUBE_PINNED, KUBE_SAME_PODS, KUBE_GPUS)
# The runners whose pods carry the bind mode's env entries (workload.in_bind_mode).
BIND_ENTRY_RUNNERS = (*GPU_SCHEDULER_RUNNERS, KUBE_SAME_PODS)
# The runners whose pods leave the node and the GPU to the scheduler: they need the nodes' free GPUs (one per
# pod), where the others' pods are pinned and take none.
DYNAMIC_RUNNERS = (OURS_DYNAMIC, KUBE_GPUS)

# KubeSchedulerConfiguration v1 defaults for clientConnection (what a plain
# kube-scheduler uses): every binding and every event is paced by them.
KUBE_DEFAULT_QPS = 50
KUBE_DEFAULT_BURST = 100
# gpu-scheduler's defaults (--kube-api-qps/--kube-api-burst), given to kube-scheduler for the matched runs.
OUR_QPS = 500
OUR_BURST = 1000
# Bind concurrency: gpu-scheduler's --workers default, passed to it explicitly so the two cannot
# drift apart; the Python binder posts as many bindings at once.
BIND_WORKERS = 32
# The Go ceiling's connections: the most binds per second on the 2-core machine (16: ~15% fewer, 64: ~35% fewer).
CEILING_WORKERS = 32

LABELS = {
    OURS_BIND: "gpu-scheduler, bind mode (devices in the Binding; no admission call)",
    KUBE_DEFAULTS: f"kube-scheduler, defaults (qps {KUBE_DEFAULT_QPS}, burst {KUBE_DEFAULT_BURST}, default profile)",
    KUBE_MATCHED: f"kube-scheduler, matched (qps {OUR_QPS}, burst {OUR_BURST}, default profile)",
    KUBE_PINNED: f"kube-scheduler, matched (qps {OUR_QPS}, burst {OUR_BURST}, pinned-pod profile)",
    KUBE_SAME_PODS: f"kube-scheduler, matched (qps {OUR_QPS}, burst {OUR_BURST}, default profile), the bind mode's "
    "pods (its env entries)",
    CEILING: f"bare binder in Go ({CEILING_WORKERS} connections)",
    PYTHON_BINDER: f"bare binder in Python ({BIND_WORKERS} threads)",
    OURS_DYNAMIC: "gpu-scheduler, count line (map *=*:gpus=1: it chooses node and GPU; no admission call)",
    KUBE_GPUS: f"kube-scheduler, matched (qps {OUR_QPS}, burst {OUR_BURST}, default profile), pods requesting "
    "nvidia.com/gpu: 1",
}

# For the plot's axis.
SHORT_LABELS = {
    OURS_BIND: "gpu-scheduler\nbind mode",
    KUBE_DEFAULTS: "kube-scheduler\ndefaults",
    KUBE_MATCHED: "kube-scheduler\nmatched",
    KUBE_PINNED: "kube-scheduler\nmatched, pinned",
    KUBE_SAME_PODS: "kube-scheduler\nmatched, same pods",
    CEILING: "Go\nbinder",
    PYTHON_BINDER: "Python\nbinder",
    OURS_DYNAMIC: "gpu-scheduler\ngpus=1",
    KUBE_GPUS: "kube-scheduler\nnvidia.com/gpu",
}

# Ratio name -> (numerator, denominators); each is taken per round, between runs made side by side.
# With several denominators, the round's fastest of them is the denominator.
RATIOS = {
    "bind_over_kube_pinned": (OURS_BIND, (KUBE_PINNED,)),
    "bind_over_kube_matched": (OURS_BIND, (KUBE_MATCHED,)),
    "bind_over_kube_defaults": (OURS_BIND, (KUBE_DEFAULTS,)),
    "bind_over_kube_same_pods": (OURS_BIND, (KUBE_SAME_PODS,)),
    # The Go bare binder alone (not the round's faster binder): the control plane's own limit, which the
    # bind mode's moonshot target reads.
    "bind_over_ceiling": (OURS_BIND, (CEILING,)),
    # Issue 50's comparison: both choose the node (and ours the GPU) for pods pinned to nothing.
    "dynamic_over_kube_gpus": (OURS_DYNAMIC, (KUBE_GPUS,)),
}
RATIO_LABELS = {
    "bind_over_kube_pinned": f"{LABELS[OURS_BIND]} / {LABELS[KUBE_PINNED]}",
    "bind_over_kube_matched": f"{LABELS[OURS_BIND]} / {LABELS[KUBE_MATCHED]}",
    "bind_over_kube_defaults": f"{LABELS[OURS_BIND]} / {LABELS[KUBE_DEFAULTS]}",
    "bind_over_kube_same_pods": f"{LABELS[OURS_BIND]} / {LABELS[KUBE_SAME_PODS]}",
    "bind_over_ceiling": f"{LABELS[OURS_BIND]} / {LABELS[CEILING]} (the ceiling)",
    "dynamic_over_kube_gpus": f"{LABELS[OURS_DYNAMIC]} / {LABELS[KUBE_GPUS]}",
}

# CPU per pod is compared with the kube-scheduler runs at our client settings: ratio name ->
# (numerator, denominator). (At its defaults kube-scheduler is slower, not cheaper, per pod.) Bind
# mode's is also taken against kube-scheduler at its defaults and against the Go bare binder, beside
# its pods/s ratios of the same names.
CPU_RATIOS = {
    "bind_over_kube_pinned": (OURS_BIND, KUBE_PINNED),
    "bind_over_kube_matched": (OURS_BIND, KUBE_MATCHED),
    "bind_over_kube_defaults": (OURS_BIND, KUBE_DEFAULTS),
    "bind_over_kube_same_pods": (OURS_BIND, KUBE_SAME_PODS),
    "bind_over_ceiling": (OURS_BIND, CEILING),
    "dynamic_over_kube_gpus": (OURS_DYNAMIC, KUBE_GPUS),
}


def round_order(keys: tuple[str, ...] | list[str], round_no: int) -> list[str]:
    """The order the runners run in, round round_no (from 1): the rows of a Williams design, a Latin
    square balanced for what a runner leaves behind. In every 2n rounds from round 1 (n runners) each
    runner leads twice, right after the settle wait, and each runner comes right after each other one
    twice; for an even n the first n rounds hold each once. (A rotation by one keeps every
    runner's neighbours, so one runner always follows the same other one.)"""
    n = len(keys)
    if not n:
        return []
    # The first row 0, 1, n-1, 2, n-2, ...: its steps from one runner to the next are all different
    # mod n, so the row's shifts (the other rows) put every ordered pair side by side once.
    first = [0]
    for step in range(1, n):
        first.append((first[-1] + (step if step % 2 else -step)) % n)
    k = (round_no - 1) % (2 * n)
    row = [keys[(index + k) % n] for index in first]
    # For an odd n the shifts alone repeat some pairs and miss others; their reverses make it even.
    return row[::-1] if n % 2 and k >= n else row


# Leader election, the same for every scheduler (gpu-scheduler's defaults, which are kube-scheduler's):
# each elects itself on its own Lease in the bench namespace, deleted before it starts.
LEASE_DURATION_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_PERIOD_SECONDS = 2


def lease_name(key: str) -> str:
    """The Lease a runner elects itself on (a DNS name: no underscores)."""
    return "bench-" + key.replace("_", "-")
