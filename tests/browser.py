"""Drive the course in a real browser: a JupyterLab from this environment, Debian's chromium, Playwright.

Used by ``tests/test_browser.py`` (which loads this module as a pytest plugin for its
failure hook). Everything here only does what a person does in the browser — open a
notebook, type into a cell, Run All, save, click *Validate*, use formgrader — and reads
what the page shows.

* ``chromium_path()``: the system chromium (``ATTNCOURSE_CHROMIUM`` overrides it).
  Playwright's own browser download is never used.
* ``Lab``: a JupyterLab server on 127.0.0.1 (free port, known token) started from this
  Python with nbgrader's server extensions, its settings and workspaces in a temp folder.
* ``NotebookPage``: one notebook open in JupyterLab.
* On a failed test, ``tests/artifacts/<test>/`` gets ``screenshot.png`` and ``page.txt``
  (the text of the page and of its frames); the failure report prints the path.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from judge.environment import with_python_bin

from tests.harness import ROOT, read_nb, with_cells

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_ENV = "ATTNCOURSE_CHROMIUM"


# -- can a browser run here? --------------------------------------------------------------------
def chromium_path() -> str | None:
    env = os.environ.get(CHROMIUM_ENV)
    if env:
        return env if os.access(env, os.X_OK) else None
    for cand in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = cand if os.access(cand, os.X_OK) else shutil.which(cand)
        if found:
            return found
    return None


def why_no_browser() -> str | None:
    """None where Playwright can drive a chromium here, else the reason (for pytest.skip)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt)"
    if chromium_path() is None:
        return f"no chromium found (apt-get install chromium, or set {CHROMIUM_ENV})"
    return None


# -- the browser --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium():
    """One headless chromium for a test module (Debian's, driven by Playwright); skips, saying why, where none runs."""
    reason = why_no_browser()
    if reason:
        pytest.skip(f"no browser here: {reason}")
    from playwright.sync_api import Error, sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=chromium_path())
    except Error as exc:
        pw.stop()
        # the reason, and the browser's own last words (its log follows the launch command)
        lines = str(exc).splitlines()
        said = [ln.strip() for ln in lines if "[err]" in ln or "exit" in ln]
        pytest.skip(f"{chromium_path()} cannot start here: {' | '.join(lines[:1] + said[-3:])[:600]}")
    yield browser
    browser.close()
    pw.stop()


# -- notebooks with a student's work ------------------------------------------------------------
def solution_cells(source_nb, skip=()) -> dict:
    """grade_id -> the instructor's solution (without nbgrader's delimiters), for every solution cell."""
    marker = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
    return {c.metadata["nbgrader"]["grade_id"]: marker.sub("", c.source) for c in source_nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.metadata["nbgrader"]["grade_id"] not in skip}


def student_work(student_nb, section: str, replace: dict | None = None, skip=()):
    """A student's notebook (release or self-study edition) with every exercise solved.

    The solutions come from ``source/``; ``replace`` (grade_id -> source) puts in other
    answers (a mistake, a written answer); cells in ``skip`` keep the stub.
    """
    sol = solution_cells(read_nb(ROOT / "source" / section / f"{section}.ipynb"), skip)
    sol.update(replace or {})
    return with_cells(student_nb, sol)


# -- the JupyterLab server ----------------------------------------------------------------------
# Settings a fresh user would change or that make a run nondeterministic: no news pop-up, no
# autosave (a test saves itself), every cell rendered (no virtual scrolling to hide cells from the DOM).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """``python -m jupyterlab`` serving ``root_dir``, started in ``cwd`` (where nbgrader finds its config)."""

    def __init__(self, root_dir: Path, cwd: Path, state: Path, env: dict | None = None):
        self.root_dir, self.cwd, self.state = Path(root_dir), Path(cwd), Path(state)
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log_path = self.state / "jupyterlab.log"
        self.env = env

    def url(self, path: str = "lab") -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def start(self, timeout: float = 120):
        settings = self.state / "settings"
        for name, values in LAB_SETTINGS.items():
            p = settings / f"{name}.jupyterlab-settings"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(values))
        env = dict(self.env if self.env is not None else os.environ)
        # none of the test runner's Jupyter or course settings: a fresh user's environment
        env = {k: v for k, v in env.items() if not k.startswith(("JPY_", "JUPYTER_", "ATTNCOURSE_"))}
        env.update({
            "PATH": with_python_bin(env.get("PATH", "")),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.state / "workspaces"),
            "JUPYTER_RUNTIME_DIR": str(self.state / "runtime"),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
        })
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root_dir}",
               "--LabApp.news_url=", "--ServerApp.open_browser=False"]
        if hasattr(os, "getuid") and os.getuid() == 0:
            cmd.append("--allow-root")  # jupyter refuses root without it (containers)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n{self.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url("api/status"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {timeout} s:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self):
        """Shut the server down as Jupyter's own "Shut Down" does (kernels first); signal it only if it hangs."""
        if self.proc is None:
            return
        if self.proc.poll() is not None:
            self.log.close()
            return
        try:
            req = urllib.request.Request(self.url("api/shutdown"), method="POST", data=b"")
            urllib.request.urlopen(req, timeout=10).close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            for sig in (signal.SIGTERM, signal.SIGKILL):  # our server's own process group
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=10)
                    break
                except (ProcessLookupError, PermissionError):
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.log.close()


