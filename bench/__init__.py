"""`make bench`: gpu-scheduler against kube-scheduler and a bare binder, on the local control plane."""
