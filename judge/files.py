"""Files a student could have shaped, read and written without ever following a link.

A submission folder comes from a student (a git clone, an unzipped archive, the
exchange): it may hold symbolic links, FIFOs, device files or huge files.  Whoever
reads it outside the sandbox — the Dask coordinator, the serial path, the
self-check, nbgrader's own copy step (patched in :mod:`judge.nbgrader_hooks`)
— uses :func:`read_tree`, which takes regular files only (checked with ``lstat``
and opened with ``O_NOFOLLOW``), within a size and a count cap, and reports
everything it refused.  :func:`write_tree` writes such a tree back into a fresh
folder with ``O_EXCL | O_NOFOLLOW``, refusing names that climb out of it.

Only the standard library: this module is imported by the grader's processes,
never by the student's kernel.
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 2000 * 1024      # nbgrader's own CourseDirectory.max_file_size default (kB) for extra files
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_FILES = 200
MAX_DEPTH = 8
SKIP_DIRS = (".ipynb_checkpoints", "__pycache__")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)   # opening a FIFO must not hang the grader
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Refused(Exception):
    """A path that is not a plain file or folder (a link, a FIFO, a device, too large)."""


@dataclass
class Tree:
    """The regular files of a folder (relative path -> bytes) and what was refused (relative path, why)."""

    files: dict = field(default_factory=dict)
    refused: list = field(default_factory=list)


def read_regular(path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link) of at most ``max_bytes``; else :class:`Refused`."""
    try:
        fd = os.open(str(path), os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused("it is a symbolic link") from None
        raise Refused(f"it cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused("it is not a regular file")
        if st.st_size > max_bytes:
            raise Refused(f"it is larger than {max_bytes // 1024} kB")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise Refused(f"it is larger than {max_bytes // 1024} kB")
        return data
    finally:
        os.close(fd)


def plain_dir(path) -> bool:
    """Whether ``path`` is a folder and not a link to one (``lstat``)."""
    try:
        return stat.S_ISDIR(os.lstat(str(path)).st_mode)
    except OSError:
        return False


def plain_below(base, *parts) -> Path | None:
    """``base/parts...`` when no component below ``base`` is a link (folders all the way), else None."""
    here = Path(base)
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            return None
        here = here / part
        if not plain_dir(here):
            return None
    return here


def is_link(path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(str(path)).st_mode)
    except OSError:
        return False


def read_tree(folder, max_file_bytes: int = MAX_FILE_BYTES, max_files: int = MAX_FILES,
              notebook_bytes: int = MAX_NOTEBOOK_BYTES, skip_dirs=SKIP_DIRS) -> Tree:
    """Every regular file under ``folder`` (not following links), within the caps; the rest is refused.

    Notebooks (``*.ipynb``) may be up to ``notebook_bytes``; other files up to ``max_file_bytes``.
    """
    tree = Tree()
    if not plain_dir(folder):
        tree.refused.append((".", "the folder is a link or not a folder"))
        return tree
    _walk(Path(folder), "", tree, 0, max_file_bytes, max_files, notebook_bytes, skip_dirs)
    return tree


def _walk(base: Path, rel: str, tree: Tree, depth, max_file_bytes, max_files, notebook_bytes, skip_dirs):
    here = base / rel if rel else base
    try:
        entries = sorted(os.scandir(here), key=lambda e: e.name)
    except OSError as exc:
        tree.refused.append((rel or ".", f"it cannot be listed ({exc.strerror})"))
        return
    for entry in entries:
        name = f"{rel}/{entry.name}" if rel else entry.name
        try:
            if entry.is_symlink():
                tree.refused.append((name, "it is a symbolic link"))
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in skip_dirs:
                    continue
                if depth >= MAX_DEPTH:
                    tree.refused.append((name, "folders nested too deeply"))
                    continue
                _walk(base, name, tree, depth + 1, max_file_bytes, max_files, notebook_bytes, skip_dirs)
            elif entry.is_file(follow_symlinks=False):
                if len(tree.files) >= max_files:
                    tree.refused.append((name, f"more than {max_files} files"))
                    continue
                cap = notebook_bytes if entry.name.endswith(".ipynb") else max_file_bytes
                tree.files[name] = read_regular(entry.path, cap)
            else:
                tree.refused.append((name, "it is not a regular file"))
        except Refused as why:
            tree.refused.append((name, str(why)))


def _safe_parts(rel: str) -> list[str]:
    parts = rel.replace("\\", "/").split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise Refused(f"the name {rel!r} would leave its folder")
    return parts


def write_tree(dest, files: dict, replace: bool = True) -> None:
    """Write ``files`` (relative path -> bytes) into a fresh folder ``dest``; no name may leave it.

    ``dest`` is removed first when ``replace`` (a link there is unlinked, never followed); files are
    created with ``O_EXCL | O_NOFOLLOW``, so nothing already there is ever written through.
    """
    dest = Path(dest)
    if replace:
        remove(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if not plain_dir(dest):
        raise Refused(f"{dest} is not a plain folder")
    for rel, data in files.items():
        parts = _safe_parts(rel)
        folder = dest
        for part in parts[:-1]:
            folder = folder / part
            try:
                folder.mkdir()
            except FileExistsError:
                if not plain_dir(folder):
                    raise Refused(f"{folder} is not a plain folder") from None
        write_new(folder / parts[-1], data)


def write_new(path, data: bytes, mode: int = 0o644) -> None:
    """Create ``path`` (it must not exist; a link there is refused, not followed) and write ``data``."""
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def remove(path) -> None:
    """Remove a file, a link (not its target) or a whole folder (``shutil.rmtree`` never follows links)."""
    path = Path(path)
    try:
        st = os.lstat(str(path))
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
