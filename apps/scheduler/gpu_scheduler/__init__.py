"""gpu-scheduler: places pods by their gpu-scheduling-map annotation and injects CUDA_VISIBLE_DEVICES."""

__version__ = "0.1.0"
