"""deploy/course_exchange.py without a hub, as one account: what collect takes of a submission folder, file by file,
and when; submit all or nothing; release_feedback and list that one student cannot break.

(The exchange with real accounts, each trick played by a student and paired with nbgrader's own exchange, is in
tests/test_hub.py; nbgrader's own exchange tests on it, in tests/test_peer_exchange.py.)"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from deploy import course_exchange as ex

COURSE, ME = "abc101", pwd.getpwuid(os.getuid()).pw_name
OURS = [f"--ExchangeFactory.{k}=deploy.course_exchange.{v}" for k, v in (
    ("submit", "ExchangeSubmit"), ("collect", "ExchangeCollect"), ("list", "ExchangeList"),
    ("release_feedback", "ExchangeReleaseFeedback"), ("exchange", "Exchange"))]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "sub"
    d.mkdir()
    (d / "nb.ipynb").write_bytes(b"{}")
    return d


def test_a_regular_file_of_its_owner_is_read(folder):
    data, why, ctime = ex.read_own_file(str(folder / "nb.ipynb"), os.getuid(), 100)
    assert (data, why) == (b"{}", "") and ctime == os.stat(folder / "nb.ipynb").st_ctime_ns


@pytest.mark.parametrize("trick, why", [
    ("symlink", "a link"), ("hardlink", "a hard link"), ("fifo", "not a regular file"),
    ("too_big", "larger than 100 bytes"), ("other_owner", "not the student's own file"), ("missing", "missing"),
])
def test_anything_else_is_left_out_with_its_reason(folder, tmp_path, trick, why):
    target = tmp_path / "instructor-solution.ipynb"
    target.write_bytes(b"### BEGIN SOLUTION")
    path = folder / "x.ipynb"
    if trick == "symlink":
        path.symlink_to(target)
    elif trick == "hardlink":
        os.link(folder / "nb.ipynb", path)
    elif trick == "fifo":
        os.mkfifo(path)
    elif trick == "too_big":
        path.write_bytes(b"x" * 101)
    elif trick == "other_owner":
        path.write_bytes(b"{}")
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(path, 65534, 65534)
    data, reason, _ = ex.read_own_file(str(path), os.getuid(), 100)
    assert data is None and reason == why
    # the pairing: the same file read the ordinary way (what nbgrader's copytree does) gives its bytes
    if trick in ("symlink", "hardlink", "too_big", "other_owner"):
        assert path.read_bytes()


def test_config_lines_name_every_operation_of_nbgrader():
    from nbgrader.exchange.exchange_factory import ExchangeFactory

    kinds = set(ExchangeFactory.class_trait_names(config=True))
    lines = ex.config_lines()
    assert {k for k in kinds if f"c.ExchangeFactory.{k} = 'course_exchange." in lines} == kinds, lines


# -- the exchange's commands, as one account (instructor and student alike) ------------------------------------
class Course:
    """A course folder (ps1 released: p1.ipynb), the hub's exchange layout, a student's folder (this account)."""

    def __init__(self, tmp: Path, exchange: Path | None = None):
        from deploy.hub import make_exchange

        self.tmp, self.root = tmp, tmp / "course"
        self.exchange = exchange or tmp / "exchange"
        self.exchange.mkdir(exist_ok=True)
        make_exchange(self.exchange, COURSE, ME, [ME], root_owner=os.getuid())
        self.cache, self.work = tmp / "cache", tmp / "work"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
        for d in (self.root / "release" / "ps1", self.work / "ps1"):
            d.mkdir(parents=True)
            nbformat.write(nb, str(d / "p1.ipynb"))
        for d in (self.root, self.work):
            (d / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.root = {str(self.root)!r}\n")
        shutil.copytree(self.root / "release" / "ps1", self.exchange / COURSE / "outbound" / "ps1")   # released
        self.inbound = self.exchange / COURSE / "inbound" / ME

    def nbgrader(self, *args, cwd=None, retcode=0) -> str:
        """An nbgrader command on the course's exchange, in a child process (as ``./course hub``'s users run them)."""
        cmd = [sys.executable, "-m", "nbgrader", *args, "--course", COURSE, f"--Exchange.root={self.exchange}",
               f"--Exchange.cache={self.cache}", *OURS]
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "/usr/bin:/bin")])   # alembic
        env["JUPYTER_CONFIG_DIR"] = str(self.tmp / "jupyter-config")
        proc = subprocess.run(cmd, cwd=cwd or self.root, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == retcode, proc.stdout + proc.stderr
        return proc.stdout + proc.stderr

    def submit(self, retcode=0) -> str:
        return self.nbgrader("submit", "ps1", cwd=self.work, retcode=retcode)

    def submissions(self) -> list[Path]:
        return sorted(p for p in self.inbound.iterdir())

    def collected(self) -> Path:
        return self.root / "submitted" / ME / "ps1"


@pytest.fixture
def course(tmp_path):
    return Course(tmp_path)


RACER = r"""
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x20)      # IN_OPEN: collect opened the submission folder
print("watching", flush=True)
os.read(fd, 4096)
late = time.time_ns()
with open(os.path.join(sys.argv[1], "p1.ipynb"), "w") as f:  # the late notebook, written in collect's window
    f.write(sys.argv[2])