# -- a notebook open in JupyterLab --------------------------------------------------------------
# For every code cell: its prompt number (-1 while queued/running, 0 never run), whether it is
# empty (JupyterLab does not execute empty cells) and whether it printed an error or stderr.
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook in the current tab
_CELLS_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map(c => {
    const m = /\\[(\\d+|\\*)\\]/.exec(c.querySelector('.jp-InputArea-prompt').textContent);
    const ed = c.querySelector('.cm-content');
    return {n: m ? (m[1] === '*' ? -1 : +m[1]) : 0, empty: !(ed && ed.textContent.trim()),
            err: !!c.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')};
})"""


class NotebookPage:
    def __init__(self, page, lab: Lab, path: str):
        self.page, self.lab, self.path = page, lab, path

    def open(self, timeout: float = 90):
        # a workspace of its own: JupyterLab would otherwise reopen the tabs of an earlier test
        self.page.goto(self.lab.url(f"lab/workspaces/{secrets.token_hex(4)}/tree/{self.path}"))
        self.page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=timeout * 1000)
        self.wait_idle(timeout)
        return self

    def wait_idle(self, timeout: float = 90):
        """Wait until the status bar says the notebook's kernel is connected and idle."""
        self.page.locator("#jp-main-statusbar").get_by_text(re.compile(r"\| Idle$")).wait_for(timeout=timeout * 1000)

    def cell(self, *texts):
        """The one code cell whose text contains every string in ``texts``."""
        loc = self.page.locator(f"{PANEL} .jp-CodeCell")
        for t in texts:
            loc = loc.filter(has_text=t)
        return loc

    def type_into(self, cell, code: str):
        """Replace a cell's code as a person would: click into it, select all, type (verbatim)."""
        cell.locator(".cm-content").click()
        self.page.keyboard.press("ControlOrMeta+a")
        self.page.keyboard.insert_text(code)  # no auto-indent or bracket completion on the way
        self.page.keyboard.press("Escape")

    def _cells(self):
        return self.page.evaluate(_CELLS_JS)

    def run_all(self, timeout: float = 180):
        """Run ▸ Run All Cells; wait until every cell ran or one failed (execution stops there)."""
        before = max([c["n"] for c in self._cells()] + [0])
        self.menu("Run", "Run All Cells")
        self.page.wait_for_function(
            f"""(base) => {{ const cs = ({_CELLS_JS})(); if (cs.some(c => c.n < 0)) return false;
                return cs.some(c => c.n > base && c.err) || cs.every(c => c.empty || c.n > base); }}""",
            arg=before, timeout=timeout * 1000)

    def run_cell(self, cell, timeout: float = 180):
        """Click into a cell, Ctrl+Enter (run it, stay there), and wait for its prompt to get a number."""
        cell.locator(".cm-content").click()
        self.page.keyboard.press("ControlOrMeta+Enter")
        prompt = cell.locator(".jp-InputArea-prompt")
        self.page.wait_for_function("(p) => /\\[\\d+\\]/.test(p.textContent)", arg=prompt.element_handle(),
                                    timeout=timeout * 1000)

    def menu(self, *items):
        for i, name in enumerate(items):
            self.page.get_by_role("menuitem", name=name, exact=True).click()

    def save(self):
        """Ctrl+S; wait until the server has written the file."""
        self.page.locator(f"{PANEL} .jp-NotebookPanel-toolbar").click(position={"x": 2, "y": 2})
        with self.page.expect_response(lambda r: "/api/contents/" in r.url and r.request.method == "PUT") as resp:
            self.page.keyboard.press("ControlOrMeta+s")
        if not resp.value.ok:
            raise AssertionError(f"saving {self.path} failed: HTTP {resp.value.status}")

    def validate(self, timeout: float = 180) -> str:
        """Click nbgrader's *Validate* button; return the text of the dialog it opens (and close it)."""
        self.page.locator(f"{PANEL} .jp-Toolbar").get_by_text("Validate", exact=True).click()
        dialog = self.page.locator(".jp-Dialog").filter(has_text="Validation Results")
        dialog.wait_for(timeout=timeout * 1000)
        return dialog.inner_text()

    def close_dialog(self):
        self.page.locator(".jp-Dialog").get_by_role("button").last.click()
        self.page.locator(".jp-Dialog").wait_for(state="detached")


# -- artifacts on failure -----------------------------------------------------------------------
def page_text(page) -> str:
    parts = []
    for frame in page.frames:
        try:
            parts.append(f"=== frame {frame.url}\n" + frame.evaluate("() => document.body ? document.body.innerText : ''"))
        except Exception as exc:  # noqa: BLE001 - a report, never a second failure
            parts.append(f"=== frame {frame.url}: {exc}")
    return "\n\n".join(parts)


def save_artifacts(page, name: str, folder: Path = ARTIFACTS) -> Path:
    out = folder / re.sub(r"[^\w.-]+", "_", name)
    out.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=str(out / "screenshot.png"), full_page=True)
    except Exception as exc:  # noqa: BLE001
        (out / "screenshot-failed.txt").write_text(str(exc))
    (out / "page.txt").write_text(page_text(page))
    return out


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """When a browser test fails, save the page's screenshot and text and print where."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
    if page is None:
        return
    try:
        out = save_artifacts(page, item.name)
        report.sections.append(("browser", f"screenshot and page text: {out}/"))
        print(f"\nbrowser artifacts for {item.nodeid}: {out}/", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001
        report.sections.append(("browser", f"could not save artifacts: {exc}"))
