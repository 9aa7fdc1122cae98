"""The grading engine when a process misbehaves (issue 35 Build 2 and 4, issue 37 Build 2).

* A grading subprocess's output (nbgrader's, and its kernels', which nbgrader hands them) is kept in a capped file,
  never in the grader's memory (:mod:`instructor.capture`); the subprocess dies with the grader.
* The one engine, under either executor (a plain map, Dask), grades again alone what the machine kept from being
  graded, and says "not graded" (never 0) where the machine, not the notebook, is to blame; the canary's reason is
  the log line that names the cause.
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
    """300 MiB written by a grading subprocess: the old capture held all of it in the grader (one string of
    300 MiB); the capped sink keeps the first and the last MiB, says how much it dropped, and the grader's
    peak memory grows by a small part of it."""
    from instructor.capture import HEAD, TAIL

    old = _drive("old")
    # the old way held the whole flood: its text, all of it, was one string in the grader (its peak resident size
    # is no exact count of that: CI saw it grow by 295, a loaded run by 165 MiB of the 300, so it is not asserted)
    assert old["rc"] == 0 and old["chars"] > FLOOD_MB << 20 and old["first"] and old["last"], old
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


# -- the one engine's bookkeeping, under both executors (a stand-in task: no kernel starts) -------------------------
def fake_task(kit, student, files, duedate=None, settings=None):
    """Stands in for :func:`instructor.task.grade_task`: the next outcome ``kit["plan"]`` holds for ``student`` (each
    run recorded in ``kit["runs"]``): ("graded", _) returns the notebook as autograded, ("log", text) a run nbgrader
    could not grade with that log, ("raise", text) a task that raised (as a worker that died), ("slow", seconds) graded
    after that long, ("died", n) its kernel died while the OOM killer killed n processes."""
    import fcntl

    from judge.scratch import tree_hash

    with open(kit["plan"], "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        plan = json.load(f)
        kind, text = plan[student].pop(0)
        f.seek(0), f.truncate(), f.write(json.dumps(plan))
        with open(kit["runs"], "a") as runs:
            runs.write(student + "\n")
    if kind == "raise":
        raise RuntimeError(text)
    if kind == "died":   # its kernel died while the OOM killer killed ``text`` processes
        return {"section": kit["section"], "student": student, "hash": tree_hash(files), "kit": kit["hash"],
                "success": False, "faults": [], "files": {}, "gradebook": None, "log": KERNEL_DIED,
                "oom_kills": int(text)}
    if kind == "slow":   # graded, after ``text`` seconds
        time.sleep(float(text))
        kind = "graded"
    name = f"{kit['section']}.ipynb"
    out = {"section": kit["section"], "student": student, "hash": tree_hash(files), "kit": kit["hash"],
           "success": kind == "graded", "faults": [], "files": {}, "gradebook": None, "log": ""}
    if kind == "graded":
        out["files"] = {name: files[name]}
    else:
        out["log"] = text
    return out


OUT_OF_PROCESSES = "[AutogradeApp | ERROR] BlockingIOError: [Errno 11] Resource temporarily unavailable"
KERNEL_DIED = "[AutogradeApp | ERROR] nbclient.exceptions.DeadKernelError: Kernel died"
PLAN = {  # student: its runs' outcomes in turn
    "ann": [["graded", ""]],                                  # graded at once: one run
    "bob": [["log", OUT_OF_PROCESSES], ["log", OUT_OF_PROCESSES]],   # the machine's, twice: not graded
    "cat": [["log", KERNEL_DIED], ["log", KERNEL_DIED]],      # its kernel died alone too: its own doing, 0
    "fay": [["died", "0"]],                                   # died while nothing was killed for memory: one run, 0
    "gus": [["died", "1"], ["died", "0"]],                    # died as the OOM killer killed: again alone, then 0
    "dan": [["log", "[AutogradeApp | ERROR] ValueError: broken"]],   # its own failure: one run, its reason
    "eve": [["raise", "worker lost"], ["graded", ""]],        # the machine's once: graded alone
}


@pytest.fixture(params=["serial", "dask"])
def engine_run(request, tmp_path):
    """(executor, kits, course): a course of five submissions and the executor under test, running
    :func:`fake_task`."""
    from judge.scratch import new_gradebook
    from instructor.engine import OnDask, Serial
    from instructor.kit import kit_result

    course = Course(tmp_path / "c", [SECTION])
    src = slim(course.source_nb(SECTION))
    for s in PLAN:
        course.submit(s, SECTION, src)
    new_gradebook(course.root / "gradebook.db")
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    kits = {SECTION: {"section": SECTION, "hash": "kit", "plan": str(tmp_path / "plan.json"),
                      "runs": str(tmp_path / "runs.txt")}}
    if request.param == "serial":
        yield Serial(kits, task=fake_task), kits, course
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None,
                      scheduler_kwargs={"dashboard": False}) as lc, Client(lc) as client:
        yield OnDask(client, kits, task=fake_task, build=kit_result), kits, course   # (a kit of no course)


def test_one_engine_retries_the_machines_failures_alone_once(engine_run):
    """Under either executor: a notebook the machine kept from being graded (out of processes, a task that raised,
    a kernel that died) is graded again alone once the others are done; where the machine is still to blame it is
    "not graded" (no score, never 0); a kernel that died alone too scores 0 with its reason; a failure of the
    notebook's own (nbgrader's error) is not run again, and its reason is that run's own log line.  A kernel that
    died while the machine's OOM killer killed nothing (fay) died by its own doing: one run, 0 with its reason;
    one that died as the OOM killer killed (gus), or where that is not known (cat), is graded again alone."""
    from instructor.config import course_db, load_config
    from instructor.engine import ClassRun, run_tasks
    from instructor.kit import submission_files
    from instructor.outcome import format_report, section_report
    from instructor.task import TaskSettings

    ex, kits, course = engine_run
    db_url, course_id = course_db(course.root)
    run = ClassRun(course.root, TaskSettings(), db_url, course_id, load_config(course.root), log=lambda *a: None)
    todo = [(SECTION, s, submission_files(course.root, s, SECTION), None) for s in PLAN]
    state, results = {}, {SECTION: {}}
    run_tasks(ex, run, todo, {SECTION: "kit"}, state, results)
    runs = Path(kits[SECTION]["runs"]).read_text().split()
    again = {"bob", "cat", "eve", "gus"}
    assert sorted(runs) == sorted([*PLAN, *again]), runs
    assert set(runs[-len(again):]) == again   # the second runs: after every first one, alone
    st = section_report(course.root, SECTION, list(PLAN), results[SECTION], state, db_url, course_id, True,
                        "kernels sandboxed (test)")["students"]
    assert not st["ann"]["not_graded"] and not st["eve"]["not_graded"] and not st["ann"]["reasons"], st
    assert st["bob"]["not_graded"] == "not graded: the machine ran out, twice: BlockingIOError: [Errno 11] Resource " \
                                      "temporarily unavailable", st["bob"]
    assert not st["cat"]["not_graded"] and any("kernel died" in r for r in st["cat"]["reasons"]), st["cat"]
    for s in ("fay", "gus"):
        assert not st[s]["not_graded"] and any("kernel died" in r for r in st[s]["reasons"]), st[s]
    assert st["dan"]["reasons"] == ["autograde failed: ValueError: broken"] and not st["dan"]["not_graded"]
    assert state[SECTION]["bob"]["hash"] is None    # graded again next run
    text = format_report({"section": SECTION, "students": st, "seconds": 1})
    assert "bob                      not graded" in text and "cat                      0 /" in text, text


class FakeGate:
    """Stands in for :class:`instructor.canary.Gate` (its interface, no notebook): two canaries, whose verdict is
    ``ok``; what had been recorded when the verdict came is kept in ``recorded_before``."""

    def __init__(self, results: dict, ok: bool, files: dict):
        from instructor.task import TaskSettings

        self.settings, self.results, self.ok, self.files = TaskSettings(), results, ok, files
        self.back, self.problems, self.recorded_before = [], None, None

    def items(self):
        return [(SECTION, s, self.files) for s in ("canary-solution", "canary-blank")]

    def add(self, section, student, result, exc=None):
        self.back.append(student)
        if len(self.back) == 2:
            self.recorded_before = sum(map(len, self.results.values()))
            self.problems = [] if self.ok else [f"{SECTION}: the instructor's solution scored 0 / 24 here: broken"]

    def passed(self):
        return self.problems == []

    def refuse(self):
        from instructor.canary import refuse

        refuse(self.problems)


@pytest.mark.parametrize("ok", [True, False], ids=["canary-passes", "canary-fails"])
def test_no_grade_is_written_before_the_canary_passes(engine_run, ok):
    """The canaries go first in the run's one stream and students are graded beside them: a student whose result
    comes back before the canary's (on Dask, ann beside the slow solution) waits for it.  Where the canary passes,
    everyone is recorded after it; where it fails, the run stops (CourseError) with nothing recorded: no result, no
    state, no autograded file, and the students not yet sent are never graded."""
    from instructor.config import CourseError, course_db, load_config
    from instructor.engine import ClassRun, run_tasks
    from instructor.kit import submission_files
    from instructor.task import TaskSettings

    ex, kits, course = engine_run
    plan_file = Path(kits[SECTION]["plan"])
    plan = {"canary-solution": [["slow", "1.5"]], "canary-blank": [["graded", ""]],
            **{s: [["slow", "1"]] for s in PLAN}}   # (a student a second beside the canary's 1.5 s)
    plan_file.write_text(json.dumps(plan))
    db_url, course_id = course_db(course.root)
    run = ClassRun(course.root, TaskSettings(), db_url, course_id, load_config(course.root), log=lambda *a: None)
    todo = [(SECTION, s, submission_files(course.root, s, SECTION), None) for s in PLAN]
    state, results = {}, {SECTION: {}}
    gate = FakeGate(results, ok, todo[0][2])
    if ok:
        run_tasks(ex, run, todo, {SECTION: "kit"}, state, results, gate)
    else:
        with pytest.raises(CourseError, match="canary failed, no student graded: .*broken"):
            run_tasks(ex, run, todo, {SECTION: "kit"}, state, results, gate)
    runs = Path(kits[SECTION]["runs"]).read_text().split()
    assert set(runs[:2]) == {"canary-solution", "canary-blank"}, runs   # first in the stream
    if ex.slots() > 1:   # beside the slow canary: graded before its verdict
        assert runs.index("ann") < len(runs) and gate.back == ["canary-blank", "canary-solution"], (runs, gate.back)
    assert gate.recorded_before == 0
    if ok:
        assert sorted(results[SECTION]) == sorted(PLAN) and sorted(state[SECTION]) == sorted(PLAN)
        assert sorted(p.name for p in (course.root / "autograded").iterdir()) == sorted(PLAN)
    else:
        assert results == {SECTION: {}} and state == {} and not (course.root / ".classgrade").exists()
        assert not (course.root / "autograded").exists()
        assert len(runs) < 2 + len(PLAN), runs   # the rest never sent


# the log of a canary whose kernel could not start (the classic launcher, a 40 MB memory limit), as nbgrader's
# Autograde left it: the old reason, the first line of its last 300 characters, was a fragment of a traceback
CANARY_LOG = """[INFO] Autograding /dev/shm/attncourse-task/autograded/canary-solution/02_qkv_by_hand/02_qkv_by_hand.ipynb
[ERROR] Error occurred while starting new kernel client for kernel bc70: Kernel died before replying to \
kernel_info: the grading kernel stopped (exit 134): Resource temporarily unavailable (src/thread.cpp:241)
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/judge/kernels.py", line 50, in _async_wait_for_ready
    raise RuntimeError("Kernel died before replying to kernel_info" + (f": {why}" if why else ""))
