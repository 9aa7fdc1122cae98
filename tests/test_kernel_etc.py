"""The sandbox's /etc is built so that files appearing and vanishing in /etc cannot fail a sandbox start.

A student's ``chsh`` loop made 12 of 100 sandbox starts fail ("bwrap: Can't create file at /etc/passwd.lock"):
/etc was walked once and each private file masked later, so a lock file that vanished in between had to be
created by bwrap on the read-only /etc. Here root stands for chsh: a loop creates and deletes private and public
files in /etc while sandboxes start (none may fail), paired with the mask of before failing deterministically on
a file deleted between the walk and the start.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from judge import sandbox

pytestmark = pytest.mark.xdist_group("sandbox")

LOCK = "/etc/attncourse-test-passwd.lock"   # private (0600), as shadow-utils' lock files are
PUBLIC = "/etc/attncourse-test-passwd+"     # public (0644), as chsh's new /etc/passwd before its rename
STARTS = 100


def _need_root_bwrap():
    if os.getuid() != 0:
        pytest.skip("stands for chsh by writing in /etc: needs root")
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def _start(cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, pass_fds=getattr(cmd, "fds", ()))


def _old_masks(args: list[str]) -> list[str]:
    """The command as the launcher built it before: /etc bound whole, each private entry of the walk masked."""
    out, i = [], 0
    while i < len(args):   # drop the rebuilt /etc (its --dir, --ro-bind-try, --symlink and --file entries)
        a = args[i]
        if a == "--dir" and args[i + 1].startswith("/etc"):
            i += 2
            continue
        if a in ("--ro-bind-try", "--symlink", "--file") and args[i + 2].startswith("/etc"):
            i += 3
            continue
        if a == "--perms" and args[i + 2] == "--file" and args[i + 4].startswith("/etc"):
            i += 5
            continue
        out.append(a)
        i += 1
    masks = ["--ro-bind", "/etc", "/etc"]
    for path, folder in sandbox._private_entries("/etc"):
        masks += (["--perms", "0000", "--size", "4096", "--tmpfs", path, "--remount-ro", path] if folder
                  else ["--ro-bind", "/dev/null", path])
    j = out.index("--remount-ro")   # before the root is made read-only
    return out[:j] + masks + out[j:]


def _churn(stop: threading.Event):
    """chsh's footprint, as fast as it can: a private lock file and a public temporary file, made and deleted."""
    while not stop.is_set():
        for path, mode in ((LOCK, 0o600), (PUBLIC, 0o644)):
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, mode)
            os.write(fd, b"secret\n")
            os.close(fd)
        for path in (LOCK, PUBLIC):
            os.unlink(path)


def test_files_vanishing_in_etc_never_fail_a_start():
    """100 sandboxes start (each built from a fresh walk of /etc) while /etc churns: none fails; the private lock
    file, when a start saw it, is not readable inside."""
    _need_root_bwrap()
    stop = threading.Event()
    t = threading.Thread(target=_churn, args=(stop,), daemon=True)
    t.start()
    failed = []
    try:
        for _ in range(STARTS):
            cmd = sandbox.bwrap_command(["/bin/sh", "-c", f"cat {LOCK} 2>/dev/null; echo done"],
                                        env=sandbox.kernel_env({}, "/tmp"))
            p = _start(cmd)
            cmd.close()
            if p.returncode != 0 or p.stdout.strip() != "done":   # (no "secret": the lock file stays hidden)
                failed.append(p.stderr.strip() or p.stdout)
    finally:
        stop.set()
        t.join()
        for path in (LOCK, PUBLIC):
            if os.path.exists(path):
                os.unlink(path)
    assert not failed, f"{len(failed)} of {STARTS} starts failed: {failed[:3]}"


def test_the_mask_of_before_failed_on_a_file_gone_between_walk_and_start():
    """The pairing, without luck: the private file is there for the walk and gone when bwrap starts. The command
    of before fails as chsh made it fail; today's starts."""
    _need_root_bwrap()
    fd = os.open(LOCK, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        cmd = sandbox.bwrap_command([sys.executable, "-S", "-c", "print('done')"], env=sandbox.kernel_env({}, "/tmp"))
        # a command of its own (each reads its descriptors: judge/forkserver.py is copied in from one)
        made = sandbox.bwrap_command([sys.executable, "-S", "-c", "print('done')"], env=sandbox.kernel_env({}, "/tmp"))
        old = sandbox.Command(_old_masks(made), made.fds)
        assert LOCK in old and "--file" in cmd
    finally:
        os.unlink(LOCK)
    before, now = _start(old), _start(cmd)
    cmd.close()
    old.close()
    assert before.returncode != 0 and "Can't create file at" in before.stderr, before
    assert now.returncode == 0 and now.stdout.strip() == "done", now.stderr
