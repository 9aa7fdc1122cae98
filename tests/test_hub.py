"""The course on a real JupyterHub (``./course hub``): nbgrader's exchange round trip with real Unix users, in a browser.

The module starts the real ``./course hub`` with throw-away users (``acst…i``, ``acst…s1``, ``acst…s2``) and a hub
folder in /tmp, then drives Debian's chromium with Playwright through the whole loop:

instructor releases 02 in formgrader → each student logs in, fetches 02 in the Assignments panel, fills it (one
correct, one with a named mistake of graders/s02_qkv_by_hand.py), Validates, submits → the instructor collects →
grades with ``./course grade``, then with formgrader's Autograde button and with plain ``nbgrader autograde``:
identical scores → generates and releases feedback → each student fetches it and sees their points (and the named
mistake). Neither student can read the other's work or feedback, nor the course's ``source/`` or ``graders/``
(checked as that student). Ctrl-C then stops the hub with nothing left running; the users and their homes are
removed whatever happens.

Skips, with the reason, where a component cannot run (not root, no proxy, no browser, no sandbox). On a failure
the screenshot and page text are saved under ``tests/artifacts/<test>/`` (``ATTNCOURSE_SCREENSHOTS=1`` keeps one
of every step).
"""
from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest

from tests.browser import (
    ARTIFACTS, LAB_SETTINGS, NotebookPage, _free_port, student_work, why_no_browser,
)
from tests.harness import CORPUS_CELL, ROOT, read_nb

pytest_plugins = ["tests.browser"]  # screenshot + page text of a failed test
pytestmark = pytest.mark.xdist_group("hub")

SECTION = "02_qkv_by_hand"
STARTED = time.time()   # before anything this module submits or collects
DISK, INODES = "160M", 20000   # each student's disk on the test hub (deploy/hub.py student_disk)
MISTAKE = "no_scale"     # the named mistake the second student makes (graders/s02_qkv_by_hand.py)


def shot(page, test: str, step: str):
    """With ATTNCOURSE_SCREENSHOTS=1, keep a screenshot of this step under tests/artifacts/<test>/."""
    if os.environ.get("ATTNCOURSE_SCREENSHOTS"):
        out = ARTIFACTS / test
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / f"{step}.png"), full_page=True)


def _mistake():
    from graders.s02_qkv_by_hand import SDPA

    m = next(m for m in SDPA.mistakes if m.key == MISTAKE)
    code = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", "", m.code, flags=re.M)   # as a student types it
    return code, (m.shows or m.message)


def why_no_hub() -> str | None:
    from judge.sandbox import bwrap_works
    from deploy.hub import why_not

    reason = why_not()
    if reason:
        return f"./course hub cannot run here: {reason}"
    reason = why_no_browser()
    if reason:
        return f"no browser here: {reason}"
    ok, why = bwrap_works()
    if not ok:
        return f"the grading sandbox cannot start here ({why})"
    return None


# -- ./course hub, running ---------------------------------------------------------------------------------
class HubRun:
    """``./course hub`` in the background: its output, the accounts it printed, the hub's URL."""

    def __init__(self, hubdir: Path, tag: str):
        self.hubdir, self.port = hubdir, _free_port()
        self.instructor, self.students = f"{tag}i", [f"{tag}s1", f"{tag}s2"]
        self.lines: list[str] = []
        self.passwords: dict[str, str] = {}
        self.proc = None

    @property
    def users(self):
        return [self.instructor, *self.students]

    @property
    def base(self):
        """The hub's origin (each user's server is on its own: :meth:`user_url`)."""
        return f"http://localhost:{self.port}"

    def user_url(self, user) -> str:
        """Where ``user``'s server is, on its own origin (chromium resolves every *.localhost to this machine)."""
        return f"http://{user}.localhost:{self.port}/user/{user}"

    def start(self, timeout: float = 180):
        roster = self.hubdir / "roster.csv"    # names for one student, none for the other
        roster.write_text(f"id,first_name,last_name\n{self.students[0]},Ada,Lovelace\n{self.students[1]},,\n")
        cmd = [str(ROOT / "course"), "hub", "--roster", str(roster), "--instructor", self.instructor,
               "--dir", str(self.hubdir), "--port", str(self.port), "--user-disk", DISK, "--user-inodes", str(INODES)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER", "ATTNCOURSE_"))}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(ln.startswith("JupyterHub at ") for ln in self.lines):
                break
            if self.proc.poll() is not None:
                time.sleep(0.5)
                raise RuntimeError(f"./course hub exited ({self.proc.returncode}):\n" + "\n".join(self.lines[-40:]))
            time.sleep(0.3)
        else:
            raise RuntimeError("./course hub did not start:\n" + "\n".join(self.lines[-40:]))
        for ln in self.lines:
            m = re.match(r"\s+(instructor|student)\s+(\S+)\s+(\S+)$", ln)
            if m:
                self.passwords[m.group(2)] = m.group(3)
        assert set(self.passwords) == set(self.users), self.lines
        print(f"./course hub started in {time.time() - deadline + timeout:.1f} s")
        self.settings = json.loads((self.hubdir / "hub.json").read_text())
        return self

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def home(self, user) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)

    @property
    def course(self) -> Path:
        return Path(self.settings["course"])

    def as_user(self, user, *cmd, cwd=None, timeout=900, env=()) -> subprocess.CompletedProcess:
        """Run a command as ``user`` with a login-like environment (runuser, no root left); ``env``: more
        ``NAME=value`` settings (they come last: they win)."""
        env = ["env", "-i", f"HOME={self.home(user)}", f"USER={user}", "LANG=C.UTF-8",
               f"PATH={self.settings['venv']}/bin:/usr/local/bin:/usr/bin:/bin", *env]
        return subprocess.run(["runuser", "-u", user, "--", *env, *cmd], cwd=cwd or self.home(user),
                              capture_output=True, text=True, timeout=timeout)

    def can_read(self, user, path) -> bool:
        """Whether ``user`` can list (a folder) or read (a file) ``path``."""
        p = Path(path)
        cmd = ["/bin/ls", str(p)] if p.is_dir() else ["/bin/cat", str(p)]
        return self.as_user(user, *cmd, cwd="/").returncode == 0

    def ctrl_c(self, timeout: float = 90) -> int:
        """Ctrl-C, as at the terminal: SIGINT to ./course hub; its return code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        time.sleep(0.2)
        return self.proc.returncode

    def leftovers(self) -> list[str]:
        """Processes still running that belong to this hub: its users' or any naming its folder or port."""
        import psutil

        from deploy.hub import user_ids

        uids = user_ids(self.users)
        left = []
        for p in psutil.process_iter(["pid", "uids", "cmdline"]):
            try:
                cmdline = " ".join(p.info["cmdline"] or [])
                if p.info["uids"].real in uids or str(self.hubdir) in cmdline or f"--port {self.port}" in cmdline:
                    if p.pid != os.getpid():
                        left.append(f"{p.pid} {cmdline[:200]}")
            except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError):
                pass
        return left


