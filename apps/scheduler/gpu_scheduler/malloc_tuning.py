"""glibc's malloc kept from holding on to the memory of large request bodies (webhook workers).

glibc serves a block of 128 KiB or more with its own mmap and unmaps it when it is freed, so
a large request body costs memory only while it is read. But the threshold is dynamic: once
such a block is freed, blocks up to its size come from the heap of the thread's arena
instead, and a heap gives memory back only from its top, past anything still in use. A
worker that read a few bodies of 1-3 MiB in its --threads threads then keeps tens of MiB it
no longer uses (the fuzz test over TLS saw one worker at its peak RSS after the run). Setting
the threshold fixes it, so every large block is mapped and returned at free.
"""

from __future__ import annotations

import ctypes

# mallopt's parameter numbers (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
# glibc's default threshold: kept, only no longer moved.
MMAP_THRESHOLD_BYTES = 128 * 1024


def keep_large_blocks_mapped() -> bool:
    """Fixes glibc's mmap threshold at its default; False where the C library is not glibc
    (mallopt missing) or refuses it."""
    try:
        # The symbols the interpreter is linked with, the C library's among them.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
