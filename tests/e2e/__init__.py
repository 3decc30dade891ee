"""End-to-end suite: the real scheduler and webhook processes against a real kube-apiserver.

A package (not a bare folder) so that its package-scoped fixtures stop the
scheduler and webhook when the last e2e test ends, before the fault tests run.
The helper modules here are also the engine of `make demo`
(`python -m e2e.demo`, run with tests/ on PYTHONPATH).
"""
