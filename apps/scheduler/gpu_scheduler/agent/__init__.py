"""`gpu-scheduler agent`: publishes this node's GPUs, read from NVML, on its Node object."""
