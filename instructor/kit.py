"""A section's kit (what a Dask task needs of the course, as bytes) and a submission's files, read safely."""
from __future__ import annotations

import os
from pathlib import Path

from judge.autograded import SCHEMA
from judge.files import read_tree
from judge.scratch import course_files, tree_hash

from .prescan import submission_folder


def make_kit(root: Path, section: str) -> dict:
    """Everything a task needs of the course for ``section`` (:func:`judge.scratch.course_files`),
    as bytes, with a content hash (a changed kit regrades everyone; so does a new format of the judge's verdicts,
    :data:`judge.autograded.SCHEMA`, which autograded notebooks of an older one do not carry)."""
    files = course_files(root, section)
    return {"section": section, "files": files, "hash": tree_hash({**files, "(verdict schema)": str(SCHEMA).encode()})}


def with_template(kit: dict) -> dict:
    """The kit with its generated scratch course (:func:`instructor.task.generate_template`), made once here by the
    coordinator rather than once per worker; a failure is the run's, said in one line."""
    from judge.autograded import first_line

    from .config import CourseError
    from .task import generate_template

    try:
        return {**kit, "template": generate_template(kit)}
    except Exception as exc:  # noqa: BLE001
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        raise CourseError(f"{kit['section']}: generate_assignment failed in a scratch course: "
                          + first_line(lines[-1] if lines else type(exc).__name__, 300)) from None


def submission_files(root: Path, student: str, section: str, max_kb: int = 2000) -> dict:
    """The regular files of ``submitted/<student>/<section>/``, read without following a link (links, special
    files and files over ``max_kb`` are left out; the report's prescan names them)."""
    folder = submission_folder(root, student, section)
    return read_tree(folder, max_file_bytes=max_kb * 1024).files if folder is not None else {}


def kit_result(kit: dict) -> dict:
    """The kit as a task's result (see :class:`KitFutures`)."""
    return kit


def kit_with_template(kit: dict) -> dict:
    """The kit with its generated scratch course (:func:`with_template`), made on the worker this task runs on: on
    Dask, once a run and section, then sent to the workers that grade it (:class:`KitFutures`)."""
    return kit if kit.get("template") else with_template(kit)


class KitFutures:
    """Each section's kit on the cluster, sent once, that survives the death of the workers holding it.

    Scattered data cannot be recovered: when the last worker holding it dies, every task that
    needs it fails ("lost dependencies").  A worker dying is a case the run must survive (a
    student's code can kill its worker; the nanny restarts it empty), and two deaths in a row
    lost the kit in CI, failing every later submission.  So the kit is the result of a task
    (``kit_result``) whose spec holds the bytes: the scheduler keeps the spec and computes the kit
    again wherever it is lost.  If that tiny task itself was running on a worker that died
    (it then fails with KilledWorker, with allowed-failures 0), :meth:`lost` says so and the
    kit is sent again, at most ``tries`` times per section.  ``build``: the task that makes the kit there
    (:func:`kit_with_template` for a grading run: its scratch course generated once, on one worker).
    """

    GONE = ("error", "cancelled")   # the kit must be sent again ("lost": the scheduler recomputes it itself)

    def __init__(self, client, kits: dict, tries: int = 5, build=kit_result):
        self.client, self.kits, self.tries, self.build = client, kits, tries, build
        self.futures: dict = {}
        self.sent: dict = {}

    def get(self, section: str):
        fut = self.futures.get(section)
        if fut is None or fut.status in self.GONE:
            self.sent[section] = self.sent.get(section, 0) + 1
            fut = self.client.submit(self.build, self.kits[section], pure=False,
                                     key=f"kit-{section}-{os.urandom(4).hex()}")
            self.futures[section] = fut
        return fut

    def lost(self, section: str, exc: BaseException) -> bool:
        """Did a grading task fail because its kit did (and may the kit be sent again)?"""
        fut = self.futures.get(section)
        failed = fut is not None and (fut.status in self.GONE or str(getattr(exc, "task", "")) == str(fut.key))
        if failed:
            self.futures.pop(section, None)
        return failed and self.sent.get(section, 0) < self.tries
