"""The grading engine when a process misbehaves (issue 35 Build 2 and 4, issue 37 Build 2).

* A grading subprocess's output (nbgrader's, and its kernels', which nbgrader hands them) is kept in a capped file,
  never in the grader's memory (:mod:`instructor.capture`); the subprocess dies with the grader.
* The serial path counts every nbgrader run's status, grades again alone what a batch could not grade, and says
  "not graded" (never 0) where the machine, not the notebook, is to blame.
* The watchdog stops a runaway kernel forked by the fork server (the default), and the fork server's start
  deadline holds while it waits.

Each protection is paired with the old way, which fails the same check.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import CORPUS_CELL, CORPUS_SECTION, ROOT, Course, slim, with_cells

SECTION = CORPUS_SECTION
FLOOD_MB = 300
# a child that writes FLOOD_MB MiB to its stdout, with a marker at each end
FLOOD = (f"import os\nos.write(1, b'FIRST-LINE\\n')\nblock = b'x' * (1 << 20)\n"
         f"for _ in range({FLOOD_MB}):\n    os.write(1, block)\nos.write(1, b'\\nLAST-LINE\\n')\n")
# the grader's side: run the flood the old way (capture_output) or through instructor.capture; report its peak memory
DRIVER = r"""
import json, resource, subprocess, sys
sys.path.insert(0, sys.argv[2])
from instructor import capture
flood = sys.argv[3]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[1] == "old":
    p = subprocess.run([sys.executable, "-c", flood], capture_output=True, text=True)
    text = p.stdout + p.stderr
else:
    p = capture.run([sys.executable, "-c", flood])
    text = p.stdout
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rc": p.returncode, "grew_mb": (after - before) / 1024, "chars": len(text),
                  "first": "FIRST-LINE" in text, "last": "LAST-LINE" in text, "dropped": "bytes of output dropped" in text}))
"""


def _drive(way: str) -> dict:
    p = subprocess.run([sys.executable, "-c", DRIVER, way, str(ROOT), FLOOD], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_flood_of_output_never_reaches_the_graders_memory():
    """300 MiB written by a grading subprocess: the old capture held all of it in the grader (its peak memory grew
    by more than that); the capped sink keeps the first and the last MiB, says how much it dropped, and the grader's
    peak memory grows by a small part of it."""
    from instructor.capture import HEAD, TAIL

    old = _drive("old")
    # the old way held the whole flood (CI saw its peak grow by 295 MiB of the 300: the measure is the process's
    # peak resident size, not an exact count of the bytes held)
    assert old["rc"] == 0 and old["grew_mb"] >= FLOOD_MB * 3 / 4 and old["chars"] > FLOOD_MB << 20, old
    new = _drive("capped")
    assert new["rc"] == 0 and new["first"] and new["last"] and new["dropped"], new
    assert new["chars"] <= HEAD + TAIL + 200, new
    assert new["grew_mb"] < FLOOD_MB / 4, new


# a grader that starts a long child, says the child's pid, then waits (the old way or instructor.capture's)
PARENT = r"""
import subprocess, sys
sys.path.insert(0, sys.argv[2])
from instructor import capture
child = [sys.executable, "-c", "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)",
         sys.argv[3]]
if sys.argv[1] == "old":
    subprocess.run(child, capture_output=True)
else:
    capture.run(child)
"""


def _child_of_killed_grader(way: str, tmp_path: Path) -> int:
    """Start the grader, wait for its child, SIGKILL the grader (as the OOM killer did); the child's pid."""
    import psutil

    pidfile = tmp_path / f"{way}.pid"
    grader = subprocess.Popen([sys.executable, "-c", PARENT, way, str(ROOT), str(pidfile)])
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and grader.poll() is None, "the grader's child never started"
        time.sleep(0.1)
    pid = int(pidfile.read_text().split()[0])
    assert psutil.pid_exists(pid)
    grader.kill()
    grader.wait()
    return pid


def _gone(pid: int, within: float = 30.0) -> bool:
    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_a_grader_that_dies_takes_its_grading_subprocess_with_it(tmp_path):
    """The grader killed (SIGKILL, as the OOM killer ended ``./course grade --serial``): the nbgrader it started
    through :func:`instructor.capture.run` dies with it, so no orphaned batch goes on writing grades; started the
    old way, the child outlives it."""
    pid = _child_of_killed_grader("old", tmp_path)
    try:
        assert not _gone(pid, within=3.0), "the old way's child died with its grader: the pairing shows nothing"
    finally:
        os.kill(pid, signal.SIGKILL)
    pid = _child_of_killed_grader("capped", tmp_path)
    assert _gone(pid), "the grading subprocess outlived its grader"


