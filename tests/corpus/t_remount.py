"""Uses the kernel's privileges: remounts the read-only course package and site-packages writable (through
ctypes, directly and from a new user namespace) to leave a file for the next grading run, and fills /dev/shm.

Where the grader ran as root, the kernel inside bubblewrap kept every capability: this remount succeeded, a
patched ``judge/verdict.py`` scored a blank notebook 24/24 from the next run on, and a ``.pth`` planted
in site-packages ran as the instructor.  Now the kernel is uid 65534 in its own user namespace with no
capability, may make no namespace, and mount/umount/unshare are refused by the syscall filter.  The marker file
it tries to leave (``MARKER`` in each folder) is harmless; the test proves it never appears.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
NEEDS_SANDBOX = True   # without bubblewrap the kernel runs as the grader (stated in the report)
MARKER = "attncourse-tamper-marker.txt"
SDPA = WRONG + '''
import ctypes as _c, os as _o, site as _site
import attncourse as _pkg
_libc = _c.CDLL(None, use_errno=True)
_MS_REMOUNT, _MS_BIND = 0x20, 0x1000
def _leave_marker(folder):
    _libc.mount(None, folder.encode(), None, _MS_REMOUNT | _MS_BIND, None)
    try:
        with open(_o.path.join(folder, "''' + MARKER + '''"), "w") as f:
            f.write("written from a grading kernel")
    except OSError:
        pass
_targets = [_o.path.dirname(_pkg.__file__)] + _site.getsitepackages()
for _t in _targets:
    _leave_marker(_t)
if _libc.unshare(0x10000000 | 0x00020000) == 0:     # a user namespace of its own, then the same again
    for _t in _targets:
        _leave_marker(_t)
for _where in ("/dev/shm/fill", "/dev/fill", "/fill"):
    try:
        with open(_where, "wb") as f:
            for _ in range(2048):
                f.write(b"\\0" * (1 << 20))
    except OSError:
        pass
'''
SHOWS = "Most likely cause"
REASON = "calls the C library directly"