@pytest.fixture(scope="module")
def hub():
    reason = why_no_hub()
    if reason:
        pytest.skip(reason)
    from deploy.hub import remove_user

    tag = "acst" + secrets.token_hex(3)
    # (not under /tmp: ./course hub refuses it, every grading kernel has a /tmp of its own)
    hubdir = Path(tempfile.mkdtemp(prefix="attncourse-hub-test-", dir="/srv"))
    hubdir.chmod(0o755)
    run = HubRun(hubdir, tag)
    try:
        run.start()
        for user in run.users:   # a fresh user's JupyterLab, without virtual scrolling (tests/browser.py); the news
            settings = run.home(user) / ".jupyter" / "lab" / "user-settings"   # pop-up: the hub turns it off itself
            for name, values in LAB_SETTINGS.items():
                if name == "@jupyterlab/apputils-extension/notification":
                    continue
                p = settings / f"{name}.jupyterlab-settings"
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(json.dumps(values))
            subprocess.run(["chown", "-R", f"{user}:{user}", str(run.home(user) / ".jupyter")], check=True)
        print("\n".join(run.lines))
        yield run
    finally:
        if run.proc is not None and run.proc.poll() is None:
            run.ctrl_c()
        for user in run.users:
            remove_user(user)
        shutil.rmtree(hubdir, ignore_errors=True)


class Pages:
    """One browser context per user (their own hub cookie); every page opened is kept for the failure report."""

    def __init__(self, browser, hub: HubRun):
        self.browser, self.hub, self.pages, self.contexts, self.ready, self.clicked = browser, hub, {}, [], set(), {}

    def login(self, user, wait: bool = True):
        """Log in at the hub's page (the hub starts the user's server); ``wait``: until JupyterLab is up."""
        if user not in self.pages:
            ctx = self.browser.new_context(viewport={"width": 1400, "height": 900})
            ctx.set_default_timeout(90_000)
            self.contexts.append(ctx)
            page = ctx.new_page()
            self.pages[user] = page
            page.goto(f"{self.hub.base}/hub/login")
            page.fill("input#username_input", user)
            page.fill("input#password_input", self.hub.passwords[user])
            page.click("#login_submit")
            self.clicked[user] = time.time()
        page = self.pages[user]
        if wait:
            page.wait_for_selector(".jp-LabShell", timeout=240_000)   # the user's own server started, JupyterLab up
            if user not in self.ready:
                self.ready.add(user)
                print(f"{user}: JupyterLab up {time.time() - self.clicked[user]:.1f} s after logging in")
        return page

    def close(self):
        for ctx in self.contexts:
            ctx.close()


class UserLab:
    """What NotebookPage needs of a server: the URL of a path in this user's JupyterLab."""

    def __init__(self, hub: HubRun, user: str):
        self.base = hub.user_url(user)

    def url(self, path: str = "lab") -> str:
        return f"{self.base}/{path.lstrip('/')}"


def _status(page, url) -> int:
    """The HTTP status of ``url`` fetched by ``page`` (its cookies, its origin)."""
    return page.evaluate("async u => (await fetch(u, {redirect: 'manual'})).status", url)


# -- formgrader -------------------------------------------------------------------------------------------
def _fg_button(page, row, column: str, timeout: float = 600) -> str:
    """Click formgrader's button in ``column`` of ``row``; return the text of the result dialog (must succeed)."""
    row.locator(f"td.{column} a").click()
    modal = page.locator("#success-modal, #error-modal")
    modal.wait_for(timeout=timeout * 1000)
    text = modal.inner_text()
    ok = page.locator("#success-modal").count() == 1
    modal.locator(".modal-footer button").last.click()
    modal.wait_for(state="detached")
    assert ok, f"formgrader {column}: {text[:1000]} … {text[-3000:]}"
    return text


def _assignment_row(page, hub: HubRun):
    page.goto(f"{hub.user_url(hub.instructor)}/formgrader/manage_assignments")
    row = page.locator("tr").filter(has_text=SECTION)
    row.wait_for(timeout=120_000)
    return row


def _scores(hub: HubRun) -> dict:
    from instructor.gradebook import gradebook_scores

    return gradebook_scores(f"sqlite:///{hub.course / 'gradebook.db'}", hub.settings["course_id"], SECTION)


# -- the Assignments panel --------------------------------------------------------------------------------
def _assignments(page):
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.get_by_role("menuitem", name="Assignment List", exact=True).click()
    panel = page.locator("#nbgrader-assignment-list")
    panel.wait_for()
    return panel


def _panel_row(panel, listing: str):
    return panel.locator(f"#{listing}_assignments_list").locator(".list_item:not(.nested_list_item)").filter(has_text=SECTION)


