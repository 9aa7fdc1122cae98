"""What a grading process writes, which a student's kernel can flood: kept in a capped file, never in memory.

A grading task's kernels (:func:`instructor.task.kernel_output_to`, under either executor) write to stdout and
stderr; a kernel that wrote 12 GB there once made ``./course grade --serial`` (then an ``nbgrader autograde``
subprocess) hold all of it (``capture_output=True``) until the OOM
killer ended it.  Here the writer gets a pipe; a thread reads it as it comes and keeps the first :data:`HEAD` and
the last :data:`TAIL` bytes in a file of a private folder (what lies between is counted, then dropped): the
memory and the disk it takes are bounded, whatever is written, and the writer is never blocked for long.

:func:`run` runs a grading subprocess (a plain ``nbgrader`` command) that way, in a process group of its own that dies with its parent
(``PR_SET_PDEATHSIG``): a grader that dies takes its nbgrader with it (and nbgrader its kernels: their sandboxes
die with their parent), so no orphaned batch goes on writing grades no one reads.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

HEAD = 1 << 20   # bytes kept from the start
TAIL = 1 << 20   # bytes kept from the end
CHUNK = 1 << 16


class CappedSink:
    """A pipe (:attr:`fd`, its writing end) drained by a thread into ``path``: the first ``head`` and the last ``tail``
    bytes, with a line saying how many bytes lay between them.  :meth:`close` returns what was kept, as text."""

    def __init__(self, path: Path, head: int = HEAD, tail: int = TAIL):
        self.path, self.head, self.tail = Path(path), head, tail
        self._r, self.fd = os.pipe()
        self.total = 0
        self._file = open(self.path, "wb")
        self._tail = bytearray()
        self._thread = threading.Thread(target=self._drain, name="attncourse-capped-output", daemon=True)
        self._thread.start()

    def _drain(self):
        while True:
            try:
                data = os.read(self._r, CHUNK)
            except OSError:
                break
            if not data:
                break
            room = self.head - self.total
            self.total += len(data)
            if room > 0:
                try:
                    self._file.write(data[:room])
                except ValueError:   # closed: close() stopped waiting for a writer that kept its end
                    break
                data = data[room:]
            if data:
                self._tail += data
                if len(self._tail) > 2 * self.tail:
                    del self._tail[:-self.tail]

    def close_writer(self):
        """Close this process's writing end (a child holds its own copy)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self, wait: float = 30.0) -> str:
        """Wait until every writer has closed its end (at most ``wait`` seconds once this process's end is closed: a
        process left holding it is not waited for); the file's text (at most ``head + tail`` bytes and a line)."""
        self.close_writer()
        self._thread.join(wait)
        if not self._thread.is_alive():
            os.close(self._r)
        tail = bytes(self._tail[-self.tail:])
        dropped = self.total - min(self.total, self.head) - len(tail)
        if dropped > 0:
            self._file.write(f"\n[... {dropped} bytes of output dropped here ...]\n".encode())
        self._file.write(tail)
        self._file.close()
        return self.path.read_bytes().decode("utf-8", "replace")


def _die_with_parent():
    """In the child, before exec: killed when the thread that started it ends (the grader died), and a process
    group of its own (start_new_session) that the grader stops as a whole."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_group(pid: int):
    """Every process left in the process group ``pid`` leads."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run(cmd, cwd=None, env=None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``cmd`` with its stdout and stderr, together, in a :class:`CappedSink` of a private folder (0700, removed after);
    a CompletedProcess whose ``stdout`` holds what was kept (``stderr`` is empty).  On ``timeout`` its whole
    process group is killed and the return code is 124, with "TIMEOUT" at the end of the text."""
    folder = tempfile.mkdtemp(prefix="attncourse-output-")
    try:
        sink = CappedSink(Path(folder) / "output.txt")
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink.fd,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        except BaseException:
            sink.close()
            raise
        sink.close_writer()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out, rc = True, 124
        except BaseException:       # KeyboardInterrupt: nothing of the batch survives the grader
            kill_group(proc.pid)
            proc.wait()
            sink.close()
            raise
        kill_group(proc.pid)        # what it left behind in its group
        if timed_out:
            proc.wait()
        text = sink.close()
        return subprocess.CompletedProcess(cmd, rc, text + ("\nTIMEOUT" if timed_out else ""), "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
