"""Tune the C allocator for a broker's allocation pattern, measured to matter.

Every produce request passes through a few buffers of its own size (the frame, the
records kio decodes, the batch the log patches in place): ~1 MB each with librdkafka's
default batching, allocated and freed hundreds of times a second. glibc's malloc serves
such sizes with ``mmap`` once they pass its adaptive mmap threshold, and gives freed heap
memory back to the kernel once the top of the heap holds more than its trim threshold.
Both make the next buffer of that size start as untouched pages, so every copy into it
page-faults once per 4 KiB: on the ingest benchmark (1 KiB messages) that tripled the
cost of the two copies the broker makes per request and added ~50 % to its CPU per
message (docs/performance.md, "Allocator").

Fixing the two thresholds above the sizes a request buffer takes keeps those buffers
in the heap and reuses their pages. The cost is memory the process keeps after a burst:
at most TRIM_THRESHOLD_BYTES of free heap above what it uses. On a C library other than
glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Allocations at least this large get their own mapping; smaller ones come from the
heap. Above the frame sizes clients send in practice (librdkafka and the Java client cap
a request near 1 MB by default; 16 MB is a large setting), below FRAME_BYTES_MAX."""

TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
"""Free memory at the top of the heap kept rather than given back to the kernel: room
for a few in-flight produce requests per connection on several busy connections."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""mallopt(3) parameter numbers, from glibc's malloc.h."""


def tune_allocator() -> bool:
    """Set glibc's mmap and trim thresholds (fixed values also turn off its adaptive
    adjustment). True if they were set; False on another C library."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    tuned = bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    log.debug(
        "malloc thresholds: mmap %d bytes, trim %d bytes (%s)",
        MMAP_THRESHOLD_BYTES,
        TRIM_THRESHOLD_BYTES,
        "set" if tuned else "refused",
    )
    return tuned
