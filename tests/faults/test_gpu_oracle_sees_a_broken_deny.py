"""The GPU oracle (gpu_oracle.py, run by contention.py in every fault test that binds pods) fails
against a scheduler whose --gpu-sharing=deny is broken on purpose: the same contention the fault
tests run, against a scheduler process whose ledger sees no GPU as held (broken_deny/), must be
reported as GPUs held twice. Without this, a quiet oracle could be a blind one.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

BROKEN_BUILD = Path(__file__).parent / "broken_deny"
# Long enough for the contenders of every GPU to be bound at once by the broken scheduler.
RUN_FOR = 5.0


# The contenders' devices are written by the binding (the README's entry, read through the
# downward API), as everywhere.
def test_the_gpu_oracle_reports_a_gpu_held_twice_by_a_scheduler_whose_deny_is_broken(
    scheduler_name, start_scheduler, gpu_contention
):
    contention = gpu_contention(scheduler_name, bind_entries=True)
    broken = start_scheduler(
        "broken-deny",
        "--gpu-sharing=deny",
        scheduler_name=scheduler_name,
        extra_env={"PYTHONPATH": str(BROKEN_BUILD)},
    )
    time.sleep(RUN_FOR)
    assert "conflict checks disabled" in broken.log_path.read_text(), "the broken build did not load"
    with pytest.raises(AssertionError, match="held by two live pods") as caught:
        contention.verify()
    print(f"\nthe oracle, against a broken deny: {str(caught.value)[:300]}")