# -- the tests ----------------------------------------------------------------------------------------------
def test_hub_refuses_in_one_line(monkeypatch, capsys):
    """Where ./course hub cannot run it says what is missing, in one line, and starts nothing."""
    from deploy import hub as hubmod

    monkeypatch.setattr(hubmod.os, "geteuid", lambda: 1000)
    assert hubmod.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["./course hub: needs root (it creates Unix users and runs their servers): run it with sudo"], err

    monkeypatch.setattr(hubmod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(hubmod, "proxy_command", lambda: None)
    real_which = shutil.which
    monkeypatch.setattr(hubmod.shutil, "which", lambda n: None if n == "npm" else real_which(n))
    assert hubmod.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no configurable-http-proxy and no npm" in err[0], err


FORK_PROBE = """
import os, sys, time
cap, made, why = int(sys.argv[1]), [], "none"
for _ in range(cap):                 # a fork bomb capped at `cap` processes: each child sleeps until killed
    try:
        pid = os.fork()
    except OSError as exc:
        why = exc.strerror
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made.append(pid)
print(len(made), why, flush=True)
for pid in made:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""
MEMORY_PROBE = """
import sys
mb, size, chunks = int(sys.argv[1]), int(sys.argv[2]), []
try:
    if size:
        chunks.append(bytearray(size << 20))       # one allocation of `size` MiB (address space)
    while len(chunks) * 16 < mb:                   # then `mb` MiB touched, 16 MiB at a time (resident memory)
        chunks.append(b"x" * (16 << 20))
    print("allocated", flush=True)
except MemoryError:
    print("MemoryError", flush=True)
"""


def _as_student(user, limits, code, *args, cgroup_parent="attncourse-hub-test"):
    """Run ``code`` as ``user`` the way the hub starts a student's server: jupyterhub's own setuid preexec
    (LocalProcessSpawner's), under deploy.hub.limits_preexec with the user's cgroups when ``limits``."""
    import sys

    from jupyterhub.spawner import set_user_setuid

    from deploy.hub import limits_preexec, user_cgroups

    setuid = set_user_setuid(user)
    cg = user_cgroups(user, limits, parent=cgroup_parent) if limits else []
    preexec = limits_preexec(limits, cg, then=setuid) if limits else setuid
    t = time.time()
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable   # one every user can run
    proc = subprocess.run([python, "-c", code, *map(str, args)], preexec_fn=preexec, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/")
    return proc, cg, time.time() - t


def test_a_students_limits_hold_and_the_same_code_without_them_exceeds_them():
    """The per-student limits of the hub's spawner (deploy/jupyterhub_config.py: CourseSpawner), applied as it applies
    them, hold for a throw-away student, and the very same code without them goes past them (paired): a capped
    fork bomb, one large allocation, memory touched in chunks. Small limits (64 processes, 256 MiB) keep it safe."""
    import os as _os

    from deploy.hub import (CGROUPS, ensure_user, kill_user_processes, remove_user, remove_user_cgroups,
                                resolve_limits)

    if not hasattr(_os, "geteuid") or _os.geteuid() != 0:
        pytest.skip("needs root (a throw-away Unix user)")
    user = "acst" + secrets.token_hex(3) + "l"
    limits = resolve_limits({"user_procs": 64, "process_memory": 512 << 20, "user_memory": 256 << 20})
    ensure_user(user)
    try:
        # processes: a fork bomb capped at 100; with the limit it stops below 64 (RLIMIT_NPROC, pids.max)
        free, _, _ = _as_student(user, None, FORK_PROBE, 100)
        held, cg, _ = _as_student(user, limits, FORK_PROBE, 100)
        print(f"fork bomb capped at 100: {free.stdout.strip()} without limits, {held.stdout.strip()} with 64")
        assert free.stdout.split()[0] == "100", free.stdout + free.stderr
        assert int(held.stdout.split()[0]) < 64 and "unavailable" in held.stdout, held.stdout + held.stderr
        # address space per process: one 768 MiB allocation (RLIMIT_AS 512 MiB)
        free, _, _ = _as_student(user, None, MEMORY_PROBE, 0, 768)
        held, _, _ = _as_student(user, limits, MEMORY_PROBE, 0, 768)
        assert free.stdout.strip() == "allocated", free.stdout + free.stderr
        assert held.stdout.strip() == "MemoryError", held.stdout + held.stderr
        # memory per student (cgroup, where the machine allows one): 400 MiB touched in 16 MiB pieces under 256 MiB
        mem_cg = [d for d in cg if (d / "memory.limit_in_bytes").exists() or (d / "memory.max").exists()]
        if mem_cg:
            free, _, _ = _as_student(user, None, MEMORY_PROBE, 400, 0)
            held, _, _ = _as_student(user, {**limits, "process_memory": 0}, MEMORY_PROBE, 400, 0)
            print(f"400 MiB touched: {free.stdout.strip() or free.returncode} without limits, "
                  f"{held.stdout.strip() or held.returncode} with a 256 MiB cgroup")
            assert free.stdout.strip() == "allocated", free.stdout + free.stderr
            assert held.returncode == -9 and "allocated" not in held.stdout, (held.returncode, held.stdout)
        else:
            print(f"no memory cgroup here ({CGROUPS}): only RLIMIT_AS holds memory")
    finally:
        kill_user_processes({user})
        remove_user_cgroups([user], parent="attncourse-hub-test")
        remove_user(user)


@pytest.fixture
def pages(chromium, hub):
    p = Pages(chromium, hub)
    yield p
    p.close()   # after the failure report has saved the page (tests.browser.pytest_runtest_makereport)


@pytest.mark.slow
def test_round_trip_release_fetch_submit_collect_grade_feedback(hub, pages, request):
    """The whole nbgrader loop on the hub, two students, in the browser (see the module's docstring)."""
    from playwright.sync_api import expect

    test = "hub"
    t0 = time.time()
    if True:
        # 1. the instructor generates and releases 02 in formgrader (everyone logs in first: the hub starts
        #    the three servers side by side)
        for user in hub.users:
            pages.login(user, wait=False)
        ipage = pages.login(hub.instructor)
        request.node.funcargs["page"] = ipage
        # Nbgrader ▸ Formgrader shows formgrader inside JupyterLab (the instructor's server lets its own origin
        # frame it; JupyterHub 6 sends frame-ancestors 'none'), and no news pop-up greets the instructor
        ipage.get_by_role("menuitem", name="Nbgrader", exact=True).click()
        ipage.get_by_role("menuitem", name="Formgrader", exact=True).click()
        fg = ipage.frame_locator("iframe").first
        expect(fg.get_by_text("Manage Assignments").first).to_be_visible(timeout=60_000)
        expect(fg.locator("tr").filter(has_text=SECTION).first).to_be_visible()
        (ARTIFACTS / test).mkdir(parents=True, exist_ok=True)
        ipage.screenshot(path=str(ARTIFACTS / test / "00-formgrader-in-lab.png"))
        assert ipage.get_by_text("official Jupyter news").count() == 0
        assert ipage.locator(".jp-Notification-Toast-info, .Toastify__toast").count() == 0, \
            ipage.locator(".Toastify__toast").all_inner_texts()
        row = _assignment_row(ipage, hub)
        shot(ipage, test, "01-formgrader-draft")
        _fg_button(ipage, row, "assign")
        text = _fg_button(ipage, row, "release")
        assert f"Released as: {hub.settings['course_id']} {SECTION}" in text, text
        expect(row.locator("td.status")).to_have_text("released")
        shot(ipage, test, "02-formgrader-released")
        print(f"released after {time.time() - t0:.0f} s")

        # 2. each student: fetch, fill, Validate, submit
        code_wrong, named = _mistake()
        from tests.corpus._base import CORRECT

        answers = {hub.students[0]: CORRECT.strip(), hub.students[1]: code_wrong.strip()}
        for n, student in enumerate(hub.students, 1):
            page = pages.login(student)
            request.node.funcargs["page"] = page
            # a student has the Assignments panel, and no formgrader (neither in the menu nor on the server)
            page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
            menu = page.locator(".lm-Menu").inner_text()
            page.keyboard.press("Escape")
            assert "Assignment List" in menu and "Formgrader" not in menu, menu
            assert _status(page, f"{hub.user_url(student)}/formgrader/manage_assignments") == 404
            panel = _assignments(page)
            fetch_row = _panel_row(panel, "released")
            fetch_row.wait_for()
            shot(page, test, f"1{n}-student{n}-before-fetch")
            fetch_row.get_by_role("button", name="Fetch", exact=True).click()
            _panel_row(panel, "fetched").wait_for()
            shot(page, test, f"1{n}-student{n}-fetched")
            folder = hub.home(student) / SECTION
            released = read_nb(folder / f"{SECTION}.ipynb")
            # every exercise solved but scaled_dot_product_attention, which the student types in the browser
            # (written as the student: their file, their permissions)
            work = student_work(released, SECTION, skip={CORPUS_CELL})
            tmp = folder / ".work.ipynb"
            nbformat.write(work, str(tmp))
            shutil.chown(tmp, student, student)
            os.replace(tmp, folder / f"{SECTION}.ipynb")
            t = time.time()
            nb = NotebookPage(page, UserLab(hub, student), f"{SECTION}/{SECTION}.ipynb").open(timeout=180)
            print(f"{student}: first notebook open in {time.time() - t:.1f} s")
            nb.type_into(nb.cell("def scaled_dot_product_attention", "YOUR CODE HERE"), answers[student])
            nb.save()
            dialog = nb.validate(timeout=300)
            shot(page, test, f"1{n}-student{n}-validated")
            # Validate works where there is no graders/ folder: the visible checks run, the hidden tests are not there
            assert "Success! Your notebook passes all the tests." in dialog, dialog
            nb.close_dialog()
            panel = _assignments(page)   # (the notebook opened in a workspace of its own)
            _panel_row(panel, "fetched").get_by_role("button", name="Submit", exact=True).click()
            _panel_row(panel, "submitted").first.wait_for()
            shot(page, test, f"1{n}-student{n}-submitted")
        print(f"both submitted after {time.time() - t0:.0f} s")

        # 3. the instructor collects in formgrader
        request.node.funcargs["page"] = ipage
        row = _assignment_row(ipage, hub)
        text = _fg_button(ipage, row, "collect")
        for s in hub.students:
            assert (hub.course / "submitted" / s / SECTION / f"{SECTION}.ipynb").is_file(), text

        # 4a. ./course grade, as the instructor, in their course folder
        t = time.time()
        proc = hub.as_user(hub.instructor, "./course", "grade", SECTION, "--json", "grade-report.json",
                           cwd=hub.course)
        took = {"./course grade": time.time() - t}
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        by_course_grade = _scores(hub)
        # 4b. formgrader's Autograde button, for each student
        t = time.time()
        ipage.goto(f"{hub.user_url(hub.instructor)}/formgrader/manage_submissions/{SECTION}")
        for s in hub.students:
            srow = ipage.locator("tr").filter(has_text=s)
            srow.wait_for()
            _fg_button(ipage, srow, "autograde")
        shot(ipage, test, "21-formgrader-autograded")
        by_formgrader = _scores(hub)
        took["formgrader Autograde"] = time.time() - t
        t = time.time()
        # 4c. plain nbgrader autograde, as the instructor
        proc = hub.as_user(hub.instructor, f"{hub.settings['venv']}/bin/nbgrader", "autograde", SECTION, "--force",
                           cwd=hub.course)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        by_nbgrader = _scores(hub)
        took["nbgrader autograde"] = time.time() - t
        print("grading took " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))
        print("scores (total/max) by ./course grade | formgrader Autograde | nbgrader autograde:")
        for s in hub.students:
            print(f"  {s}: {by_course_grade[s][:2]} | {by_formgrader[s][:2]} | {by_nbgrader[s][:2]}")
        assert by_course_grade == by_formgrader == by_nbgrader
        right, wrong = (by_course_grade[s] for s in hub.students)
        assert right[0] > wrong[0] > 0, (right, wrong)
        assert all(sc == mx for sc, mx in right[2].values()), right   # the correct student lost no point
        print(f"graded three ways after {time.time() - t0:.0f} s")

        # formgrader's Manual Grading page of the class (where written answers are graded)
        ipage.goto(f"{hub.user_url(hub.instructor)}/formgrader/gradebook/{SECTION}/{SECTION}")
        ipage.locator("tr").filter(has_text=hub.students[1]).wait_for()
        shot(ipage, test, "22-formgrader-manual-grading")
        # its names (shown with the eye): the roster's, else the login alone (first_name None; "" showed "acst…s2,")
        names = sorted(n.strip() for n in ipage.locator("td a.name-shown").all_text_contents())
        assert names == sorted(["Lovelace, Ada", hub.students[1]]), names

        # formgrader's Manage Students: ./course hub put the roster in the gradebook (names, else the login)
        ipage.goto(f"{hub.user_url(hub.instructor)}/formgrader/manage_students")
        # (this list joins "last, first" whatever they are: a student without a name is "login, None" as in any
        # nbgrader gradebook where the first name is left empty)
        for s, name in zip(hub.students, ("Lovelace, Ada", f"{hub.students[1]}, None")):
            student_row = ipage.locator("tr").filter(has_text=s).first
            student_row.wait_for()
            text = student_row.inner_text()
            assert text.startswith(name), text
        shot(ipage, test, "22b-formgrader-students")

        # 5. feedback: generated and released in formgrader
        row = _assignment_row(ipage, hub)
        _fg_button(ipage, row, "generate-feedback")
        _fg_button(ipage, row, "release-feedback")
        shot(ipage, test, "23-formgrader-feedback-released")

        # 6. each student fetches the feedback and reads their points (and the named mistake)
        for n, student in enumerate(hub.students, 1):
            page = pages.pages[student]
            request.node.funcargs["page"] = page
            panel = _assignments(page)
            sub = _panel_row(panel, "submitted").first
            sub.get_by_role("button", name="Fetch Feedback", exact=True).click()
            sub.get_by_text("(view feedback)").click()
            page.locator(".jp-DirListing-item").filter(has_text=f"{SECTION}.html").dblclick()
            frame = page.frame_locator(".jp-HTMLViewer iframe, iframe.jp-HTMLViewer").first
            body = frame.locator("body")
            body.wait_for()
            expect(body).to_contain_text("Score:")
            text = body.inner_text()
            shot(page, test, f"3{n}-student{n}-feedback")
            score, max_score = by_course_grade[student][:2]
            # nbgrader's feedback template shows scores with Jinja's round(2), Python's round: 17.125 as 17.12
            assert re.search(rf"{SECTION} \(Score: {round(score, 2):g}(\.0+)? / {round(max_score, 2):g}(\.0+)?\)",
                             text), text[:2000]
            flat, said = " ".join(text.split()), " ".join(named.split())   # the page wraps long lines
            if student == hub.students[1]:
                assert f"Most likely cause: {said}" in flat, (said, text[:4000])
                frame.get_by_text("Most likely cause").first.scroll_into_view_if_needed()
                shot(page, test, f"3{n}-student{n}-feedback-mistake")
            else:
                assert said not in flat
        print(f"feedback read after {time.time() - t0:.0f} s")

        # 7. what each student cannot read, tried as that student
        s1, s2 = hub.students
        course = hub.course
        exchange = Path(hub.settings["exchange"]) / hub.settings["course_id"]
        secret = [course, course / "source", course / "source" / SECTION / f"{SECTION}.ipynb", course / "graders",
                  course / "graders" / "data" / f"{SECTION}.pt", course / "submitted", course / "autograded",
                  course / "feedback", course / "gradebook.db", ROOT / "source", ROOT / "graders" / "data",
                  ROOT / "source" / SECTION / f"{SECTION}.ipynb", ROOT / "tests",
                  exchange / "inbound", exchange / "feedback"]   # the exchange's two folders: nobody lists them
        for me, other in ((s1, s2), (s2, s1)):
            theirs = [hub.home(other), hub.home(other) / SECTION, hub.home(other) / SECTION / f"{SECTION}.ipynb",
                      *sorted((hub.home(other) / SECTION / "feedback").rglob("*"))]
            readable = [str(p) for p in secret + theirs if hub.can_read(me, p)]
            assert readable == [], (me, readable)
            assert hub.can_read(me, hub.home(me) / SECTION / f"{SECTION}.ipynb")   # the check itself works
        # a submission is in its student's own inbound folder (deploy/course_exchange.py): even by its exact name,
        # another student cannot read it
        by_name = sorted((exchange / "inbound" / s2).iterdir())
        assert by_name and not any(hub.can_read(s1, q) for q in [*by_name, *(f for d in by_name for f in d.iterdir())])
        print(f"hub loop done in {time.time() - t0:.0f} s")


# -- the exchange a student cannot subvert (deploy/course_exchange.py), each trick paired with nbgrader's own -------
def _in_this_run(stamp: str) -> bool:
    """``stamp`` (a timestamp.txt, nbgrader's UTC format) is a time of this test run (no test depends on the date)."""
    from datetime import timezone

    from nbgrader.utils import parse_utc

    when = parse_utc(stamp.strip())
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return STARTED - 1 <= when.timestamp() <= time.time() + 1


NBGRADER_DEFAULT = {f"--ExchangeFactory.{k}=nbgrader.exchange.default.{k}.Exchange{v}"
                    for k, v in (("submit", "Submit"), ("collect", "Collect"))}


def _nbgrader(hub) -> str:
    return f"{hub.settings['venv']}/bin/nbgrader"


def _nbg_instructor(hub, *cmd, **kw):
    return hub.as_user(hub.instructor, *cmd, cwd=hub.course,
                       env=(f"JUPYTER_CONFIG_PATH={hub.settings['etc']}/instructor",), **kw)


def _nbg_student(hub, user, *cmd, env=(), **kw):
    return hub.as_user(user, *cmd, env=(f"JUPYTER_CONFIG_PATH={hub.settings['etc']}/student", *env), **kw)


def _ok(proc):
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def released(hub):
    """02 released by the instructor and fetched by both students, with nbgrader's commands."""
    _ok(_nbg_instructor(hub, _nbgrader(hub), "release_assignment", SECTION, "--force"))
    for s in hub.students:
        if not (hub.home(s) / SECTION).exists():
            _ok(_nbg_student(hub, s, _nbgrader(hub), "fetch_assignment", SECTION))
    return Path(hub.settings["exchange"]) / hub.settings["course_id"]


@pytest.fixture(scope="module")
def nbgrader_exchange(hub, released):
    """The same course on nbgrader's documented exchange (root 0777, inbound 2733), for the pairings."""
    from deploy.hub import _chown_tree

    root = Path(tempfile.mkdtemp(prefix="nbgrader-exchange-", dir="/tmp"))
    root.chmod(0o777)
    course = root / hub.settings["course_id"]
    shutil.copytree(released / "outbound", course / "outbound")
    (course / "inbound").mkdir()
    _chown_tree(course, hub.instructor)
    course.chmod(0o755)
    (course / "inbound").chmod(0o2733)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_student_cannot_replace_list_or_write_into_the_exchange(hub, released, nbgrader_exchange):
    """The trojan: a student renames the course's exchange folder and puts their own in its place; or writes
    into another's inbound, or lists it. Refused on the hub's exchange; the same commands work on nbgrader's."""
    s1, s2 = hub.students

    def tricks(ex: Path, course: Path, theirs: Path) -> dict:
        return {"write into another's inbound": ["mkdir", str(theirs / f"{s1}+{SECTION}+2099-01-01 00:00:00 UTC")],
                "add a course folder": ["mkdir", str(ex / "trojan")],
                "list the inbound": ["ls", str(course / "inbound")],
                "rename the course folder": ["mv", str(course), str(ex / "gone")]}

    ex = Path(hub.settings["exchange"])
    ours = {k: hub.as_user(s2, *c, cwd="/").returncode for k, c in tricks(ex, released, released / "inbound" / s1).items()}
    assert all(rc != 0 for rc in ours.values()), ours
    for extra in (["mkdir", str(released / "outbound" / "x")], ["ls", str(released / "inbound" / s1)],
                  ["ls", str(released / "feedback")]):
        assert hub.as_user(s2, *extra, cwd="/").returncode != 0, extra
    theirs = nbgrader_exchange / hub.settings["course_id"]
    before = tricks(nbgrader_exchange, theirs, theirs / "inbound")
    worked = {k: hub.as_user(s2, *c, cwd="/").returncode for k, c in before.items() if k != "list the inbound"}
    assert all(rc == 0 for rc in worked.values()), worked     # the pairing: the same tricks, nbgrader's exchange
    (nbgrader_exchange / "gone").rename(theirs)


def test_a_student_submits_as_themselves_only(hub, released, nbgrader_exchange):
    """``nbgrader submit --student=<another>`` (nbgrader#1097) is refused, and $USER/$LOGNAME change nothing: the
    submission lands in the account's own folder. nbgrader's own submit, on its exchange, files it as the other."""
    s1, s2 = hub.students
    nbg, inbound = _nbgrader(hub), released / "inbound"
    before = sorted(os.listdir(inbound / s1))
    forged = _nbg_student(hub, s2, nbg, "submit", SECTION, f"--student={s1}")
    assert forged.returncode != 0 and f"You submit as yourself ({s2})" in forged.stdout + forged.stderr, forged
    _ok(_nbg_student(hub, s2, nbg, "submit", SECTION, env=(f"USER={s1}", f"LOGNAME={s1}")))
    assert sorted(os.listdir(inbound / s1)) == before
    mine = sorted(inbound / s2 / n for n in os.listdir(inbound / s2))
    assert mine and all(p.stat().st_uid == pwd.getpwnam(s2).pw_uid for p in mine), mine
    assert not any(hub.can_read(s1, p) for p in mine)
    # the pairing: nbgrader's exchange and submit take the name given
    theirs = nbgrader_exchange / hub.settings["course_id"] / "inbound"
    _ok(_nbg_student(hub, s2, nbg, "submit", SECTION, f"--student={s1}", f"--Exchange.root={nbgrader_exchange}",
                    *sorted(NBGRADER_DEFAULT)))
    assert any(n.startswith(f"{s1}+{SECTION}+") for n in os.listdir(theirs)), os.listdir(theirs)


def test_collect_takes_the_released_notebook_as_a_file_and_the_kernels_time(hub, released):
    """A student's own submission made by hand: the notebook a link to the instructor's solution (and the
    gradebook), an extra ``ipykernel_launcher.py``, a far-future folder name, a forged ``timestamp.txt``.
    Collect takes no link and no extra file, and times it by the kernel's ctime; nbgrader's copy (the same
    folder through ``Exchange.do_copy``) carries the solution and the launcher. Then the honest resubmission:
    the notebook is collected, with its secret."""
    _, s2 = hub.students
    nbg, folder = _nbgrader(hub), released / "inbound" / s2
    crafted = folder / f"{s2}+{SECTION}+2099-01-01 00:00:00.000000 UTC+x"
    solution = hub.course / "source" / SECTION / f"{SECTION}.ipynb"
    make = (f"mkdir '{crafted}' && ln -s '{solution}' '{crafted}/{SECTION}.ipynb' && "
            f"ln -s '{hub.course}/gradebook.db' '{crafted}/gradebook.db' && "
            f"echo 'open(\"/tmp/{hub.instructor}-pwned\", \"w\")' > '{crafted}/ipykernel_launcher.py' && "
            f"echo '2000-01-01 00:00:00.000000 UTC' > '{crafted}/timestamp.txt'")
    _ok(hub.as_user(s2, "bash", "-c", make, cwd="/"))
    log = _ok(_nbg_instructor(hub, nbg, "collect", SECTION, "--update", f"--student={s2}"))
    got = hub.course / "submitted" / s2 / SECTION
    # the crafted folder gives nothing (collect passes over it to the student's earlier real submission, if any)
    assert "ipykernel_launcher.py" not in os.listdir(got) and "gradebook.db" not in os.listdir(got), os.listdir(got)
    assert "### BEGIN SOLUTION" not in (got / f"{SECTION}.ipynb").read_text() if (got / f"{SECTION}.ipynb").exists() else True
    assert f"{SECTION}.ipynb: a link" in log and "ipykernel_launcher.py: not a released notebook" in log, log
    when = (got / "timestamp.txt").read_text()
    assert _in_this_run(when), when   # a real submission's or the collection's time, not the crafted 2000 or 2099
    # the pairing: nbgrader's copy of the same folder follows the links and takes the launcher
    probe = ("import sys; from nbgrader.exchange.default.exchange import Exchange; "
             "from nbgrader.coursedir import CourseDirectory; "
             "Exchange(coursedir=CourseDirectory()).do_copy(sys.argv[1], sys.argv[2])")
    out = Path(tempfile.mkdtemp(dir=hub.home(hub.instructor)))
    try:
        shutil.chown(out, hub.instructor)
        _ok(hub.as_user(hub.instructor, f"{hub.settings['venv']}/bin/python", "-c", probe, str(crafted),
                        str(out / "copy"), cwd=hub.home(hub.instructor)))
        assert "### BEGIN SOLUTION" in (out / "copy" / f"{SECTION}.ipynb").read_text()
        assert (out / "copy" / "ipykernel_launcher.py").exists()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    # the honest flow: a real submission, then its timestamp.txt rewritten (nbgrader#1104): the notebook and its
    # secret are collected, the time is the kernel's
    _ok(_nbg_student(hub, s2, nbg, "submit", SECTION))
    newest = max(folder.iterdir(), key=lambda p: p.stat().st_ctime)
    _ok(hub.as_user(s2, "bash", "-c", f"echo '2000-01-01 00:00:00.000000 UTC' > '{newest}/timestamp.txt'", cwd="/"))
    _ok(_nbg_instructor(hub, nbg, "collect", SECTION, "--update", f"--student={s2}"))
    assert sorted(os.listdir(got)) == sorted([f"{SECTION}.ipynb", "submission_secret.txt", "timestamp.txt"])
    assert _in_this_run((got / "timestamp.txt").read_text()), "the kernel's time, not the rewritten 2000"
    assert "### BEGIN SOLUTION" not in (got / f"{SECTION}.ipynb").read_text()


def test_a_kernel_never_imports_from_the_notebooks_folder(hub):
    """An ``ipykernel_launcher.py`` beside a collected notebook ran as the instructor when they opened it: the
    hub's kernelspec starts Python with ``-P``. The same launcher without ``-P`` (the venv's own kernelspec) runs it."""
    from deploy.hub import _chown_tree

    spec = json.loads(Path(hub.settings["venv"], "share", "jupyter", "kernels", "python3", "kernel.json").read_text())
    assert spec["argv"][1] == "-P", spec["argv"]
    home = hub.home(hub.instructor)
    folder = home / "collected-lookalike"
    marker = home / "pwned"
    folder.mkdir(exist_ok=True)
    (folder / "ipykernel_launcher.py").write_text(f"open({str(marker)!r}, 'w')\n")
    _chown_tree(folder, hub.instructor)
    try:
        for argv, runs in ((spec["argv"][:4], False), ([spec["argv"][0], *spec["argv"][2:4]], True)):
            marker.unlink(missing_ok=True)
            hub.as_user(hub.instructor, *argv, "--help", cwd=folder, timeout=120)
            assert marker.exists() is runs, (argv, runs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        marker.unlink(missing_ok=True)


# -- one student against the class: their own origin, their own disk, their own folder ---------------------------
def _api(hub, method, path, *, host=None, token=None, body=None, timeout=60):
    """(status, JSON or text) of a request through the hub's proxy (to 127.0.0.1, ``host`` as the Host header:
    only the browser resolves *.localhost)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{hub.port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Host", host or f"localhost:{hub.port}")
    if token:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _token(hub, user) -> str:
    """A hub API token of ``user``, asked for with their password (PAM), as a script of theirs would."""
    status, got = _api(hub, "POST", f"/hub/api/users/{user}/tokens",
                       body={"auth": {"username": user, "password": hub.passwords[user]}, "note": "test"})
    assert status in (200, 201), (status, got)
    return got["token"]


def _server_up(hub, user, token, restart=False):
    """Start ``user``'s server through the hub's API (stopped first with ``restart``), once it answers."""
    if restart:
        _api(hub, "DELETE", f"/hub/api/users/{user}/server", token=token)
        deadline = time.time() + 120
        while time.time() < deadline and _api(hub, "GET", f"/hub/api/users/{user}", token=token)[1].get("servers"):
            time.sleep(1)
    _api(hub, "POST", f"/hub/api/users/{user}/server", token=token)
    deadline = time.time() + 240
    while time.time() < deadline:
        info = _api(hub, "GET", f"/hub/api/users/{user}", token=token)[1]
        if (info.get("servers") or {}).get("", {}).get("ready"):
            return
        time.sleep(1)
    raise AssertionError(f"{user}'s server did not start: {info}")


def _in_kernel(hub, user, token, code, timeout=300) -> str:
    """Run ``code`` in a fresh kernel of ``user``'s own server (their limits, their mounts: what their notebook or
    terminal runs), through the server's REST and websocket API; its printed output."""
    import asyncio
    import uuid

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    host = f"{user}.localhost:{hub.port}"
    status, kernel = _api(hub, "POST", f"/user/{user}/api/kernels", host=host, token=token, body={})
    assert status == 201, (status, kernel)

    async def run():
        ws = await websocket_connect(HTTPRequest(
            f"ws://127.0.0.1:{hub.port}/user/{user}/api/kernels/{kernel['id']}/channels",
            headers={"Host": host, "Authorization": f"token {token}"}))
        msg_id = uuid.uuid4().hex
        await ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": user, "session": msg_id,
                       "version": "5.3"}, "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False}}))
        out = []
        while True:
            m = json.loads(await ws.read_message())
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                out.append(m["content"]["text"])
            elif m["msg_type"] == "error":
                out.append("\n".join(m["content"]["traceback"]))
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                ws.close()
                return "".join(out)

    from concurrent.futures import ThreadPoolExecutor

    try:   # (in a thread of its own: the browser's driver keeps an event loop in this one)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, asyncio.wait_for(run(), timeout)).result()
    finally:
        _api(hub, "DELETE", f"/user/{user}/api/kernels/{kernel['id']}", host=host, token=token)


ATTACK_PAGE = """<!doctype html><title>plot</title><script>
window.attack = async (instructor, hubOrigin) => {
  const out = {};
  const home = instructor + "/api/contents/";
  try { const f = document.createElement("iframe"); f.src = instructor + "/lab"; document.body.appendChild(f);
        await new Promise(ok => { f.onload = ok; setTimeout(ok, 15000); });
        out.xsrf = (f.contentDocument.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "none";
  } catch (e) { out.xsrf = "blocked"; }
  const xsrf = out.xsrf && !["blocked", "none"].includes(out.xsrf) ? out.xsrf :
               (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
  const headers = {"X-XSRFToken": decodeURIComponent(xsrf)};
  try { const r = await fetch(home + "attention-transformers/source", {credentials: "include", headers});
        out.source = r.status === 200 ? (await r.json()).content.map(e => e.name).join(",") : "status " + r.status;
  } catch (e) { out.source = "blocked"; }
  try { const r = await fetch(home + "pwned.txt", {method: "PUT", credentials: "include",
          headers: {...headers, "Content-Type": "application/json"},
          body: JSON.stringify({type: "file", format: "text", content: "pwned"})});
        out.write = "status " + r.status;
  } catch (e) { out.write = "blocked"; }
  try { const r = await fetch(hubOrigin + "/hub/api/users/" + instructor.split("/").pop() + "/tokens",
          {method: "POST", credentials: "include", body: "{}"});
        out.token = "status " + r.status;
  } catch (e) { out.token = "blocked"; }
  return out;
};
</script><p>my plot</p>"""


@pytest.mark.slow
def test_a_page_a_student_serves_cannot_reach_the_instructor(hub, pages):
    """The take-over: a student adds ``extra_static_paths`` to their own ~/.jupyter config and restarts; their
    ``static/plot.html`` was served, and, opened once by the instructor, made an instructor token, framed the
    instructor's server to read its _xsrf, read ``source/`` and wrote into the instructor's home. Now the
    student's config is not read (a plain Jupyter config path of theirs still lists it: the pairing), and a page
    on the student's origin, whatever serves it, reaches none of it; the very same page on the instructor's own
    origin (the one origin every server shared before) reads ``source/`` and writes the file."""
    s = hub.students[0]
    home = hub.home(s)
    conf = home / ".jupyter" / "jupyter_server_config.py"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"c.ServerApp.extra_static_paths = [{str(home / 'mystatic')!r}]\n")
    (home / "mystatic").mkdir(exist_ok=True)
    (home / "mystatic" / "plot.html").write_text(ATTACK_PAGE)
    subprocess.run(["chown", "-R", f"{s}:{s}", str(conf.parent), str(home / "mystatic")], check=True)
    token = _token(hub, s)
    _server_up(hub, s, token, restart=True)
    status, _ = _api(hub, "GET", f"/user/{s}/static/plot.html", host=f"{s}.localhost:{hub.port}")
    assert status == 404, status
    listed = hub.as_user(s, f"{hub.settings['venv']}/bin/python", "-c",
                         "from jupyter_core.paths import jupyter_config_path; print(jupyter_config_path())")
    assert str(home / ".jupyter") in listed.stdout, listed   # the pairing: a plain server of theirs reads that file

    ipage = pages.login(hub.instructor)
    instructor = hub.user_url(hub.instructor)
    marker = hub.home(hub.instructor) / "pwned.txt"
    results = {}
    for where in (f"{hub.user_url(s)}/plot.html", f"{instructor}/plot.html"):   # the student's origin; the pairing
        ipage.route(where, lambda route: route.fulfill(status=200, content_type="text/html", body=ATTACK_PAGE))
        ipage.goto(where)
        results[where] = ipage.evaluate("([i, h]) => window.attack(i, h)", [instructor, hub.base])
        results[where]["file"] = marker.exists()
        marker.unlink(missing_ok=True)
    print(json.dumps(results, indent=1))
    theirs, own = results.values()
    assert theirs["source"] in ("blocked",) or theirs["source"].startswith("status"), theirs
    assert theirs["xsrf"] == "blocked" and not theirs["file"] and theirs["token"] != "status 201", theirs
    assert SECTION in own["source"] and own["file"], own    # the same page, on the one shared origin of before
    conf.unlink()


