"""The memory meter on real processes: a parent and a forked child sharing one large buffer."""

import subprocess
import sys

from bench.processes import pss_mib, tree_peak_rss_mib

# 64 MiB written before the fork, so both processes have it resident and share every page.
SHARED_BUFFER = """
import os, sys
buffer = bytearray(64 * 1024 * 1024)
for i in range(0, len(buffer), 4096):
    buffer[i] = 1
if os.fork() == 0:
    print("child", flush=True)
    sys.stdin.readline()
    os._exit(0)
sys.stdin.readline()
os.wait()
"""


def test_pss_counts_a_page_shared_by_two_processes_once_and_rss_twice():
    parent = subprocess.Popen(
        [sys.executable, "-c", SHARED_BUFFER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        assert parent.stdout.readline().strip() == "child"
        tree = tree_peak_rss_mib(parent.pid)
    finally:
        parent.stdin.write("done\ndone\n")
        parent.stdin.close()
        parent.wait(10)
    assert tree["processes"] == 2
    assert tree["max_mib"] >= 64
    assert tree["sum_mib"] >= 128  # each VmHWM counts the whole buffer
    # Each process holds half of each shared page: the buffer once, plus two interpreters.
    assert 64 <= tree["pss_sum_mib"] < tree["sum_mib"] - 48


def test_a_process_gone_has_no_pss():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    assert pss_mib(gone.pid) is None
