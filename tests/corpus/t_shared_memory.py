"""Holds memory no limit counts: memfd_create, shared anonymous mappings (and of /dev/zero), System V shared memory.

RLIMIT_DATA counts private memory only: these held 3 GB under a 512 MB limit, and the OOM killer took two Dask
workers, never the kernel. Each is now refused in a kernel (its syscall filter; /dev/zero is /dev/null), and the
OOM killer takes a kernel first (oom_score_adj 1000): this notebook holds nothing and is graded as its base.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
NEEDS_SANDBOX = True   # without the sandbox the kernel could hold it
SDPA = WRONG + '''
import ctypes as _c, mmap as _m, os as _o
_MB = 1 << 20
_held = []
def _grab(make):
    for _ in range(12):                     # 3 GB at most, 256 MB at a time
        try:
            m = make()
            for i in range(0, 256 * _MB, 4096):
                m[i] = 1
            _held.append(m)
        except (OSError, ValueError, MemoryError):
            return
def _memfd():
    fd = _o.memfd_create("hold")
    _o.ftruncate(fd, 256 * _MB)
    return _m.mmap(fd, 256 * _MB)
def _zero():
    with open("/dev/zero", "r+b") as f:
        return _m.mmap(f.fileno(), 256 * _MB)
for _make in (_memfd, lambda: _m.mmap(-1, 256 * _MB), _zero):
    _grab(_make)
_libc = _c.CDLL(None, use_errno=True)
_libc.shmget(0, 256 * _MB, 0o1600)
'''
SHOWS = "Most likely cause"
REASON = "calls the C library directly"
