"""Verdicts for an in-process :class:`~attncourse.kernel.grader.Grader`, from the course's judge in a process of its own.

Where no autograder judges (an instructor running a source notebook, a self-study learner's ``check_now``), the
kernel holds the instructor's full data and the Grader reports each check's verdict at once. The verdict is still
not made here: this package imports nothing of the judge. :class:`VerdictProcess` starts, at the first check,
``python -m judge.selfcheck --verdicts SECTION`` in the course checkout (the judge is the checkout's top-level
package, never the installed one's: a student's wheel carries none), hands it each record as a JSON line and reads
the verdict back — the same records, in the same JSON, that the grading judge reads from an autograded notebook.
Whoever holds the judge in its own process (the test suite, ``authoring.cuda_check``) passes ``judge_record`` to the
Grader instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import weakref

from ..course import judge_home

VERDICTS_ARG = "--verdicts"   # judge.selfcheck's flag for this line protocol


class JudgeUnavailable(RuntimeError):
    """The course's judge could not be started or stopped answering: the line says why."""


class VerdictProcess:
    """``judge_record(spec, record, messages)`` and a cell's ``score(points, checks)``, answered by the course
    checkout's judge (``root``: the folder holding ``judge/`` and ``graders/data``) in a child process, started at
    the first call and stopped with this object (or when this process ends: it reads its stdin to the end)."""

    def __init__(self, root, section: str):
        self.root, self.section = str(root), section
        self._proc = None
        self._err = None

    def _start(self):
        self._err = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        home = judge_home(self.root)
        if home is None:
            raise JudgeUnavailable(f"no course judge beside {self.root} or this package (judge/selfcheck.py): "
                                   "checks need the course checkout")
        # the judge is the checkout's top-level package: found from ``root`` (a course copy holding it) or the
        # checkout this package is installed from (a course copy without it: the gates' scratch courses)
        env["PYTHONPATH"] = os.pathsep.join([home] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "judge.selfcheck", VERDICTS_ARG, self.section], cwd=self.root, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, bufsize=1)
        except OSError as exc:
            raise JudgeUnavailable(f"the course's judge could not be started ({exc})") from None
        weakref.finalize(self, _stop, self._proc)

    def _ask(self, request: dict) -> dict:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                raise JudgeUnavailable(self._why())
            self._start()
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise JudgeUnavailable(self._why())
        return json.loads(line)

    def _why(self) -> str:
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._err.seek(0)
        last = [ln for ln in self._err.read().decode(errors="replace").splitlines() if ln.strip()][-1:]
        return (f"the course's judge (python -m judge.selfcheck in {self.root}) stopped "
                f"(exit {self._proc.returncode}){': ' + last[0] if last else ''}")

    def __call__(self, spec, record: dict, messages=None):
        """The verdict on ``record`` (its case is named by the record): None when it passes, else the message."""
        return self._ask({"judge": f"{record.get('exercise')}:{record.get('case')}", "record": record})["problem"]

    def score(self, points: float, checks: list) -> float:
        """What a cell of ``points`` earns from its checks (``[{"weight", "passed"}]``), as the grading judge scores."""
        return self._ask({"score": points, "checks": checks})["score"]

    def close(self):
        if self._proc is not None:
            _stop(self._proc)


def _stop(proc):
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
