"""A tiny workload that reports which node and GPUs its pod received."""