print(late, flush=True)
"""


def test_collect_takes_the_bytes_and_the_time_from_one_open_file(course):
    """The race: a student watches their submission folder with inotify and rewrites the notebook the moment
    collect opens the folder (collect read the times long before the bytes: 4 of 4 late notebooks stamped on
    time). The late bytes are never collected with an earlier time. Paired with the honest base: without the
    rewrite the notebook and the submission's time are collected as submitted."""
    course.submit()
    sub, = course.submissions()
    said = json.dumps(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 'late'")]))
    time.sleep(0.05)
    racer = subprocess.Popen([sys.executable, "-c", RACER, str(sub), said], stdout=subprocess.PIPE, text=True)
    assert racer.stdout.readline().strip() == "watching"
    course.nbgrader("collect", "ps1")
    late = int(racer.stdout.readline())
    racer.wait(timeout=30)
    taken = course.collected() / "p1.ipynb"
    got = taken.read_text() if taken.exists() else ""   # (a notebook read half-written is no notebook: left out)
    when = ex.format_time(ex.kernel_time(late))
    stamped = (course.collected() / "timestamp.txt").read_text() if got else "-"
    print(f"rewritten at {when}; collected {'the late' if 'late' in got else 'the submitted' if got else 'no'} "
          f"notebook, at {stamped}")
    if "late" in got:
        assert stamped >= when[:22], (stamped, when)   # (to the 1/10000 s: the kernel's clock is coarser)
    elif got:
        assert stamped < when, (stamped, when)
    # the honest base: a new submission, nobody writing: its notebook, and the time its submit recorded
    shutil.rmtree(course.root / "submitted", ignore_errors=True)   # (none where a half-written notebook was left out)
    shutil.rmtree(course.cache)
    for p in course.submissions():
        shutil.rmtree(p)
    log = course.submit()
    course.nbgrader("collect", "ps1")
    stamped = (course.collected() / "timestamp.txt").read_text()
    assert "x = 1" in (course.collected() / "p1.ipynb").read_text()
    assert f"Submitted as: {COURSE} ps1 {stamped}" in log, (stamped, log)
    # ... the very time the student's copy is filed under (fetch_feedback files the feedback there)
    assert [p.name for p in (course.cache / COURSE).iterdir()] == [f"{ME}+ps1+{stamped}"]


def test_a_link_anywhere_below_inbound_is_refused(course):
    """The submission folder swapped for a link to another folder (2 of 2 on time before): left out, named in the
    log; paired with the same folder as a real folder, collected."""
    course.submit()
    sub, = course.submissions()
    real = course.tmp / "elsewhere"
    sub.rename(real)
    sub.symlink_to(real)
    log = course.nbgrader("collect", "ps1")
    assert not course.collected().exists() and f"Left out {sub}" in log, log
    sub.unlink()
    real.rename(sub)
    course.nbgrader("collect", "ps1")
    assert (course.collected() / "p1.ipynb").is_file()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounts a small filesystem (root)")
@pytest.mark.slow
def test_a_submit_that_fails_midway_leaves_nothing_collect_would_take(tmp_path):
    """A full disk mid-submit (it left a 0-byte notebook that collect took as the newest submission): the
    submit fails saying nothing was submitted, and collect takes the earlier complete one. Paired: with room,
    the same submit succeeds and is collected."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,nr_inodes=200", "tmpfs", str(exchange)], check=True)
    try:
        course = Course(tmp_path, exchange)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("y = 0")]),
                       str(course.work / "ps1" / "p1.ipynb"))
        course.submit()
        first = course.submissions()
        filler = exchange / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)    # the disk is full but for a few KiB
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
        os.truncate(filler, max(0, filler.stat().st_size - 8192))
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = '%s'" % ("a" * 60000))]),
                       str(course.work / "ps1" / "p1.ipynb"))
        log = course.submit(retcode=1)
        assert "Nothing was submitted" in log and course.submissions() == first, (log, course.submissions())
        course.nbgrader("collect", "ps1")
        assert "y = 0" in (course.collected() / "p1.ipynb").read_text()
        filler.unlink()   # the pairing: with room, the same submit is collected
        course.submit()
        course.nbgrader("collect", "ps1", "--update")
        assert "a" * 60000 in (course.collected() / "p1.ipynb").read_text()
    finally:
        subprocess.run(["umount", "-l", str(exchange)], check=False)


@pytest.mark.slow
def test_a_notebook_that_is_not_one_is_passed_over_for_the_students_previous_submission(course):
    """A submission whose notebook is 0 bytes (or not JSON) is left out with its reason and the student's next
    newest taken; paired with a newer valid one, which is taken."""
    course.submit()
    time.sleep(0.05)
    course.submit()
    older, newer = sorted(course.submissions(), key=lambda p: p.stat().st_ctime_ns)
    (newer / "p1.ipynb").write_bytes(b"")
    log = course.nbgrader("collect", "ps1")
    assert f"Left out {newer / 'p1.ipynb'}: not a notebook (0 bytes)" in log, log
    assert (course.collected() / "timestamp.txt").read_text() == ex.format_time(ex.folder_time(str(older)))
    shutil.copy(older / "p1.ipynb", newer / "p1.ipynb")
    course.nbgrader("collect", "ps1", "--update")
    assert (course.collected() / "timestamp.txt").read_text() == ex.format_time(ex.folder_time(str(newer)))


@pytest.mark.slow
def test_list_inbound_shows_the_kernels_time_and_remove_takes_a_submission_out(course):
    """``list --inbound`` showed the time in the folder's name, which the student chooses; it shows the kernel's.
    ``--remove`` takes it out of the listing and of collect."""
    course.submit()
    sub, = course.submissions()
    forged = sub.with_name(f"{ME}+ps1+2000-01-01 00:00:00.000000 UTC+x")
    sub.rename(forged)
    log = course.nbgrader("list", "--inbound")
    assert "2000-01-01" not in log and ex.format_time(ex.folder_time(str(forged))) in log, log
    course.nbgrader("list", "--inbound", "--remove")
    assert f"{ME} ps1" not in course.nbgrader("list", "--inbound")
    assert "No submissions" in course.nbgrader("collect", "ps1")


@pytest.mark.slow
@pytest.mark.parametrize("secret", ["missing", "invalid"])
def test_release_feedback_leaves_out_only_the_student_whose_secret_is_missing_or_invalid(course, secret):
    """Deleting submission_secret.txt from one's own submission crashed release_feedback (1 of 3 released): that
    student is a line in the log; the classmates' feedback is released (paired: all three with valid secrets)."""
    students = ["ann", "bob", "cat"]
    secrets_ = {}
    for s in students:
        d = course.root / "feedback" / s / "ps1"
        d.mkdir(parents=True)
        (d / "p1.html").write_text(f"<p>{s}</p>")
        (d / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
        secrets_[s] = os.urandom(64).hex()
        (d / "submission_secret.txt").write_text(secrets_[s])
    released = course.exchange / COURSE / "feedback"
    course.nbgrader("release_feedback", "ps1")
    assert len(list(released.iterdir())) == 3
    for p in released.iterdir():
        p.unlink()
    bad = course.root / "feedback" / "bob" / "ps1" / "submission_secret.txt"
    bad.unlink() if secret == "missing" else bad.write_text("../../outbound/x")
    log = course.nbgrader("release_feedback", "ps1")
    assert "Left out the feedback of bob" in log, log
    from nbgrader.utils import notebook_hash

    assert sorted(p.name for p in released.iterdir()) == sorted(
        f"{notebook_hash(secret=secrets_[s], notebook_id='p1')}.html" for s in ("ann", "cat"))
