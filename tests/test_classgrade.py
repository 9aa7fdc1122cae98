"""Grading a class on Dask (instructor/cluster.py, `./course grade`) into one gradebook.

One small class of section 02 (slim notebooks: a correct one, a known mistake, a
kernel that dies, a notebook that is not JSON, a late one) is graded twice: by plain serial ``nbgrader autograde`` and by
``./course grade``'s Dask engine with two workers (plus one student whose worker
dies).  Every assertion below reads those two runs; only the PostgreSQL test and
the incremental re-run grade again (a few notebooks each).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import CORPUS_CELL, CORPUS_SECTION, ROOT, Course, slim, tree_hashes, with_cells

pytestmark = pytest.mark.xdist_group("classgrade")
SECTION = CORPUS_SECTION


def _class(course: Course):
    """The same submissions in any course folder: ordinary ones, faults, and two tricks (tests/corpus)."""
    import copy

    from tests.corpus import f_kernel_dies, t_hook_partial_credit, t_link_overwrite, t_link_reference
    from tests.corpus._base import WRONG

    src = slim(course.source_nb(SECTION))
    release = slim(course.release_nb(SECTION))
    subs = {"good": src, "wrong": with_cells(src, {CORPUS_CELL: WRONG}),
            "dies": with_cells(src, {CORPUS_CELL: f_kernel_dies.SDPA}),
            "late": with_cells(src, {CORPUS_CELL: WRONG}), "notjson": "{ not json",
            # a blank release + a hook claiming full marks; links planted in the submission and by the kernel
            "hook": t_hook_partial_credit.build(copy.deepcopy(release)), "blank": release,
            "links": with_cells(src, {CORPUS_CELL: t_link_overwrite.SDPA + t_link_reference.SDPA})}
    for student, nb in subs.items():
        course.submit(student, SECTION, nb)
    t_link_reference.extra_files(course.root, course.root / "submitted" / "links" / SECTION)
    (course.root / "submitted" / "late" / SECTION / "timestamp.txt").write_text("2026-12-05 12:00:00.000000 UTC")
    return subs


def _set_duedate(course: Course):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        gb.update_or_create_assignment(SECTION, duedate="2026-12-01 00:00:00 UTC")


def _snapshot(db_url: str, section: str = SECTION) -> dict:
    """Everything autograde stores per submission: timestamps, per-cell scores, flags, comments, penalties."""
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(db_url) as gb:
        for sub in gb.find_assignment(section).submissions:
            nbs = {}
            for nb in sub.notebooks:
                nbs[nb.name] = {
                    "grades": {g.name: (g.auto_score, g.max_score, g.needs_manual_grade) for g in nb.grades},
                    "comments": {c.name: c.auto_comment for c in nb.comments},
                    "late": nb.late_submission_penalty}
            out[sub.student.id] = {"timestamp": str(sub.timestamp), "score": sub.score, "notebooks": nbs}
    return out


@pytest.fixture(scope="module")
def client():
    """One local Dask cluster (2 worker processes) for the module's grading runs."""
    from instructor.cluster import cluster

    with cluster(workers=2, log=lambda *a: None) as c:
        yield c


@pytest.fixture(scope="module")
def runs(tmp_path_factory, client):
    """(serial course, dask course, dask report): the class graded both ways."""
    from instructor.engine import grade_class

    tmp = tmp_path_factory.mktemp("classgrade")
    serial = Course(tmp / "serial", [SECTION])
    serial.generate(SECTION)
    _set_duedate(serial)
    _class(serial)
    serial.submitted_before = tree_hashes(serial.root / "submitted")
    serial.autograde(SECTION, check=False)

    par = Course(tmp / "dask", [SECTION])
    par.generate(SECTION)
    _set_duedate(par)
    _class(par)
    # the machine's trouble, as the Dask engine sees it: a worker that dies whenever it grades one notebook (as
    # one that takes the machine's memory), and one that died once while grading an honest notebook beside it
    par.submit("worker_dies", SECTION, slim(par.source_nb(SECTION)))
    par.submit("flaky", SECTION, slim(par.source_nb(SECTION)))
    par.submitted_before = tree_hashes(par.root / "submitted")
    die = f"worker_dies,flaky@{tmp / 'flaky-worker-died'}"
    reports = grade_class(par.root, [SECTION], client=client, feedback=True, log=lambda *a: None,
                          extra_env={"ATTNCOURSE_CLASSGRADE_DIE_FOR": die})
    assert (tmp / "flaky-worker-died").exists()   # (its worker did die once)
    return serial, par, reports[SECTION]


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """The same class graded by the one engine's other executor, the plain map in this process (``--serial``)."""
    from instructor.engine import grade_class

    course = Course(tmp_path_factory.mktemp("classgrade-serial") / "c", [SECTION])
    course.generate(SECTION)
    _set_duedate(course)
    _class(course)
    report = grade_class(course.root, [SECTION], serial=True, canary=False, log=lambda *a: None)[SECTION]
    return course, report


