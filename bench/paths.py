"""Where things are: the repository, its cache (CACHE_DIR, as the cluster scripts read it), the tools."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CACHE_DIR") or REPO / ".cache")
BIN = CACHE / "bin"
LOCAL_CLUSTER_DIR = CACHE / "local-cluster"
LOCAL_KUBECONFIG = LOCAL_CLUSTER_DIR / "kubeconfig"
GPU_SCHEDULER = REPO / ".venv" / "bin" / "gpu-scheduler"
DEFAULT_OUT = CACHE / "bench" / "latest"
# Runs of record (--record): their results.json and plot, kept in the repository.
RECORD_DIR = REPO / "docs" / "bench"