ATTACKER = r"""
import errno, json, os, resource
out, home = {}, os.path.expanduser("~")
def fill(path, keep=False):
    n = 0
    try:
        with open(path, "wb", buffering=0) as f:
            while True:
                n += f.write(b"x" * (1 << 20))
    except OSError as exc:
        return n, errno.errorcode[exc.errno]
    finally:
        if not keep and os.path.exists(path):
            os.unlink(path)
out["tmp"] = fill("/tmp/fill")
out["shm"] = fill("/dev/shm/fill")
os.makedirs(os.path.join(home, "many"), exist_ok=True)
n, why = 0, ""
try:
    while True:                       # every inode of the disk, kept
        open(os.path.join(home, "many", str(n)), "w").close()
        n += 1
except OSError as exc:
    why = errno.errorcode[exc.errno]
out["inodes"] = (n, why)
os.unlink(os.path.join(home, "many", "0"))
out["home"] = fill(os.path.join(home, "fill"), keep=True)   # then every byte, kept
held = []
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # as high as the account may
try:
    while True:
        held.append(open("/dev/null"))
except OSError as exc:
    out["open_files"] = (len(held), errno.errorcode[exc.errno])
for f in held:
    f.close()
others = {}
for p in CGROUP_FILES:
    try:
        open(p).read(); others[p] = "read"
    except OSError as exc:
        others[p] = errno.errorcode[exc.errno]
out["others_cgroups"] = others
print(json.dumps(out))
"""