@pytest.mark.slow
def test_serial_executor_gradebook_matches_plain_nbgrader_autograde(runs, serial_run):
    """The one engine's plain map records, with nbgrader's own SaveAutoGrades and AssignLatePenalties, the gradebook
    plain ``nbgrader autograde`` makes of the same class (every score, flag, comment, late penalty), and the same
    autograded notebooks; its report says the same as the Dask executor's."""
    plain, _, dask_report = runs
    course, report = serial_run
    assert _snapshot(f"sqlite:///{course.root / 'gradebook.db'}") == _snapshot(f"sqlite:///{plain.root / 'gradebook.db'}")
    for s in ("good", "wrong", "late"):
        assert plain.messages(SECTION, s) == course.messages(SECTION, s), s
    assert report["engine"] == "serial"
    keys = ("score", "max_score", "not_graded", "failures")
    for s, entry in report["students"].items():
        assert {k: entry[k] for k in keys} == {k: dask_report["students"][s][k] for k in keys}, s


@pytest.mark.slow
def test_dask_gradebook_matches_plain_nbgrader_autograde(runs):
    serial, par, report = runs
    a = _snapshot(f"sqlite:///{serial.root / 'gradebook.db'}")
    b = _snapshot(f"sqlite:///{par.root / 'gradebook.db'}")
    b.pop("worker_dies", None)
    flaky = b.pop("flaky")   # graded again alone after its worker died: as the same notebook graded at once
    assert flaky["notebooks"] == b["good"]["notebooks"] and flaky["score"] == b["good"]["score"] > 0
    assert set(a) == {"good", "wrong", "dies", "late", "notjson", "hook", "blank", "links"}, set(a)
    assert a == b
    assert a["good"]["score"] == report["students"]["good"]["max_score"] > 0
    assert 0 < a["wrong"]["score"] < a["good"]["score"]
    # the same autograded notebooks on disk (what formgrader and generate_feedback read)
    for s in ("good", "wrong", "late"):
        pa = serial.root / "autograded" / s / SECTION / f"{SECTION}.ipynb"
        pb = par.root / "autograded" / s / SECTION / f"{SECTION}.ipynb"
        assert pa.is_file() and pb.is_file(), s
        assert serial.messages(SECTION, s) == par.messages(SECTION, s), s


@pytest.mark.slow
def test_tricks_earn_nothing_on_either_path(runs):
    """Serial nbgrader and the Dask engine alike: the hook scores what the blank release scores, the links what
    the same wrong code scores; no submission changed, the gradebook whole, nothing linked in autograded/."""
    serial, par, report = runs
    for course in (serial, par):
        got = _snapshot(f"sqlite:///{course.root / 'gradebook.db'}")
        assert got["hook"]["score"] == got["blank"]["score"] == 0, (got["hook"]["score"], got["blank"]["score"])
        assert got["links"]["score"] <= got["wrong"]["score"] < got["good"]["score"]
        assert tree_hashes(course.root / "submitted") == course.submitted_before
        links = [p for p in (course.root / "autograded").rglob("*") if p.is_symlink()]
        assert not links, links
    reasons = " ".join(report["students"]["links"]["reasons"])
    assert "ref.pt links outside the submission" in reasons, reasons


@pytest.mark.slow
def test_no_kit_template_on_disk_is_trusted(runs, tmp_path, monkeypatch):
    """A task builds its scratch course from the kit in memory: a kit template rewritten on disk between runs
    (the old cache in the temp folder) changes no verdict; nothing of the kits is left on disk."""
    import glob
    import tempfile

    import nbformat

    from judge.scratch import tree_hash as files_hash
    from instructor.kit import make_kit, submission_files
    from instructor import task as task_module
    from instructor.task import TaskSettings, grade_task, task_environment, template

    _, par, _ = runs
    kit = make_kit(par.root, SECTION)
    # the template's private build folder, made in a temp folder of this test's own (other tests grade at the
    # same time, in the shared one): it is gone once the template is in memory
    task_module._TEMPLATES.clear()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert template(kit)
    monkeypatch.undo()
    left = glob.glob(os.path.join(tmp_path, f"attncourse-kit-{SECTION}-*"))
    assert not left, f"a kit left on disk: {left}"
    _, env = task_environment({"ATTNCOURSE_CHECK_TIMEOUT": "30"})
    wrong = submission_files(par.root, "wrong", SECTION)
    before = grade_task(kit, "wrong", wrong, settings=TaskSettings(env=env))
    # the old cache's folder, rewritten as a kernel could have: the reference says the wrong answer is right
    poisoned = Path(tempfile.gettempdir()) / f"attncourse-kit-{os.getuid()}-{SECTION}-{kit['hash'][:20]}"
    poisoned.mkdir(exist_ok=True)
    try:
        for name, data in kit["files"].items():
            p = poisoned / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        (poisoned / "gradebook.db").write_bytes(b"")
        (poisoned / "graders" / "data" / f"{SECTION}.pt").write_bytes(b"not the reference")
        after = grade_task(kit, "wrong", wrong, settings=TaskSettings(env=env))
    finally:
        shutil.rmtree(poisoned, ignore_errors=True)
    score = lambda r: sum(g["auto_score"] or 0 for nb in r["gradebook"]["notebooks"].values()  # noqa: E731
                          for g in nb["grades"].values())
    assert before["success"] and after["success"] and score(after) == score(before) > 0
    assert before["hash"] == after["hash"] == files_hash(wrong)
    nb = nbformat.reads(after["files"][f"{SECTION}.ipynb"].decode(), as_version=4)
    assert any("Most likely cause" in str(c.get("outputs")) for c in nb.cells)


