"""What a sandboxed grading kernel can do, listed from inside, as root and as a normal user.

Each test starts a Python in exactly the kernels' sandbox (``sandbox.run_sandboxed``: the launcher's bwrap
command and syscall filter) and asks it. Each is paired with the command the launcher built before issue 22
(no user namespace, capabilities kept, the old filter): there the same question gets the dangerous answer, so
the check can fail.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from judge import sandbox
from tests.test_sandbox import FILL

pytestmark = pytest.mark.xdist_group("sandbox")

NOBODY = 65534


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def _run(code: str, *, old: bool = False) -> dict:
    """``code``'s last printed line (JSON) from a sandboxed Python; ``old``: the launcher's command before."""
    if not old:
        p = sandbox.run_sandboxed(code, timeout=60)
    else:
        # what the launcher ran before: no --unshare-user/--uid/--cap-drop/--disable-userns, no read-only root,
        # /etc bound whole (no file hidden)
        view, sandbox._etc_view = sandbox._etc_view, lambda top, fds=None: ["--ro-bind", top, top]
        try:
            cmd = sandbox.bwrap_command([sys.executable, "-S", "-c", code], env=sandbox.kernel_env({}, "/tmp"))
        finally:
            sandbox._etc_view = view
        drop = {"--unshare-user": 1, "--uid": 2, "--gid": 2, "--cap-drop": 2, "--disable-userns": 1,
                "--assert-userns-disabled": 1}
        for flag, n in drop.items():
            i = cmd.index(flag)
            del cmd[i:i + n]
        i = len(cmd) - 1 - cmd[::-1].index("--remount-ro")
        del cmd[i:i + 2]
        try:   # (judge/forkserver.py is copied in from a descriptor: pass it)
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, pass_fds=cmd.fds)
        finally:
            cmd.close()
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_no_privilege_inside_whoever_starts_it():
    """uid 65534, no capability, no_new_privs, the filter on; no process, remount, namespace or writable root."""
    _need_bwrap()
    seen = _run(sandbox.PROBE)
    assert seen["uid"] == NOBODY and {k: seen[k] for k in sandbox.PROBE_WANTS} == sandbox.PROBE_WANTS, seen
    print(f"as uid {os.getuid()}, a sandboxed kernel sees: {seen}")
    if os.getuid() == 0:
        before = _run(sandbox.PROBE, old=True)
        # as root, the command of before kept every capability: the remount that made the package writable
        assert before["uid"] == 0 and before["caps"] and before["remount"], before


SYSCALLS = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, nr, args in %s:
    ctypes.set_errno(0)
    rc = libc.syscall(nr, *args)
    out[name] = "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
print(json.dumps(out))
"""


def _numbers(names):
    """This machine's syscall numbers (libseccomp's tables; negative: no such call here)."""
    import ctypes

    lib = sandbox._libseccomp()
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    return {n: lib.seccomp_syscall_resolve_name(n.encode()) for n in names}


def test_syscall_filter_refuses_each_family():
    """Each refused family answers EPERM (clone3: ENOSYS) from inside; keyctl and unshare(CLONE_NEWUSER), which
    need no privilege, succeeded in the sandbox of before."""
    _need_bwrap()
    calls = {  # name: arguments (harmless ones: each call would do nothing useful even if allowed)
        "ptrace": (0, 0, 0, 0),                      # PTRACE_TRACEME
        "keyctl": (0, -3, 0),                        # KEYCTL_GET_KEYRING_ID of the session keyring
        "unshare": (0x10000000,),                    # CLONE_NEWUSER
        "mount": (0, 0, 0, 0x20 | 0x1000, 0),
        "umount2": (0, 0),
        "pivot_root": (0, 0),
        "setns": (-1, 0),
        "io_uring_setup": (1, 0),
        "bpf": (0, 0, 0),
        "perf_event_open": (0, 0, -1, -1, 0),
        "fork": (),
        "clone": (0x11,),                            # SIGCHLD only: a new process
        "clone3": (0, 0),
    }
    nrs = _numbers(calls)
    table = [(n, nrs[n], calls[n]) for n in calls if nrs[n] >= 0]
    code = SYSCALLS % repr(table)
    got = _run(code)
    want = {n: ("ENOSYS" if n == "clone3" else "EPERM") for n, _, _ in table}
    assert got == want, got
    print("refused from inside:", got)
    if os.getuid() == 0:
        before = _run(code.replace('"fork"', '"nofork"'), old=True)
        assert before["keyctl"] == "ok" and before["unshare"] == "ok", before