RuntimeError: Kernel died before replying to kernel_info: the grading kernel stopped (exit 134): Resource \
temporarily unavailable (src/thread.cpp:241)
[WARNING] Removing failed assignment: /dev/shm/attncourse-task/autograded/canary-solution/02_qkv_by_hand
[ERROR] There was an error processing assignment '02_qkv_by_hand' for student 'canary-solution'
[ERROR] Please see the the above traceback for details on the specific errors on the above failures.
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/nbgrader/utils.py", line 542, in capture_log
    app.start()
  File "/venv/lib/python3.11/site-packages/nbgrader/converters/base.py", line 132, in start
    self.convert_notebooks()
  File "/venv/lib/python3.11/site-packages/nbgrader/converters/base.py", line 468, in convert_notebooks
    raise NbGraderException(msg)
nbgrader.converters.base.NbGraderException: Please see the the above traceback for details on the specific errors \
on the above failures.
""".replace("\\\n", "")


def test_the_canarys_reason_is_the_line_that_names_the_cause():
    """The kernel died before it replied: the reason names it with its exit status and last line; the old cut
    (``first_line(log[-300:])``) gave a piece of nbgrader's traceback.  A refused run and a stopped kernel are named
    the same way; a log with no such line gives nbgrader's last error, never a fragment."""
    from judge.autograded import first_line
    from instructor.canary import why

    old = first_line(CANARY_LOG[-300:], 300)
    assert "kernel" not in old.lower(), old
    assert why({"log": CANARY_LOG}) == ("Kernel died before replying to kernel_info: the grading kernel stopped "
                                        "(exit 134): Resource temporarily unavailable (src/thread.cpp:241)")
    refused = "[ERROR] x\nTraceback\n  grading refused: the sandbox cannot start here (no bwrap). Install\n[ERROR] y"
    assert why({"log": refused}).startswith("grading refused: the sandbox cannot start here (no bwrap)")
    assert why({"log": "[INFO] a\n[AutogradeApp | ERROR] ValueError: broken\n  trailing"}) == "ValueError: broken"
    assert why({"faults": ["grading failed: worker died"], "log": CANARY_LOG}) == "grading failed: worker died"


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
    assert isinstance(out["oom_kills"], int) and isinstance(honest["oom_kills"], int)   # (what retry_alone reads)


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
