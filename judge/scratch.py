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