def test_a_subprocess_past_its_time_is_stopped_with_its_whole_group(tmp_path):
    """capture.run's timeout: return code 124, "TIMEOUT", and the child's own children (its process group) gone."""
    from instructor import capture

    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\ntime.sleep(600)\n")
    got = capture.run([sys.executable, "-c", code], timeout=10)
    assert got.returncode == 124 and got.stdout.endswith("TIMEOUT"), got
    assert _gone(int(pidfile.read_text()))


# -- the serial path's bookkeeping (nbgrader stood in for: no kernel starts) ----------------------------------------
@pytest.fixture
def small_course(tmp_path, monkeypatch):
    """Three submissions of a section; nbgrader replaced by :func:`fake_nbgrader`'s script."""
    from instructor import serial
    from judge.scratch import new_gradebook

    course = Course(tmp_path / "c", [SECTION])
    src = slim(course.source_nb(SECTION))
    for s in ("ann", "bob", "cat"):
        course.submit(s, SECTION, src)
    new_gradebook(course.root / "gradebook.db")
    monkeypatch.setattr(serial, "sandbox_status", lambda env=None: (True, "kernels sandboxed (test)"))
    return course


def fake_nbgrader(monkeypatch, outcomes: dict):
    """``run_nbgrader`` replaced: ``outcomes[student or ""]`` is a list of (returncode, log, graded) for its runs in
    turn; a graded run writes the student's autograded notebook as nbgrader would.  Returns the runs made."""
    from instructor import serial

    made = []

    def run(root, args, timeout=None, env=None):
        student = next((a.split("=", 1)[1] for a in args if a.startswith("--student=")), "")
        rc, log, graded = outcomes[student].pop(0)
        made.append((student, rc))
        for s in (([student] if graded else []) if student else graded):
            dest = Path(root) / "autograded" / s / SECTION
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(root) / "submitted" / s / SECTION / f"{SECTION}.ipynb", dest)
        return subprocess.CompletedProcess(["nbgrader", *args], rc, log, "")

    monkeypatch.setattr(serial, "run_nbgrader", run)
    return made


def test_serial_counts_every_students_return_code(small_course, monkeypatch):
    """Two of three students graded one by one: the first run fails, the last succeeds; the report's status is
    the failure (it kept only the last run's 0), and every run's status is listed."""
    from instructor.serial import grade

    made = fake_nbgrader(monkeypatch, {"ann": [(1, "[AutogradeApp | ERROR] ValueError: broken", False)],
                                       "bob": [(0, "", True)]})
    report = grade(SECTION, small_course.root, students=["ann", "bob"], log=lambda *a: None)
    assert made == [("ann", 1), ("bob", 0)]   # ann's failure is its own: no second run
    assert report["batch_returncode"] == 1 and report["returncodes"] == {"ann": 1, "bob": 0}, report
    assert "ValueError: broken" in " ".join(report["students"]["ann"]["reasons"])
    assert not report["students"]["ann"]["not_graded"]


def test_serial_grades_again_alone_what_a_dead_batch_left(small_course, monkeypatch):
    """The batch was killed before it reached anyone (as the OOM killer ended it): each student is graded again
    alone.  One is graded then; one whose run is stopped again is "not graded" (no score, not 0); one whose kernel
    died alone keeps nbgrader's reason (its own doing)."""
    from instructor.outcome import format_report
    from instructor.serial import grade

    made = fake_nbgrader(monkeypatch, {
        "": [(-9, "[AutogradeApp | INFO] Converting notebook ann", [])],
        "ann": [(0, "", True)],
        "bob": [(-9, "", False)],
        "cat": [(1, "[AutogradeApp | ERROR] nbclient.exceptions.DeadKernelError: Kernel died", False)]})
    report = grade(SECTION, small_course.root, log=lambda *a: None)
    assert made == [("", -9), ("ann", 0), ("bob", -9), ("cat", 1)], made
    st = report["students"]
    assert report["batch_returncode"] == -9
    assert not st["ann"]["not_graded"]
    assert st["bob"]["not_graded"] and st["bob"]["not_graded"].startswith("not graded: its nbgrader run was stopped")
    assert "cells" not in st["bob"]
    assert not st["cat"]["not_graded"] and any("kernel died" in r for r in st["cat"]["reasons"]), st["cat"]
    text = format_report(report)
    assert "bob                      not graded" in text and "cat                      0 /" in text, text


