"""GPU inventories for the tests of the inventory, the ledger, the agent, the webhook and
`gpu-scheduler gpus`.

INVENTORY is node3 as a fake NVML would publish it: GPU 0 an A100 in MIG mode with two MIG
devices, GPU 1 an A100 joined to it by NVLink, GPU 2 an H100 across the system bus (another
NUMA node). ONE_A100 is a node of one A100 (GPU0), no MIG.
"""

from __future__ import annotations

from gpu_scheduler.scheduling.inventory import Gpu, Inventory, Link, MigDevice

GPU0 = "GPU-0a1b2c3d-0000-4000-8000-000000000000"
GPU1 = "GPU-0a1b2c3d-0000-4000-8000-000000000001"
GPU2 = "GPU-0a1b2c3d-0000-4000-8000-000000000002"
MIG_A = "MIG-5e6f7a8b-0000-4000-8000-00000000000a"
MIG_B = "MIG-5e6f7a8b-0000-4000-8000-00000000000b"
A100 = "NVIDIA A100-SXM4-40GB"

INVENTORY = Inventory(
    driver_version="550.54.15",
    gpus=(
        Gpu(
            0,
            GPU0,
            "00000000:07:00.0",
            A100,
            40960,
            0,
            mig_enabled=True,
            mig_devices=(MigDevice(MIG_A, "3g.20gb", 1, 0, 20096), MigDevice(MIG_B, "2g.10gb", 5, 0, 9984)),
        ),
        Gpu(1, GPU1, "00000000:0F:00.0", A100, 40960, 0),
        Gpu(2, GPU2, "00000000:47:00.0", "NVIDIA H100 80GB HBM3", 81559, 1),
    ),
    links=(
        Link(0, 1, 12, "NVLINK"),
        Link(0, 2, 0, "SYSTEM"),
        Link(1, 2, 0, "SYSTEM"),
    ),
)

ONE_A100 = Inventory("550.54.15", (Gpu(0, GPU0, "00000000:07:00.0", A100, 40960),))
