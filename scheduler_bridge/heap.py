"""Keeping the memory one refresh frees for the next one.

A refresh at 1,000 pools reads a 4.8 MB answer and frees it again, with a few other
blocks of that size. glibc hands blocks that large back to the kernel (an mmap'd block
when it is freed, the top of the heap once more than a threshold of it is free), so
the next refresh faults every page of them back in: ~3,500 page faults per refresh,
and on the virtual machines measured a fault costs ~6 us, so ~20 ms of every refresh.
Fixed thresholds keep such blocks in the process for reuse. The price is that up to
`max_free_bytes` freed memory stays with the bridge rather than going back to the OS.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above 32 MiB on 64-bit: blocks past it (a 10,000 pool
# answer) are still mapped per use.
MAX_MMAP_THRESHOLD = 32 << 20


def keep_freed_memory(max_free_bytes: int = 256 << 20) -> bool:
    """Ask glibc to keep freed blocks up to `max_free_bytes`; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library to ask, or not glibc's interface
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 when it refuses a value.
    kept = (mallopt(M_MMAP_THRESHOLD, min(max_free_bytes, MAX_MMAP_THRESHOLD)) == 1
            and mallopt(M_TRIM_THRESHOLD, max_free_bytes) == 1)
    if not kept:
        log.info("the C library did not take the malloc thresholds; memory is returned")
    return kept
