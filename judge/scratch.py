"""The one builder of a scratch course: the smallest course folder in which nbgrader can grade a section.

A scratch course holds ``nbgrader_config.py``, ``source/<section>/`` and
``graders/data/<section>.pt`` (:func:`course_files`: read from a course folder as bytes) and
``submitted/<student>/<section>/`` for each submission.  The self-check grades a learner's
saved notebook in one (:mod:`attncourse.selfcheck`); a Dask task grades one submission in one
(:mod:`instructor.task`, whose kit is these files); the test suite and the benches build theirs
the same way.  Files are written with :func:`judge.files.write_tree`: no name leaves
the folder and nothing is written through a link.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from .files import read_regular, read_tree, write_tree

CONFIG = "nbgrader_config.py"


def course_files(root, section: str) -> dict:
    """What a scratch course of ``section`` needs of the course at ``root``, as {relative path: bytes}."""
    root = Path(root)
    files = {CONFIG: read_regular(root / CONFIG, 1 << 20)}
    src = read_tree(root / "source" / section, max_file_bytes=64 << 20)
    files.update({f"source/{section}/{rel}": data for rel, data in src.files.items()})
    data = root / "graders" / "data" / f"{section}.pt"
    if data.is_file():
        files[f"graders/data/{section}.pt"] = read_regular(data, 256 << 20)
    return files


def tree_hash(files: dict) -> str:
    """A content hash of a tree of files ({relative path: bytes}): names and contents, order-free."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def write_course(dest, files: dict, section: str, submissions: dict | None = None) -> Path:
    """Write a scratch course into ``dest``: ``files`` (from :func:`course_files`, or a kit) and, for each
    student, ``submitted/<student>/<section>/`` from {student: {relative path: bytes}}."""
    dest = Path(dest)
    # several sections in one course share nbgrader_config.py: a file already there with these bytes is kept
    new = {rel: data for rel, data in files.items()
           if not ((dest / rel).is_file() and not (dest / rel).is_symlink() and (dest / rel).read_bytes() == data)}
    write_tree(dest, new, replace=False)
    for student, subfiles in (submissions or {}).items():
        write_tree(dest / "submitted" / student / section, subfiles)
    return dest


def alembic_head() -> str:
    """The database version of the installed nbgrader (the head of its alembic migrations), read in this process."""
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    heads = ScriptDirectory(ALEMBIC_DIR).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"nbgrader's database migrations have {len(heads)} heads: {heads}")
    return heads[0]


def new_gradebook(path) -> None:
    """An empty nbgrader gradebook (SQLite) at ``path``: what nbgrader's ``Gradebook`` makes of a missing file —
    its tables, stamped with its database version — without the ``alembic heads`` subprocess it starts to learn
    that version (1.9 s of the 3 s a scratch course's ``generate_assignment`` took).  The version table is written
    first; nbgrader then creates its own tables and, seeing a database that exists, starts nothing."""
    import sqlite3

    from nbgrader.api import Gradebook

    con = sqlite3.connect(str(path))
    try:
        with con:
            con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
            con.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (alembic_head(),))
    finally:
        con.close()
    Gradebook(f"sqlite:///{path}").close()


def memory_folder(min_free_mb: int = 512) -> str | None:
    """Where a scratch course is best written: ``/dev/shm`` when it is a writable tmpfs with room (nbgrader's SQLite
    gradebook then commits without a flush to disk: its part of a notebook's grading 0.33 → 0.14 s measured on the
    2-core machine), else None (the temp folder).  The folder made there is 0700, as in the temp folder, and a
    sandboxed kernel has a /dev/shm of its own."""
    import os

    path = "/dev/shm"
    try:
        st = os.statvfs(path)
        with open("/proc/self/mounts") as f:
            tmpfs = any(line.split()[1:3] == [path, "tmpfs"] for line in f)
    except OSError:
        return None
    if not tmpfs or not os.access(path, os.W_OK | os.X_OK) or st.f_bavail * st.f_frsize < min_free_mb << 20:
        return None
    return path


class ScratchEngines:
    """One SQLAlchemy engine per gradebook URL under the kept prefixes, kept for the life of this process.

    nbgrader opens its ``Gradebook`` six times for one autograded notebook, and each ``Gradebook`` makes a new
    engine: SQLAlchemy then compiles every statement anew (its statement cache belongs to the engine) — 0.16 s
    of a notebook's grading on the 2-core machine.  A Dask worker grades every submission in a scratch course
    at one folder of its own (:func:`task_folder`), so the gradebook's URL repeats from task to task and its
    engine, with its compiled statements, can be kept; the grading run's one writer records every result into the
    course's gradebook, three ``Gradebook``s a notebook (:func:`instructor.gradebook.record_result`).  Only URLs
    under a kept prefix are kept; every other one gets a new engine, as nbgrader made it.  ``Gradebook.close()``
    still disposes of the engine's connections: none outlives a task or a record, and the next task's file (same
    path, new file) is opened afresh."""

    def __init__(self, prefix: str):
        from sqlalchemy import create_engine

        self.prefixes, self._create, self._engines = (prefix,), create_engine, {}

    def __call__(self, url, *args, **kwargs):
        key = (str(url), repr(args), repr(sorted(kwargs.items())))
        if not str(url).startswith(self.prefixes):
            return self._create(url, *args, **kwargs)
        engine = self._engines.get(key)
        if engine is None:
            engine = self._engines[key] = self._create(url, *args, **kwargs)
        return engine


def keep_engines(prefix: str) -> None:
    """nbgrader's gradebooks under ``prefix`` (a task's scratch folder, a ``sqlite:///`` URL prefix; the course's
    gradebook URL) keep their engines in this process (:class:`ScratchEngines`), beside those kept already.
    nbgrader offers no setting for its engine: ``nbgrader.api.create_engine`` is the name its ``Gradebook`` calls."""
    import nbgrader.api

    current = nbgrader.api.create_engine
    if isinstance(current, ScratchEngines):
        if prefix not in current.prefixes:
            current.prefixes += (prefix,)
        return
    nbgrader.api.create_engine = ScratchEngines(prefix)