@pytest.mark.slow
def test_a_warmed_worker_grades_with_the_coordinators_template(runs):
    """A run's start as a worker sees it: :func:`instructor.task.warm_up` (imports, the fork server of the run's
    kernels) and a kit carrying the template the coordinator generated (:func:`instructor.kit.with_template`).
    The first task then starts no fork server of its own, and grades exactly as a kit without a template does
    (the worker generating it)."""
    from judge import zygote
    from judge.sandbox import sandbox_status
    from instructor.kit import make_kit, submission_files, with_template
    from instructor.task import TaskSettings, grade_task, task_environment, warm_up

    _, par, _ = runs
    kit = make_kit(par.root, SECTION)
    _, env = task_environment({"ATTNCOURSE_CHECK_TIMEOUT": "30"})
    settings = TaskSettings(env=env)
    assert warm_up(settings, kit["files"]["nbgrader_config.py"]) >= 0
    servers = dict(zygote._ZYGOTES)
    if sandbox_status()[0] and os.environ.get(zygote.FORKSERVER_ENV, "1") != "0":
        assert servers, "warm_up started no fork server"
    full = with_template(kit)
    assert full["hash"] == kit["hash"]
    assert {"gradebook.db", "nbgrader_config.py", f"source/{SECTION}/{SECTION}.ipynb"} <= set(full["template"])
    wrong = submission_files(par.root, "wrong", SECTION)
    warmed = grade_task(full, "wrong", wrong, settings=settings)
    assert dict(zygote._ZYGOTES) == servers, "the first task started a fork server of its own"
    plain = grade_task(kit, "wrong", wrong, settings=settings)
    cells = lambda r: {k: g["auto_score"] for nb in r["gradebook"]["notebooks"].values()  # noqa: E731
                       for k, g in nb["grades"].items()}
    assert warmed["success"] and plain["success"] and not warmed["faults"]
    assert cells(warmed) == cells(plain) and sum(v or 0 for v in cells(warmed).values()) > 0


@pytest.mark.slow
def test_tasks_in_a_row_share_a_folder_and_engine_but_no_grades(runs, monkeypatch):
    """One worker process grades submission after submission in a scratch course at the same path, keeping
    nbgrader's gradebook engine (:func:`instructor.task.task_folder`, :func:`judge.scratch.keep_engines`):
    each task still finds a gradebook holding its own student only, and grades as plain nbgrader did."""
    import nbgrader.api
    from nbgrader.api import Gradebook

    from instructor import task
    from instructor.kit import make_kit, submission_files
    from judge.scratch import ScratchEngines

    serial, par, _ = runs
    kit = make_kit(par.root, SECTION)
    _, env = task.task_environment({"ATTNCOURSE_CHECK_TIMEOUT": "30"})
    seen, entry = [], task.gradebook_entry

    def students_then_entry(db_url, section, student):
        with Gradebook(db_url) as gb:
            seen.append((db_url, student, sorted(s.id for s in gb.students), gb.engine))
        return entry(db_url, section, student)

    monkeypatch.setattr(task, "gradebook_entry", students_then_entry)
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)   # restored after the test
    order = ["good", "wrong", "good"]
    results = [task.grade_task(kit, s, submission_files(par.root, s, SECTION), settings=task.TaskSettings(env=env))
               for s in order]
    assert all(r["success"] and not r["faults"] for r in results)
    assert [students for _, _, students, _ in seen] == [[s] for s in order]
    assert len({url for url, *_ in seen}) == 1 and len({id(e) for *_, e in seen}) == 1
    assert isinstance(nbgrader.api.create_engine, ScratchEngines)
    plain = _snapshot(f"sqlite:///{serial.root / 'gradebook.db'}")
    for student, r in zip(order, results):
        got = {k: g["auto_score"] for nb in r["gradebook"]["notebooks"].values() for k, g in nb["grades"].items()}
        want = {k: g[0] for nb in plain[student]["notebooks"].values() for k, g in nb["grades"].items()}
        assert got == want, student
    assert results[0]["gradebook"]["notebooks"] == results[2]["gradebook"]["notebooks"]


