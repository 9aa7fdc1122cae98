"""Grading works wherever the course and its Python live: a course and a Python environment under /tmp.

Each forked kernel gets a fresh tmpfs at /tmp, which hid a ``.venv`` or a course package living there: every
kernel exited 71 (``FileNotFoundError: …/IPython/utils/themes/neutral-posix.json``), the canary said "0 / 24 here:
()", ``check()`` said the notebook was not valid JSON, and the quick tier failed 14 tests. What the fork server's
sandbox sees under /tmp is now bound back over each kernel's fresh /tmp, and the fork server is first asked to
start a real kernel.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from judge import sandbox
from tests.harness import ROOT, course_env, total_points

SECTION = "02_qkv_by_hand"


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def course_under_tmp(top: Path) -> tuple[Path, Path]:
    """A copy of this checkout's tracked files under ``top`` (in /tmp), and a Python environment there:
    ``course/.venv`` whose site-packages holds its own IPython and ipykernel (the packages whose data files the
    fresh /tmp hid) and reads the rest of this checkout's environment through a .pth; the copy's course package
    comes first on its path. Returns (course folder, its python)."""
    course = top / "course"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        src = ROOT / rel
        if src.is_file() and not src.is_symlink():
            (course / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, course / rel)
    venv = course / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / ver / "site-packages"
    ours = next(Path(p) for p in sys.path if p.endswith("site-packages") and (Path(p) / "ipykernel").is_dir())
    for pkg in ("IPython", "ipykernel"):
        shutil.copytree(ours / pkg, site / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "attncourse-under-tmp.pth").write_text(f"{course}\nimport site; site.addsitedir({str(ours)!r})\n")
    return course, venv / "bin" / "python"


@pytest.mark.slow
def test_a_course_and_its_python_under_tmp_grade_by_the_default_path():
    """Section 02's solution, submitted to a course copied under /tmp and graded by that course's own Python (a
    venv under /tmp whose IPython lives there): full marks, through the fork server (it holds: no fallback)."""
    _need_bwrap()
    top = Path(tempfile.mkdtemp(prefix="attncourse-under-tmp-", dir="/tmp"))
    try:
        course, python = course_under_tmp(top)
        env = course_env()
        env["PATH"] = f"{python.parent}:{env['PATH']}"   # (nbgrader finds alembic on PATH: the checkout's)
        where = subprocess.run([str(python), "-c", "import attncourse, IPython; print(attncourse.__file__, "
                                "IPython.__file__)"], capture_output=True, text=True, env=env, cwd=course)
        assert where.stdout.split() == [str(course / "attncourse" / "__init__.py"),
                                        str(python.parent.parent / "lib" / f"python{sys.version_info.major}."
                                            f"{sys.version_info.minor}" / "site-packages" / "IPython" /
                                            "__init__.py")], where
        sub = course / "submitted" / "alice" / SECTION
        sub.mkdir(parents=True)
        shutil.copy(course / "source" / SECTION / f"{SECTION}.ipynb", sub)
        for args in (["generate_assignment", SECTION, "--force"], ["autograde", SECTION, "--create", "--force"]):
            p = subprocess.run([str(python), "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                               text=True, timeout=900)
            assert p.returncode == 0, p.stderr[-3000:]
        assert "does not hold" not in p.stderr and "grading kernel stopped" not in p.stderr, p.stderr[-3000:]
        score = subprocess.run([str(python), "-c", "from nbgrader.api import Gradebook\n"
                                f"with Gradebook('sqlite:///gradebook.db') as gb:\n"
                                f"    print(gb.find_submission({SECTION!r}, 'alice').score)"],
                               cwd=course, env=env, capture_output=True, text=True)
        assert float(score.stdout.strip()) == total_points(SECTION), score
    finally:
        sandbox.remove_tree(str(top))