@pytest.mark.slow
def test_one_student_exhausting_their_disk_and_files_leaves_the_class_working(hub, released):
    """196k empty files exhausted the machine's inodes (logins failed: the hub's SQLite shares the disk) and
    2.6 GB filled its disk; one student held 980,000 open files; every student read every other's cgroup. Now,
    from a kernel of the attacker's own server: their disk fills (bytes, then files) at its size, their /tmp is
    on it, /dev/shm is 64 MiB of their own, open files stop at the hub's limit, the classmate's cgroup is closed
    -- and meanwhile the honest classmate logs in, submits, is collected and gets feedback. Paired: the same
    writes and opens outside the student's server (no hub limits: a shell on the machine) go past each limit."""
    from deploy.hub import CGROUPS, parse_size, resolve_limits

    honest, attacker = hub.students
    limits = resolve_limits(hub.settings["limits"])
    assert hub.settings.get("disks"), f"no disks of their own here: {hub.settings.get('no_disk')}"
    _server_up(hub, honest, _token(hub, honest))   # (its cgroups: the attacker tries to read them)
    cgroup_files = [str(p) for p in CGROUPS.glob(f"*/attncourse-hub/{honest}/*")
                    if p.name in ("cgroup.procs", "memory.usage_in_bytes", "memory.current", "pids.current")]
    token = _token(hub, attacker)
    _server_up(hub, attacker, token)
    machine = os.statvfs(hub.settings["state"])   # the hub's state: the machine's disk
    t = time.time()
    try:
        out = json.loads(_in_kernel(hub, attacker, token, f"CGROUP_FILES = {cgroup_files!r}\n" + ATTACKER).strip()
                         .splitlines()[-1])
        print(f"the attack from {attacker}'s kernel ({time.time() - t:.0f} s): {json.dumps(out)}")
        after = os.statvfs(hub.settings["state"])
        used = ((machine.f_bavail - after.f_bavail) * after.f_frsize, machine.f_favail - after.f_favail)
        print(f"the machine's disk meanwhile: {used[0] / 2**20:.1f} MiB and {used[1]} inodes used")
        assert used[0] < 64 << 20 and used[1] < 1000, used   # (others work on this machine too)
        disk = parse_size(DISK)
        assert out["home"][1] in ("ENOSPC", "EFBIG") and out["home"][0] <= disk, out
        assert out["tmp"][1] in ("ENOSPC", "EFBIG") and out["tmp"][0] <= disk, out
        assert out["shm"][1] == "ENOSPC" and out["shm"][0] <= 64 << 20, out
        assert out["inodes"][1] in ("ENOSPC", "EDQUOT") and out["inodes"][0] <= INODES, out
        assert out["open_files"][1] == "EMFILE" and out["open_files"][0] < limits["open_files"], out
        assert cgroup_files and set(out["others_cgroups"].values()) == {"EACCES"}, out
        # the class meanwhile, the attacker's disk full (bytes and inodes): a login (PAM and the hub's database),
        # a submission, collect, feedback
        _token(hub, honest)
        nbg = _nbgrader(hub)
        _ok(_nbg_student(hub, honest, nbg, "submit", SECTION))
        log = _ok(_nbg_instructor(hub, nbg, "collect", SECTION, "--update", f"--student={honest}"))
        assert (hub.course / "submitted" / honest / SECTION / f"{SECTION}.ipynb").is_file(), log
        if (hub.course / "feedback" / honest / SECTION).is_dir():   # (the round trip made it)
            _ok(_nbg_instructor(hub, nbg, "release_feedback", SECTION))
            _ok(_nbg_student(hub, honest, nbg, "fetch_feedback", SECTION))
        # the pairing: the same code where the hub's limits do not apply (a shell outside the student's server)
        free = hub.as_user(attacker, "python3", "-c", f"""
import os
n = 0
with open("/var/tmp/{attacker}-fill", "wb") as f:
    while n < {disk + (32 << 20)}:
        n += f.write(b"x" * (1 << 20))
os.unlink("/var/tmp/{attacker}-fill")
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
held = [open("/dev/null") for _ in range({limits['open_files'] + 100})]
print(n, len(held))""", cwd="/")
        assert free.returncode == 0, free.stderr[-2000:]
        n, files = map(int, free.stdout.split())
        assert n > disk and files > limits["open_files"], free
        assert os.access(cgroup_files[0], os.R_OK)   # (root reads it: the file is there)
    finally:
        shutil.rmtree(hub.home(attacker) / "many", ignore_errors=True)
        (hub.home(attacker) / "fill").unlink(missing_ok=True)