def test_report_names_faults_and_mistakes(runs):
    _, _, report = runs
    st = report["students"]
    assert st["good"]["score"] == st["good"]["max_score"] and not st["good"]["reasons"], st["good"]
    assert any("Most likely cause" in t for _, t in st["wrong"]["failures"])
    assert any("kernel died" in r for r in st["dies"]["reasons"]), st["dies"]
    assert any("not valid JSON" in r for r in st["notjson"]["reasons"]), st["notjson"]
    # a worker that dies whenever it grades one notebook: graded again alone, then "not graded", never a 0
    died = st["worker_dies"]
    assert died["not_graded"] and died["reasons"] == [died["not_graded"]], died
    assert died["not_graded"].startswith("not graded: the worker grading it died twice"), died
    assert "cells" not in died and not died["failures"], died
    # an honest notebook whose worker died once (beside another): graded alone afterwards, full marks
    assert st["flaky"]["score"] == st["flaky"]["max_score"] == st["good"]["score"], st["flaky"]
    assert not st["flaky"]["reasons"] and not st["flaky"]["not_graded"], st["flaky"]
    assert report["engine"] == "dask"
    from instructor.outcome import format_report

    text = format_report(report)
    assert re.search(r"^worker_dies\s+not graded \(of \d+\)$", text, re.M), text
    assert re.search(rf"^flaky\s+{st['good']['score']:g} / ", text, re.M), text


@pytest.mark.slow
def test_feedback_and_export_work_after_dask_grading(runs):
    _, par, _ = runs
    html = (par.root / "feedback" / "wrong" / SECTION / f"{SECTION}.html").read_text()
    assert "Most likely cause" in html
    par.nbgrader("generate_feedback", SECTION, "--student=good", "--force")
    assert (par.root / "feedback" / "good" / SECTION / f"{SECTION}.html").is_file()
    par.nbgrader("export", "--to", str(par.root / "grades.csv"))
    rows = (par.root / "grades.csv").read_text().splitlines()
    assert any(r.startswith(f"{SECTION},") and ",good," in r for r in rows), rows[:3]


@pytest.mark.slow
def test_class_report(runs):
    """./course report: HTML with PNG plots and CSVs: scores, pass rates, named mistakes, faults."""
    import csv

    from instructor.report import write_report

    _, par, _ = runs
    index = write_report(par.root, SECTION)
    out = index.parent
    page = index.read_text()
    for name in ("scores.png", "exercises.png", "checks.png", "mistakes.png"):
        assert (out / name).stat().st_size > 1000 and name in page, name
    with (out / "mistakes.csv").open() as f:
        mistakes = list(csv.DictReader(f))
    top = mistakes[0]
    assert "not divided by" in top["most_likely_cause"] and top["student_ids"].split() == ["late", "links", "wrong"], mistakes
    with (out / "faults.csv").open() as f:
        faults = {(r["student"], r["fault"].split(" (")[0]) for r in csv.DictReader(f)}
    assert ("worker_dies", "not graded: the worker grading it died twice, the second time grading it alone") in faults
    assert ("notjson", "notebook is not valid JSON") in faults
    assert any(s == "dies" and f.startswith("kernel died") for s, f in faults), faults
    with (out / "cells.csv").open() as f:
        cells = list(csv.DictReader(f))
    assert {r["student"] for r in cells} >= {"good", "wrong", "late"}
    with (out / "checks.csv").open() as f:
        checks = {r["check"]: r for r in csv.DictReader(f)}
    assert any(k.startswith("scaled_dot_product_attention (") and float(v["pass_rate"]) < 1 for k, v in checks.items())


