"""What another account could change: the folders a grading process imports from or reads Dask's settings from.

A module of its own, importing nothing heavy: ``./course grade`` runs :func:`path_problems` on every worker
(``Client.run``, in the worker's event loop) before the first task, and a function found in a module that imports
nbgrader would import it there while another thread may (:mod:`instructor.workerplugin`)."""
from __future__ import annotations

import os
import stat
import sys


def foreign_writable(path: str) -> str | None:
    """Why another account could change what is found at ``path`` (a folder on ``sys.path``, a Dask config folder),
    or None.  ``path`` (or, when it does not exist, the nearest folder above it) and every folder above it must
    belong to this account or root and be writable by no one else; a folder above it may be writable by all
    when it is sticky (``/tmp``: there only a file's owner renames or deletes it) and the next one down is ours."""
    me, groups = os.geteuid(), {os.getegid()}
    p = os.path.abspath(path or os.getcwd())
    while not os.path.lexists(p) and p != "/":
        p = os.path.dirname(p)
    p = os.path.realpath(p)
    leaf = True
    while True:
        try:
            st = os.stat(p)
        except OSError as exc:
            return f"{p}: {exc.strerror}"
        if st.st_uid not in (0, me):
            return f"{p} belongs to uid {st.st_uid}"
        others = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and not _own_group(st.st_gid, groups))
        if others and (leaf or not st.st_mode & stat.S_ISVTX):   # (the folder below is ours or root's: seen)
            return f"{p} is writable by other accounts (mode {stat.S_IMODE(st.st_mode):o})"
        if p == "/":
            return None
        leaf = False
        p = os.path.dirname(p)


def _own_group(gid: int, groups: set) -> bool:
    """A group of this account's alone (its private group): no other member."""
    import grp

    if gid not in groups:
        return False
    try:
        members = set(grp.getgrgid(gid).gr_mem)
    except KeyError:
        return False
    return members <= {_user_name()}


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return ""


def path_problems() -> list[str]:
    """Every folder on this process's ``sys.path``, and every folder Dask reads its configuration from, that another
    account could write to (:func:`foreign_writable`): what it plants there, this process imports or obeys."""
    import dask.config

    out = []
    for entry in dict.fromkeys([*sys.path, *dask.config.paths]):
        why = foreign_writable(entry)
        if why:
            out.append(f"{entry or '.'}: {why}")
    return out