def test_a_student_cannot_stop_the_class_collection(hub, released):
    """``chmod 700`` on one's own submission folder made ``nbgrader collect`` fail for the class (rc 1, 0 of 3);
    a chmod of one's inbound folder dropped its setgid bit for good. Now the student cannot chmod their inbound
    folder (the instructor's), and a submission they close is their own line in collect's log while the classmate
    is collected; the instructor's ``list --inbound --remove`` works on the students' folders. Paired: reopened,
    that submission is collected again."""
    s1, s2 = hub.students
    nbg = _nbgrader(hub)
    inbound = released / "inbound"
    assert hub.as_user(s2, "chmod", "700", str(inbound / s2), cwd="/").returncode != 0
    assert (inbound / s2).stat().st_mode & 0o777 == 0o770
    for s in (s1, s2):
        _ok(_nbg_student(hub, s, nbg, "submit", SECTION))
    newest = max((p for p in (inbound / s2).iterdir() if p.name.startswith(f"{s2}+")), key=lambda p: p.stat().st_ctime)
    _ok(hub.as_user(s2, "chmod", "700", str(newest), cwd="/"))
    shutil.rmtree(hub.course / "submitted", ignore_errors=True)
    log = _ok(_nbg_instructor(hub, nbg, "collect", SECTION))
    assert f"Left out {newest}: cannot be read" in log, log
    assert (hub.course / "submitted" / s1 / SECTION / f"{SECTION}.ipynb").is_file(), log
    _ok(hub.as_user(s2, "chmod", "755", str(newest), cwd="/"))
    _ok(_nbg_instructor(hub, nbg, "collect", SECTION, "--update"))
    stamp = (hub.course / "submitted" / s2 / SECTION / "timestamp.txt").read_text()
    from deploy.course_exchange import folder_time, format_time

    assert stamp == format_time(folder_time(str(newest))), stamp
    # the instructor removes the students' submissions (PermissionError on the 2750 folders before)
    log = _ok(_nbg_instructor(hub, nbg, "list", "--inbound", "--remove", SECTION))
    left = _ok(_nbg_instructor(hub, nbg, "list", "--inbound", SECTION))
    assert s1 not in left and s2 not in left, (log, left)