FILLS = FILL + r"""
import json
print(json.dumps({"/dev/shm": _fill("/dev/shm/fill", 300), "/dev": _fill("/dev/fill", 1), "/": _fill("/fill", 1),
                  "/etc": _fill("/etc/fill", 1), "/usr": _fill("/usr/fill", 1)}))
"""


def test_every_writable_mount_is_capped():
    """/dev/shm holds at most DEV_SHM_MB; /dev, the root, /etc and /usr take nothing."""
    _need_bwrap()
    got = _run(FILLS)
    assert got["/dev/shm"] < sandbox.DEV_SHM_MB + 1 and got["/dev/shm"] >= sandbox.DEV_SHM_MB - 2, got
    assert max(got["/dev"], got["/"], got["/etc"], got["/usr"]) <= 0, got


def test_files_other_users_may_not_read_stay_hidden():
    """As root the kernel's uid maps to root for file permissions: /etc's private files are masked."""
    _need_bwrap()
    private = [p for p, folder in sandbox._private_entries("/etc") if not folder]
    if not private:
        pytest.skip("no file under /etc that other users may not read")
    code = ("import json\nout = {}\nfor p in %r:\n    try:\n        out[p] = len(open(p, 'rb').read())\n"
            "    except OSError:\n        out[p] = 0\nprint(json.dumps(out))\n") % private
    got = _run(code)
    assert not {p: n for p, n in got.items() if n}, got      # bytes read from each private file: none
    if os.getuid() == 0 and "/etc/shadow" in got:
        assert _run(code, old=True)["/etc/shadow"] > 0          # before: readable


def test_as_a_normal_user_too():
    """The same probe, with the grader running as an unprivileged account (uid 65534 here): the sandbox starts
    and holds. Needs root to switch, and the course and its Python readable by that account."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the grader as another account")
    _need_bwrap()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if not python:
        pytest.skip("no system python3 for the unprivileged account")
    # the sandbox's module from a copy that account can read, whatever the checkout's modes (tests/test_hub.py
    # closes the checkout to other users while its hub runs, as ./course hub does)
    copy = Path(tempfile.mkdtemp(prefix="attncourse-sb-", dir="/tmp"))
    (copy / "judge").mkdir()
    (copy / "attncourse").mkdir()    # package_dir(): the attncourse beside the judge, bound read-only
    shutil.copy(sandbox.__file__, copy / "judge" / "sandbox.py")
    for d in (copy, copy / "judge", copy / "attncourse"):
        d.chmod(0o755)
    (copy / "judge" / "sandbox.py").chmod(0o644)
    script = ("import importlib.util, json\n"
              f"spec = importlib.util.spec_from_file_location('sb', {str(copy / 'judge' / 'sandbox.py')!r})\n"
              "s = importlib.util.module_from_spec(spec); spec.loader.exec_module(s)\n"
              "ok, why = s.bwrap_works()\n"
              "p = s.run_sandboxed(s.PROBE)\n"
              "print(json.dumps([ok, why, p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr]))\n")
    try:
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c", script],
                           capture_output=True, text=True, timeout=120, cwd="/")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    ok, why, inside = json.loads(p.stdout.strip().splitlines()[-1])
    assert ok, why
    seen = json.loads(inside)
    assert seen["uid"] == NOBODY and {k: seen[k] for k in sandbox.PROBE_WANTS} == sandbox.PROBE_WANTS, seen


def test_no_filter_no_grading(monkeypatch):
    """Where the syscall filter cannot be built (another architecture, no libseccomp), grading is refused."""
    monkeypatch.setattr(sandbox, "seccomp_program", lambda: (None, "no syscall filter for this machine"))
    sandbox._probe.cache_clear()
    try:
        assert sandbox.bwrap_works() == (False, "no syscall filter for this machine")
        ok, line = sandbox.sandbox_status({"ATTNCOURSE_SANDBOX": "auto"})
        assert ok is None and "no syscall filter" in line
    finally:
        monkeypatch.undo()
        sandbox._probe.cache_clear()
