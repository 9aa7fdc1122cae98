"""nbgrader's own file handling, made link-safe for files a student could have shaped.

``nbgrader autograde`` (the command line, formgrader's Autograde button, ``./course
grade`` in every mode) finds ``submitted/<student>/<assignment>/*.ipynb`` with
``glob`` and copies the submission's other files with ``shutil.copy``, reads
``timestamp.txt`` with ``open`` and ``chmod``s what it wrote: each of those follows a
symbolic link, so a link in a submission (git, unzip and tar keep them) could make
the grader read, copy or change a file of the instructor's — the reference data, the
gradebook, another student's work.  :func:`install` (called by ``nbgrader_config.py``)
patches those four places for the converters that read student files (autograde,
feedback):

* a submission whose folder, or notebook, is a link is skipped, with a warning;
* the other files are copied by :func:`judge.files.read_tree`: regular files
  only, within ``CourseDirectory.max_file_size``, links and special files skipped;
* ``timestamp.txt`` is read only if it is a small regular file;
* permissions are set on regular files and folders only, never through a link.
"""
from __future__ import annotations

import os

from .files import Refused, is_link, plain_below, read_regular, read_tree, remove, write_new


def _guarded(converter) -> bool:
    """Converters whose input a student could have shaped: autograde (submitted/) and feedback (autograded/)."""
    cd = converter.coursedir
    return converter._input_directory in (cd.submitted_directory, cd.autograded_directory)


def _input_base(converter) -> str:
    return os.path.normpath(converter.coursedir.format_path(converter._input_directory, ".", "."))


def _plain_assignment(converter, path: str) -> bool:
    base = _input_base(converter)
    rel = os.path.relpath(os.path.normpath(path), base)
    parts = [p for p in rel.split(os.sep) if p not in ("", ".")]
    return not rel.startswith("..") and plain_below(base, *parts) is not None


def install():
    """Patch nbgrader's converters and CourseDirectory once per process."""
    from nbgrader.converters.base import BaseConverter
    from nbgrader.coursedir import CourseDirectory

    if getattr(BaseConverter, "_attncourse_links", False):
        return
    BaseConverter._attncourse_links = True
    original_init_notebooks = BaseConverter.init_notebooks
    original_init_assignment = BaseConverter.init_assignment
    original_timestamp = CourseDirectory.get_existing_timestamp

    def init_notebooks(self):
        original_init_notebooks(self)
        if not _guarded(self):
            return
        for assignment in list(self.assignments):
            if not _plain_assignment(self, assignment):
                self.log.warning("Skipping %s: it, or a folder above it, is a link", assignment)
                del self.assignments[assignment]
                continue
            notebooks = []
            for nb in self.assignments[assignment]:
                if is_link(nb) or not os.path.isfile(nb):
                    self.log.warning("Skipping %s: not a regular file (a link?)", nb)
                else:
                    notebooks.append(nb)
            if notebooks:
                self.assignments[assignment] = notebooks
            else:
                del self.assignments[assignment]

    def init_assignment(self, assignment_id, student_id):
        if not _guarded(self):
            return original_init_assignment(self, assignment_id, student_id)
        from nbgrader.utils import is_ignored

        source = self._format_source(assignment_id, student_id)
        dest = self._format_dest(assignment_id, student_id)
        tree = read_tree(source, max_file_bytes=int(self.coursedir.max_file_size) * 1024)
        for rel, why in tree.refused:
            self.log.warning("Not copying %s: %s", os.path.join(source, rel), why)
        for rel, data in tree.files.items():
            if rel.endswith(".ipynb") or is_ignored(os.path.join(source, rel), self.coursedir.ignore):
                continue
            path = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            remove(path)
            self.log.info("Copying %s -> %s", os.path.join(source, rel), path)
            write_new(path, data)

    def set_permissions(self, assignment_id, student_id):
        """nbgrader's set_permissions, on regular files and real folders only (os.chmod follows links)."""
        permissions = int(str(self.permissions), 8)
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        folders = [dest]
        for dirname, _, filenames in os.walk(dest):   # os.walk does not enter linked folders
            folders.append(dirname)
            for name in filenames:
                path = os.path.join(dirname, name)
                if not is_link(path):
                    os.chmod(path, permissions)
        if self.coursedir.groupshared:
            folders.append(self.coursedir.format_path(self._output_directory, ".", "."))
            for folder in dict.fromkeys(folders):
                if is_link(folder) or not os.path.isdir(folder):
                    continue
                mode = os.stat(folder).st_mode
                if mode & 0o2770 != 0o2770:
                    try:
                        os.chmod(folder, (mode | 0o2770) & 0o2777)
                    except PermissionError:
                        self.log.warning("Could not update permissions of %s to make it groupshared", folder)

    def get_existing_timestamp(self, dest_path):
        path = os.path.join(dest_path, "timestamp.txt")
        if not os.path.lexists(path):
            return None
        try:
            read_regular(path, 4096)
        except Refused as why:
            self.log.warning("Ignoring %s: %s", path, why)
            return None
        return original_timestamp(self, dest_path)

    BaseConverter.init_notebooks = init_notebooks
    BaseConverter.init_assignment = init_assignment
    BaseConverter.set_permissions = set_permissions
    CourseDirectory.get_existing_timestamp = get_existing_timestamp