FORK_SERVER_PROBE = ("import os, sys; sys.path.insert(0, os.getcwd()); from judge import sandbox, zygote; "
                     "z = zygote.get(sandbox.kernel_env(os.environ, '/tmp'), 64, 2048); "
                     "print('started' if z else zygote.why_not())")


@pytest.mark.slow
def test_the_preloaded_fork_server_starts_on_the_hub(hub):
    """On the hub the preloaded fork server once never started ("No module named 'resource'"), so every grading
    kernel was a fresh sandbox: the hub's Python lived in its folder under /tmp (the tests' hub), and a kernel's
    /tmp was its own, hiding it.  The fork server starts for the instructor in the course folder, and since the
    kernels bind the host's /tmp folders they need back (tests/test_kernel_tmp.py) the same Python copied under /tmp
    starts it too; ./course hub still refuses a hub folder under /tmp (a student's /tmp is shared and cleaned)."""
    from deploy.hub import _why_not_dir, base_python, shared_venv

    assert "under /tmp" in _why_not_dir(Path("/tmp/attncourse-hub")) and _why_not_dir(hub.hubdir) is None
    got = hub.as_user(hub.instructor, f"{hub.settings['venv']}/bin/python", "-c", FORK_SERVER_PROBE, cwd=hub.course,
                      timeout=300)
    assert got.stdout.strip().splitlines()[-1:] == ["started"], got.stdout + got.stderr
    under_tmp = Path(tempfile.mkdtemp(prefix="attncourse-hub-python-", dir="/tmp"))
    try:
        venv = shared_venv(under_tmp / "venv", base_python(under_tmp / "python"))
        copied = subprocess.run([str(venv / "bin" / "python"), "-c", FORK_SERVER_PROBE], cwd=hub.course,
                                capture_output=True, text=True, timeout=300)
        assert copied.stdout.strip().splitlines()[-1:] == ["started"], copied.stdout + copied.stderr
    finally:
        shutil.rmtree(under_tmp, ignore_errors=True)