def test_grade_before_generate_says_what_to_run(tmp_path):
    course = Course(tmp_path / "c", [SECTION])
    course.submit("a", SECTION, "{}")
    proc = subprocess.run([sys.executable, "-m", "instructor.grade", "02", "--root", str(course.root)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert f"nbgrader generate_assignment {SECTION}" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "instructor.grade", "42_nope", "--root", str(course.root)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "unknown section" in proc.stderr and "Traceback" not in proc.stderr


# -- PostgreSQL ---------------------------------------------------------------------------------
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _pg_bin():
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True) if Path("/usr/lib/postgresql").is_dir() \
            else []:
        if (d / "initdb").is_file():
            return d
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@pytest.fixture
def postgres():
    """A throw-away PostgreSQL server on a unix socket (initdb in a temp folder), as an unprivileged user."""
    import tempfile

    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed (requirements.txt pins psycopg2-binary)")
    base = Path(tempfile.mkdtemp(prefix="attncourse-pg-"))
    prefix = []
    if os.geteuid() == 0:
        import pwd

        try:
            user = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("running as root and there is no 'nobody' user to run PostgreSQL as")
        runuser = shutil.which("runuser")
        if not runuser:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
        os.chmod(base, 0o755)
        os.chown(base, user.pw_uid, user.pw_gid)
        prefix = [runuser, "-u", "nobody", "--"]
    data, sock = base / "data", base
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    r = subprocess.run(prefix + [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                                 "-E", "UTF8", "--no-sync"], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed here: {r.stderr.strip()[-300:]}")
    r = subprocess.run(prefix + [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-t", "60",
                                 "-o", f"-k {sock} -c listen_addresses='' -c fsync=off", "start"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        log = (base / "log").read_text() if (base / "log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start here: {r.stderr.strip()[-200:]} {log[-300:]}")
    try:
        subprocess.run(prefix + [str(bindir / "createdb"), "-h", str(sock), "-U", "postgres", "gradebook"],
                       check=True, capture_output=True, env=env, timeout=60)
        yield f"postgresql+psycopg2://postgres@/gradebook?host={sock}"
    finally:
        subprocess.run(prefix + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, env=env, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_postgresql_gradebook(postgres, runs, client, tmp_path):
    """CourseDirectory.db_url on a real PostgreSQL server: the same scores as the SQLite gradebook."""
    from instructor.engine import grade_class

    serial, _, _ = runs
    course = Course(tmp_path / "pg", [SECTION])
    cfg = course.root / "nbgrader_config.py"
    cfg.write_text(cfg.read_text() + f"\nc.CourseDirectory.db_url = {postgres!r}\n")
    course.generate(SECTION)
    assert not (course.root / "gradebook.db").exists()
    src = slim(course.source_nb(SECTION))
    from tests.corpus._base import WRONG

    course.submit("good", SECTION, src)
    course.submit("wrong", SECTION, with_cells(src, {CORPUS_CELL: WRONG}))
    report = grade_class(course.root, [SECTION], client=client, canary=False, log=lambda *a: None)[SECTION]
    assert report["students"]["good"]["score"] == report["students"]["good"]["max_score"] > 0
    got = _snapshot(postgres)
    want = _snapshot(f"sqlite:///{serial.root / 'gradebook.db'}")
    for s in ("good", "wrong"):
        assert got[s]["notebooks"] == want[s]["notebooks"], s
    assert not (course.root / "gradebook.db").exists()


@pytest.mark.slow
def test_rerun_grades_only_new_or_changed_submissions(runs, client):
    """Incremental (runs last on the Dask course): unchanged -> skipped; failed or changed -> graded again."""
    from tests.corpus._base import CORRECT
    from instructor.engine import grade_class

    serial, par, first = runs
    assert sorted(first["graded_now"]) == sorted(first["students"])
    again = grade_class(par.root, [SECTION], client=client, canary=False, log=lambda *a: None)[SECTION]
    # the one whose worker died is not in the gradebook: it is graded again, now normally
    assert again["graded_now"] == ["worker_dies"], again["graded_now"]
    assert again["students"]["worker_dies"]["score"] == again["students"]["good"]["score"] > 0
    assert again["students"]["wrong"] == first["students"]["wrong"]
    src = slim(par.source_nb(SECTION))
    par.submit("wrong", SECTION, with_cells(src, {CORPUS_CELL: CORRECT}))
    fixed = grade_class(par.root, [SECTION], client=client, canary=False, log=lambda *a: None)[SECTION]
    assert fixed["graded_now"] == ["wrong"], fixed["graded_now"]
    assert fixed["students"]["wrong"]["score"] == fixed["students"]["good"]["score"]


def test_report_counts_checks_that_hit_a_limit_as_faults():
    """A hidden check stopped by its time or memory limit is a fault in the class report, not a mistake: the
    judge's record says so (``limit``), whatever the words of the message."""
    import nbformat

    from judge.autograded import KEY
    from judge.preprocessors import verdict
    from judge.verdict import explain_exception, problem
    from instructor.report import check_faults

    def cell(gid, *problems):
        c = nbformat.v4.new_code_cell("GRADER.check(...)", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
        checks = [{"name": f"sdpa ({n})", "passed": False, "message": str(p), "cause": p.cause, "limit": p.limit}
                  for n, p in enumerate(problems)]
        c.metadata[KEY] = verdict([], checks, [], [], False)
        return c

    loop = explain_exception({"type": "_CheckTimeout", "text": "the call took longer than 20 s"}, "cpu")
    hog = explain_exception({"type": "MemoryError", "text": ""}, "cpu")
    wrong = problem("the values differ", "the scores are not divided by √d_k")
    said = explain_exception({"type": "ValueError", "text": "timed out: check timed out. Most likely cause: x"},
                             "cpu")   # the words only: no limit, no cause
    nb = nbformat.v4.new_notebook(cells=[cell("test_a", loop), cell("test_b", hog, wrong), cell("test_c", wrong),
                                         cell("test_d", said)])
    assert check_faults(nb) == ["check timed out (test_a)", "check ran out of memory (test_b)"]
    assert said.cause is None and said.limit is None


def _every_worker_dies(lc, client, timeout: float = 300.0):
    """Every worker dies the way the scheduler sees a death (its data gone, the task it was running suspicious),
    then a fresh, empty worker joins (the nanny's restart).

    The workers are threads of this process and the scheduler removes them itself: two CI runs on a loaded
    2-core machine killed worker processes and waited more than 300 s for the nannies' restarted workers (the
    second time the new worker was known to the scheduler but never ran a task), which tested Dask's process
    handling under load, not the kit.  The scheduler's side of a death is the same code either way
    (``Scheduler.remove_worker``, ``expected=False``).
    """
    old = list(lc.scheduler.workers)
    for address in old:
        client.sync(lc.scheduler.remove_worker, address=address, stimulus_id="test-death", expected=False, close=True)
    assert not set(lc.scheduler.workers) & set(old)
    lc.scale(len(lc.worker_spec) + 1)
    client.wait_for_workers(1, timeout=timeout)


@pytest.mark.slow
def test_kit_survives_the_death_of_every_worker_holding_it():
    """A kit sent once must still reach later tasks after the workers that held it died.

    CI lost the scattered kit when the hook student killed both workers in turn, and every later
    submission failed ("grading failed").  The same deaths with the kit scattered (the old way) lose it:
    that pairing shows this test can fail.
    """
    import dask
    from distributed import Client, LocalCluster

    from instructor.kit import KitFutures

    kit = {"section": "s", "files": {"x": b"k" * 1000}, "hash": "h"}
    size = lambda k: len(k["files"]["x"])  # noqa: E731
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, memory_limit=0,
                          dashboard_address=":0", silence_logs=50) as lc, Client(lc) as client:
            kits = KitFutures(client, {"s": kit})
            scattered = client.scatter([kit], hash=False)[0]
            assert client.submit(size, kits.get("s"), pure=False).result() == 1000
            assert client.submit(size, scattered, pure=False).result() == 1000

            def through_the_grader():
                # what instructor.cluster does: a task whose kit's own task failed (its worker died while
                # computing it: KilledWorker with allowed-failures 0) is sent again with a resent kit
                while True:
                    try:
                        return client.submit(size, kits.get("s"), pure=False).result(timeout=300)
                    except Exception as exc:  # noqa: BLE001
                        if not kits.lost("s", exc):
                            raise

            for _ in range(2):
                _every_worker_dies(lc, client)
                assert through_the_grader() == 1000
            assert kits.sent["s"] <= kits.tries  # recomputed by the scheduler (or resent when its worker died mid-task)
            with pytest.raises(Exception):
                client.submit(size, scattered, pure=False).result(timeout=60)


# -- a stale score, the canary ------------------------------------------------------------------
@pytest.mark.slow   # an instructor's whole grading run, twice: the full tier
@pytest.mark.parametrize("engine", ["serial", "dask", "dask-worker-dies"])
def test_a_failed_regrade_keeps_no_old_score_or_notebook(engine, request, tmp_path):
    """After full marks (and feedback written), a regrade that fails: a resubmission nbgrader cannot grade (not
    JSON), or, on Dask, a worker that dies each time it grades the resubmission (nothing comes back: "not graded").
    No score of the first grading stands, and neither its autograded notebook nor its feedback is left beside the
    cleared score (they showed the old verdicts, ✓ beside a 0).  The paired student's gradable resubmission gets
    its honest score and a notebook of this grading."""
    from instructor.engine import grade_class
    from instructor.engine import grade_section as grade
    from tests.corpus._base import WRONG

    course = Course(tmp_path / engine, [SECTION])
    course.generate(SECTION)
    src = slim(course.source_nb(SECTION))
    for s in ("broken", "honest"):
        course.submit(s, SECTION, src)

    def run(extra_env=None):
        if engine == "serial":
            return grade(SECTION, course.root, log=lambda *a: None)
        return grade_class(course.root, [SECTION], client=request.getfixturevalue("client"), canary=False,
                           log=lambda *a: None, extra_env=extra_env)[SECTION]

    first = run()["students"]
    full = first["broken"]["max_score"]
    assert first["broken"]["score"] == first["honest"]["score"] == full > 0, first
    stale = {}
    for s in ("broken", "honest"):   # what formgrader and the feedback showed after the first grading
        nb = course.root / "autograded" / s / SECTION / f"{SECTION}.ipynb"
        feedback = course.root / "feedback" / s / SECTION / f"{SECTION}.html"
        feedback.parent.mkdir(parents=True, exist_ok=True)
        feedback.write_text("the first grading's feedback: every check ✓")
        stale[s] = nb.read_bytes()
    course.submit("honest", SECTION, with_cells(src, {CORPUS_CELL: WRONG}))
    if engine == "dask-worker-dies":
        course.submit("broken", SECTION, with_cells(src, {CORPUS_CELL: WRONG}))
        second = run({"ATTNCOURSE_CLASSGRADE_DIE_FOR": "broken"})["students"]
        assert second["broken"]["not_graded"], second["broken"]
    else:
        course.submit("broken", SECTION, "{ not json")
        second = run()["students"]
        assert any("not valid JSON" in r for r in second["broken"]["reasons"]), second["broken"]
    db = _snapshot(f"sqlite:///{course.root / 'gradebook.db'}")
    assert db["broken"]["score"] == second["broken"]["score"] == 0, (db["broken"], second["broken"])
    assert not (course.root / "autograded" / "broken" / SECTION).exists()   # no notebook of the first grading
    assert not (course.root / "feedback" / "broken" / SECTION).exists()     # nor its feedback
    assert 0 < db["honest"]["score"] == second["honest"]["score"] < full, (db["honest"], second["honest"])
    honest_nb = course.root / "autograded" / "honest" / SECTION / f"{SECTION}.ipynb"
    assert honest_nb.is_file() and honest_nb.read_bytes() != stale["honest"]   # this grading's notebook
    assert not (course.root / "feedback" / "honest" / SECTION).exists()       # the first grading's feedback: gone


def _grade_cli(course: Course, *args, pythonpath: Path | None = None, extra_env: dict | None = None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra_env or {})
    cwd = ROOT
    if pythonpath is not None:
        env["PYTHONPATH"], cwd = str(pythonpath), pythonpath
    return subprocess.run([sys.executable, "-m", "instructor.grade", "02", "--root", str(course.root), *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow   # an instructor's whole grading run, twice: the full tier
@pytest.mark.parametrize("engine", ["serial", "dask"])
def test_canary_stops_a_broken_environment(engine, tmp_path):
    """The course package the grader imports is not the one the sandboxed kernels find (PYTHONPATH names a copy
    of this checkout; the kernels' editable install points at a checkout the sandbox does not show them): every
    student would score 0 with "NameError: GRADER".  The canary stops the run: exit status 2, one line naming the
    failed import, no grade in the gradebook.  The honest environment then grades the class."""
    copy = tmp_path / "other-checkout"
    for pkg in ("attncourse", "judge", "instructor"):
        shutil.copytree(ROOT / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    course = Course(tmp_path / "course", [SECTION])
    course.generate(SECTION)
    course.submit("good", SECTION, slim(course.source_nb(SECTION)))
    args = ["--serial"] if engine == "serial" else ["--workers", "1"]
    proc = _grade_cli(course, *args, pythonpath=copy)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if "canary failed" in ln]
    assert len(lines) == 1 and "No module named 'attncourse'" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert _snapshot(f"sqlite:///{course.root / 'gradebook.db'}") == {}
    assert not (course.root / "autograded").exists()
    if engine == "serial":   # (the Dask path's honest canary: the `runs` fixture)
        proc = _grade_cli(course, "--serial")
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        assert "canary 02_qkv_by_hand: the solution" in proc.stdout
        got = _snapshot(f"sqlite:///{course.root / 'gradebook.db'}")
        assert set(got) == {"good"} and got["good"]["score"] > 0, got


@pytest.mark.slow   # two canaries whose kernels cannot start
def test_the_canary_names_a_kernel_that_cannot_start(tmp_path):
    """Every grading kernel dies before it replies (a 40 MB memory limit, the classic launcher): the canary stops
    the run in one line that names it, with the kernel's exit status and last line ("Kernel died before replying to
    kernel_info: the grading kernel stopped (exit N): …"), where the first line of the log's last 300 characters
    gave a fragment of nbgrader's traceback ("oks()"; tests/test_engine_faults.py pairs the two on this log)."""
    course = Course(tmp_path / "course", [SECTION])
    course.generate(SECTION)
    course.submit("good", SECTION, slim(course.source_nb(SECTION)))
    proc = _grade_cli(course, "--serial", extra_env={"ATTNCOURSE_KERNEL_MEM_MB": "40", "ATTNCOURSE_FORKSERVER": "0"})
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if "canary failed" in ln]
    assert len(lines) == 1 and "scored 0 / " in lines[0], proc.stderr[-2000:]
    assert "here: Kernel died before replying to kernel_info: the grading kernel stopped (" in lines[0], lines
    assert _snapshot(f"sqlite:///{course.root / 'gradebook.db'}") == {}


def _two_good_two_wrong(tmp_path) -> Course:
    """A course of section 02 with four submissions: good0, good1 (the solution) and wrong0, wrong1 (a mistake)."""
    from tests.corpus._base import WRONG

    course = Course(tmp_path / "course", [SECTION])
    course.generate(SECTION)
    src = slim(course.source_nb(SECTION))
    for n in range(2):
        course.submit(f"good{n}", SECTION, src)
        course.submit(f"wrong{n}", SECTION, with_cells(src, {CORPUS_CELL: WRONG}))
    return course


@pytest.mark.slow   # a local cluster of its own, and the module's cluster: the full tier
def test_a_local_clusters_workers_grade_side_by_side_with_the_runs_fork_server(client, tmp_path):
    """``./course grade`` on a cluster of its own (no client, no address): the run starts one fork server and hands
    it to its workers (:data:`judge.zygote.SHARED_ENV`), and every worker grades — the engine places each task on a
    free worker (Dask alone sent every task to the worker holding the kit, one at a time).  Paired with the same
    class on a cluster given as a client, whose workers are not the run's: each starts a fork server of its own."""
    from instructor.engine import grade_class
    from judge import zygote
    from judge.sandbox import sandbox_status
    from tests.engine_probe import LOG_ENV, probed_task, read_log

    course = _two_good_two_wrong(tmp_path)
    forked = sandbox_status()[0] and os.environ.get(zygote.FORKSERVER_ENV, "1") != "0"
    runs = {}
    for how, kw in (("own cluster", {"workers": 2}), ("given client", {"client": client})):
        log = tmp_path / f"{how}.jsonl"
        report = grade_class(course.root, [SECTION], force=True, canary=False, log=lambda *a: None,
                             task=probed_task, extra_env={LOG_ENV: str(log)}, **kw)[SECTION]
        runs[how] = read_log(log)
        scores = {s: r["score"] for s, r in report["students"].items()}
        assert scores["good0"] == scores["good1"] > scores["wrong0"] == scores["wrong1"], (how, scores)
        assert len({r["pid"] for r in runs[how]}) == 2, (how, runs[how])   # both workers graded
    own, given = runs["own cluster"], runs["given client"]
    assert len(own) == len(given) == 4
    if forked:
        assert all(r["handed"] and r["own_servers"] == 0 for r in own), own
        assert all(not r["handed"] and r["own_servers"] >= 1 for r in given), given


@pytest.mark.slow   # a local cluster of its own: the full tier
@pytest.mark.parametrize("engine", ["serial", "dask"])
def test_a_kit_that_cannot_be_generated_stops_the_run_in_one_line(engine, tmp_path):
    """The section's source, changed after its release, cannot be generated any more (two cells share a grade id):
    the scratch course of the kit cannot be made, by the grader's process (``--serial``) or by the kit's task on a
    worker (Dask): the run stops with one line naming it, and writes no grade."""
    import copy

    import nbformat

    from instructor.config import CourseError
    from instructor.engine import grade_class

    course = Course(tmp_path / "course", [SECTION])
    course.generate(SECTION)
    course.submit("good", SECTION, slim(course.source_nb(SECTION)))
    path = course.root / "source" / SECTION / f"{SECTION}.ipynb"
    nb = nbformat.read(path, as_version=4)
    graded = next(c for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade"))
    nb.cells.append(copy.deepcopy(graded))
    nbformat.write(nb, path)
    kw = {"serial": True} if engine == "serial" else {"workers": 1}
    with pytest.raises(CourseError) as info:
        grade_class(course.root, [SECTION], force=True, log=lambda *a: None, **kw)
    assert f"{SECTION}: generate_assignment failed in a scratch course: " in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert _snapshot(f"sqlite:///{course.root / 'gradebook.db'}") == {}


@pytest.mark.slow   # a local cluster of its own: the full tier
def test_the_runs_fork_server_dying_mid_run_costs_no_student_a_grade(tmp_path):
    """The run's fork server, handed to a local cluster's workers, is killed as the first student is sent (as the
    machine's OOM killer might): each worker sees it gone (its process, not only its socket's file) and starts its
    own; every student gets the grade the notebook earns.  With the socket's file taken as proof of life, every
    later kernel failed to start and each student scored 0 for "kernel died" (seen when this test was written)."""
    import signal

    from instructor.engine import grade_class
    from judge import zygote
    from judge.sandbox import sandbox_status

    if not sandbox_status()[0] or os.environ.get(zygote.FORKSERVER_ENV, "1") == "0":
        pytest.skip("no fork server here: kernels are not sandboxed, or the fork server is off")
    course = _two_good_two_wrong(tmp_path)
    killed = []

    def log(*args):
        if " ".join(map(str, args)).startswith("grading "):
            for z in list(zygote._ZYGOTES.values()):
                os.kill(z.pid, signal.SIGKILL)
                killed.append(z.pid)

    report = grade_class(course.root, [SECTION], workers=2, force=True, log=log)[SECTION]
    assert killed, "the run started no fork server of its own"
    st = report["students"]
    assert all(not r["not_graded"] and not r["reasons"] for s, r in st.items() if s.startswith("good")), st
    assert st["good0"]["score"] == st["good1"]["score"] == st["good0"]["max_score"], st
    assert 0 < st["wrong0"]["score"] == st["wrong1"]["score"] < st["good0"]["score"], st
