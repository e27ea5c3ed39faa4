"""Megabyte bodies without page faults: glibc ``malloc`` settings for the gateway's processes.

A document's body is read, sliced and written in buffers of a megabyte and more. glibc serves
such sizes with a fresh ``mmap`` each (above its mmap threshold, 128 KiB at first) and gives
the pages back on ``free``, so every request faults its buffers in again, page by page: on
this project's benchmark machine that was about a fifth of the CPU of ``/ocr`` of a 1 MB image
(``bench/proxy_cpu.py``). :func:`keep_large_buffers` raises the mmap threshold and the heap's
trim threshold, so freed buffers are reused; a process then keeps up to ``trim_threshold``
bytes of freed heap instead of returning them to the system.

Usage::

    keep_large_buffers()          # in main(), before the workers are forked (they inherit it)
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("gateway.memory")

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20  # buffers up to this size come from the heap (reused)
TRIM_THRESHOLD = 128 << 20  # freed heap kept for reuse before it is returned to the system


def keep_large_buffers(
    mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD
) -> bool:
    """Set both thresholds (see module doc); False where the C library has no ``mallopt``
    (musl, macOS), which changes nothing else."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: its C library's
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done: bool = mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1
    done = mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1 and done
    if not done:
        log.warning("mallopt refused the thresholds; large buffers stay mmap-backed")
    return done