@pytest.mark.slow
def test_student_python_needs_no_environment_and_servers_run_under_limits(hub, pages):
    """A student's Python runs with no environment at all (``env -i``: no LD_LIBRARY_PATH; a copied interpreter
    finds its libpython by RUNPATH) and imports ssl and torch; a student's server runs under the hub's limits (its
    RLIMIT_NPROC and RLIMIT_AS, its own cgroups), the instructor's does not."""
    import sys

    import psutil

    student = hub.students[0]
    proc = subprocess.run(["runuser", "-u", student, "--", "env", "-i", f"{hub.settings['venv']}/bin/python", "-c",
                           "import ssl, sys, torch; print(sys.version.split()[0], torch.__version__)"],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[0] == sys.version.split()[0], proc.stdout   # this very Python, not Debian's 3.11.2
    for user in (student, hub.instructor):
        pages.login(user)
    limits = hub.settings["limits"]

    def server(user):
        uid = pwd.getpwnam(user).pw_uid
        return next(p for p in psutil.process_iter(["uids", "cmdline"])
                    if p.info["uids"].real == uid and "jupyterhub-singleuser" in " ".join(p.info["cmdline"] or []))

    def rlimits(proc):   # /proc/PID/limits: {"Max processes": "512", ...} (soft limits)
        rows = Path(f"/proc/{proc.pid}/limits").read_text().splitlines()[1:]
        return {r[:26].strip(): r[26:47].strip() for r in rows}

    s, i = server(student), server(hub.instructor)
    sl, il = rlimits(s), rlimits(i)
    assert sl["Max processes"] == str(limits["user_procs"]), sl
    assert sl["Max address space"] == str(limits["process_memory"]), sl
    assert il["Max processes"] != str(limits["user_procs"]) and il["Max address space"] == "unlimited", il
    cgroups = Path(f"/proc/{s.pid}/cgroup").read_text()
    print(f"{student}'s server: {sl['Max processes']} processes, {sl['Max address space']} bytes, "
          f"cgroups {' '.join(ln for ln in cgroups.split() if 'attncourse' in ln)}")
    from deploy.hub import user_cgroups

    if user_cgroups(f"probe{os.getpid()}", limits, parent="attncourse-hub-probe"):   # cgroups can be made here
        from deploy.hub import remove_user_cgroups

        remove_user_cgroups([f"probe{os.getpid()}"], parent="attncourse-hub-probe")
        assert f"attncourse-hub/{student}" in cgroups, cgroups
    said = next(ln for ln in hub.lines if ln.startswith("per student: "))
    print(said)
    if "/proc hidepid=2 (others' processes hidden)" in said:   # where the machine allows it: only one's own
        assert not hub.can_read(student, f"/proc/{i.pid}/cmdline") and hub.can_read(student, f"/proc/{s.pid}/cmdline")


@pytest.mark.slow
def test_ctrl_c_stops_everything(hub):
    """Ctrl-C on ./course hub: it says so and exits 0, and no hub, proxy, server or kernel of its users is left."""
    assert hub.proc.poll() is None, "\n".join(hub.lines[-30:])
    t = time.time()
    rc = hub.ctrl_c()
    print(f"stopped in {time.time() - t:.1f} s")
    assert rc == 0, "\n".join(hub.lines[-30:])
    assert any(ln.startswith("stopped: JupyterHub") for ln in hub.lines), hub.lines[-10:]
    assert hub.leftovers() == []
    import socket

    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", hub.port)) != 0, "the proxy still listens"