# -- the watchdog and the fork server -------------------------------------------------------------------------------
def _old_kernel_processes() -> list:
    """instructor.task.kernel_processes before issue 37: kernels by "ipykernel" or "sandbox.py" in the command line."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any("ipykernel" in part or "sandbox.py" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


RUNAWAY = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)   # nbgrader's interrupt does nothing\n"
           "while True:\n    pass\n")


@pytest.mark.slow   # a fork server, a runaway notebook stopped by the watchdog, an honest one
def test_the_watchdog_stops_a_runaway_forked_kernel(tmp_path):
    """A notebook looping with SIGINT ignored (nbgrader's cell timeout interrupts it in vain) on the default path, a
    kernel forked by the fork server: the watchdog finds its client and stops it, the task returns with the fault.
    The old search never saw it (no "ipykernel" or "sandbox.py" in a forked kernel's command line).  An honest
    notebook graded the same way keeps full marks."""
    from judge import sandbox, zygote
    from instructor.kit import make_kit, submission_files
    from instructor.task import TaskSettings, grade_task, kernel_processes, task_environment

    if not sandbox.sandbox_status()[0] or os.environ.get(zygote.FORKSERVER_ENV, "1") == "0":
        pytest.skip("the fork server's path needs the sandbox")
    course = Course(tmp_path / "c", [SECTION])
    course.generate(SECTION)
    src = slim(course.source_nb(SECTION))
    course.submit("runaway", SECTION, with_cells(src, {CORPUS_CELL: RUNAWAY}))
    course.submit("honest", SECTION, src)
    kit = make_kit(course.root, SECTION)
    _, env = task_environment({"ATTNCOURSE_CHECK_TIMEOUT": "30"})
    settings = TaskSettings(timeout=600, task_timeout=20, env=env)   # the cell limit never comes first
    seen = {"new": [], "old": []}
    out = {}
    task = threading.Thread(target=lambda: out.update(grade_task(kit, "runaway", submission_files(
        course.root, "runaway", SECTION), settings=settings)), daemon=True)
    task.start()
    while task.is_alive() and not seen["new"]:
        seen["old"] += [p.pid for p in _old_kernel_processes()]
        seen["new"] += [" ".join(p.cmdline()) for p in kernel_processes()]
        time.sleep(0.2)
    task.join(timeout=600)
    assert not task.is_alive(), "the watchdog did not stop the runaway kernel"
    assert seen["new"] and all("zygote.py" in c for c in seen["new"]), seen   # the forked kernel's client
    assert seen["old"] == [], seen                                          # the old search found nothing
    assert any("grading took longer than 20 s" in f for f in out["faults"]), out["faults"]
    assert not out["files"] and not kernel_processes()
    honest = grade_task(kit, "honest", submission_files(course.root, "honest", SECTION), settings=settings)
    scores = [g["auto_score"] for nb in honest["gradebook"]["notebooks"].values() for g in nb["grades"].values()
              if g["auto_score"] is not None]
    full = [g["max_score"] for nb in honest["gradebook"]["notebooks"].values() for g in nb["grades"].values()
            if g["auto_score"] is not None]
    assert honest["success"] and not honest["faults"] and scores == full and sum(scores) > 0, honest["faults"]


def test_the_fork_servers_start_deadline_holds_while_it_waits():
    """A server that never says "ready": :func:`judge.zygote.first_line` gives up at its deadline, while the old
    ``readline()`` is still waiting (a thread reading the same kind of pipe)."""
    from judge.zygote import first_line

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdout=subprocess.PIPE)
             for _ in range(2)]
    try:
        old = threading.Thread(target=procs[0].stdout.readline, daemon=True)
        old.start()
        assert first_line(procs[1].stdout, time.monotonic() + 1.0) == b""
        assert old.is_alive()          # the old way: still blocked past the deadline
        ready = subprocess.Popen([sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(60)"],
                                 stdout=subprocess.PIPE)
        procs.append(ready)
        assert first_line(ready.stdout, time.monotonic() + 120).strip() == b"ready"
    finally:
        for p in procs:
            p.kill()
            p.wait()
